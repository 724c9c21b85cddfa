"""HF checkpoint handling for serving models whose lm_head is tied to the input embeddings.

Measured on vLLM 0.32 (CPU): an in-place `reload_weights` skips `lm_head` when the served config ties it,
so the head's post-load processing (the CPU build prepacks its GEMM weight) never reruns and the head
keeps serving the *old* embeddings (logprob error ~0.1–1 nat after one update). Real Qwen2.5-VL-3B and
Qwen3-VL-2B/4B tie them.

Remedy, with an unmodified server: serve tied models *untied* with an explicit head equal to the
embeddings (`prepare_serving_copy`: symlinked shards + `lm_head.safetensors` + an untied config.json), and
give every weight-sync checkpoint the explicit head (`write_explicit_head`). The reload then loads and
processes the head like any other weight. Mathematically the served model is the tied model.

    python -m cua_agent.inference.tied_head serving-copy SRC DST   # prints the directory to serve
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HEAD_FILE = "lm_head.safetensors"
HEAD_KEY = "lm_head.weight"
INDEX_FILE = "model.safetensors.index.json"


def read_config(path: str | Path) -> dict:
    config_file = Path(path) / "config.json"
    try:
        return json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {config_file}: {exc}") from exc


def ties_embeddings(path: str | Path) -> bool:
    """Whether the checkpoint's config ties lm_head to the input embeddings (top level or text_config)."""
    config = read_config(path)
    text = config.get("text_config") or {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def _weight_files(path: Path) -> list[Path]:
    files = sorted(p for p in path.glob("*.safetensors") if p.name != HEAD_FILE)
    if not files:
        raise ValueError(f"{path}: no *.safetensors weights")
    return files


def _embedding_key(path: Path) -> tuple[str, Path]:
    from safetensors import safe_open

    for file in _weight_files(path):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if key.endswith("embed_tokens.weight") and "visual" not in key:
                    return key, file
    raise ValueError(f"{path}: no text embedding (…embed_tokens.weight) in the weights")


def write_explicit_head(path: str | Path) -> None:
    """Add `lm_head.weight` = the input embeddings to a checkpoint (idempotent; the index, if any, too)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = Path(path)
    key, file = _embedding_key(path)
    with safe_open(str(file), "pt") as f:
        embedding = f.get_tensor(key).contiguous()
    tmp = path / (HEAD_FILE + ".tmp")
    save_file({HEAD_KEY: embedding}, str(tmp), metadata={"format": "pt"})
    tmp.chmod(0o644)
    os.replace(tmp, path / HEAD_FILE)  # atomic: a reader sees the old head or the new one
    index = path / INDEX_FILE
    if index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"][HEAD_KEY] = HEAD_FILE
        index.write_text(json.dumps(data, indent=2))


def _untie(config: dict) -> dict:
    config = dict(config, tie_word_embeddings=False)
    if isinstance(config.get("text_config"), dict):
        config["text_config"] = dict(config["text_config"], tie_word_embeddings=False)
    return config


def _fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.iterdir()):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def prepare_serving_copy(src: str | Path, dst: str | Path) -> Path:
    """Directory a vLLM server should load for `src`: `src` itself if untied, else an untied copy with an
    explicit head (weights symlinked, not copied). Cached: rebuilt only when `src` changes."""
    src, dst = Path(src).resolve(), Path(dst)
    if not ties_embeddings(src):
        return src
    stamp = dst / ".source"
    want = f"{src}\n{_fingerprint(src)}\n"
    if stamp.is_file() and stamp.read_text() == want:
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dst.name + ".tmp-", dir=dst.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a server in another container/user must read it
    try:
        for p in src.iterdir():
            if p.is_file() and not p.name.startswith(".") and p.name not in ("config.json", HEAD_FILE):
                (tmp / p.name).symlink_to(p)
        (tmp / "config.json").write_text(json.dumps(_untie(read_config(src)), indent=2))
        if (tmp / INDEX_FILE).exists():  # the index gets a new entry: own copy, not a link
            (tmp / INDEX_FILE).unlink()
            shutil.copy(src / INDEX_FILE, tmp / INDEX_FILE)
        write_explicit_head(tmp)
        stamp_tmp = tmp / ".source"
        stamp_tmp.write_text(want)
        if dst.exists():
            shutil.rmtree(dst)
        tmp.rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "serving-copy":
        print(__doc__, file=sys.stderr)
        return 2
    print(prepare_serving_copy(argv[1], argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
