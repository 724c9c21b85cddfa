"""A model's files from a local folder or a hub model id, resolved as transformers and vLLM resolve them.

The GPU configs name models by hub id (`Qwen/Qwen2.5-VL-7B-Instruct`); whatever reads a model's files
directly (its config.json for the checkpoint fingerprint, the folder a local server serves) goes through
`model_dir`: a local folder as it is, else the snapshot in the local Hugging Face cache (HF_HUB_CACHE /
HF_HOME), downloaded first unless HF_HUB_OFFLINE is set.
"""

from __future__ import annotations

import os
from pathlib import Path


class ModelNotFoundError(FileNotFoundError):
    """Neither a local folder nor a hub id whose files can be had; the message says where it looked."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().upper() in ("1", "ON", "YES", "TRUE")


def model_dir(path_or_id: str | Path, files: list[str] | None = None) -> Path:
    """`files`: fetch only these from the hub (e.g. the config files), not the weights."""
    local = Path(path_or_id).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    cache = os.environ.get("HF_HUB_CACHE") or None  # read now: huggingface_hub reads it at import
    try:
        return Path(
            snapshot_download(
                str(path_or_id), cache_dir=cache, local_files_only=_offline(), allow_patterns=files
            )
        )
    except Exception as exc:  # invalid id, not cached offline, no network, gated repo, ...
        where = cache or "the default Hugging Face cache (HF_HOME)"
        mode = "HF_HUB_OFFLINE is set: the cache only" if _offline() else "download failed"
        raise ModelNotFoundError(
            f"model {str(path_or_id)!r} is not a local folder, and as a hub id it is not in {where} "
            f"({mode}): {type(exc).__name__}: {exc}"
        ) from exc
