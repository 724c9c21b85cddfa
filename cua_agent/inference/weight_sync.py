"""Weight sync by disk to stock vLLM servers: reload in place from an HF checkpoint directory.

Sequence per server (DESIGN §5): [pause] → reload → (tied models: check head == embeddings, see
checkpoints.py) → reset prefix, encoder and multimodal caches → set the served weight version → [resume]. Resume runs even when a step fails, so a
failed update leaves the server serving the previous weights under the previous version, never paused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from .errors import InferenceServerError, ServerUnavailableError, WeightUpdateError
from .tied_head import ties_embeddings, write_explicit_head
from .vllm_server import VLLMServer


async def update_servers_from_disk(
    servers: list[VLLMServer],
    path: str,
    version: int,
    *,
    tied_embeddings: bool | None = None,
    pause: bool = True,
) -> None:
    """Load `path` as weight version `version` on every server (concurrently); raises the first failure
    after all have finished. `pause=False` when the caller (AReaL's FSDP engine) pauses and resumes itself."""
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"weight update: {path} is not an HF checkpoint directory (no config.json)")
    tied = ties_embeddings(path) if tied_embeddings is None else tied_embeddings
    if tied:
        write_explicit_head(path)  # see checkpoints.py: the reload must load the head explicitly
    results = await asyncio.gather(
        *(_update_one(s, path, version, tied=tied, pause=pause) for s in servers), return_exceptions=True
    )
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def _update_one(server: VLLMServer, path: str, version: int, *, tied: bool, pause: bool) -> None:
    if pause:
        await server.pause()
    try:
        await server.reload_weights(path)
        if tied:
            await verify_tied_head(server, path)
        await server.reset_caches()
        await server.set_weight_version(version)
    except (WeightUpdateError, ServerUnavailableError):
        raise  # unreachable stays typed as such: the caller decides (a restarted server is re-pushed later)
    except InferenceServerError as exc:
        raise WeightUpdateError(
            server.address, "(weight update)", f"loading {path} as v{version} failed: {exc}"
        ) from exc
    finally:
        if pause:
            await server.resume()


async def verify_tied_head(server: VLLMServer, path: str) -> None:
    """After reloading a tied checkpoint, the served head must equal the served embeddings (per TP rank)."""
    by_rank: dict[str, dict[str, str]] = {}
    for name, digest in (await server.weight_checksums()).items():
        rank, _, param = name.rpartition(":")
        if param.endswith("lm_head.weight"):
            by_rank.setdefault(rank, {})["head"] = digest
        elif param.endswith("embed_tokens.weight") and "visual" not in param:
            by_rank.setdefault(rank, {})["embed"] = digest
    if not by_rank or any("head" not in d for d in by_rank.values()):
        raise WeightUpdateError(
            server.address,
            "/weight_checker",
            f"{path} ties lm_head to the embeddings but the server serves a tied model, whose head an in-place "
            "reload leaves stale; start the server through scripts/run_vllm_cpu.sh or run_vllm_base.sh, "
            "which serve tied checkpoints with an explicit head",
        )
    stale = sorted(rank for rank, d in by_rank.items() if d.get("head") != d.get("embed"))
    if stale:
        raise WeightUpdateError(
            server.address,
            "/weight_checker",
            f"after loading {path} the head differs from the embeddings on {stale}",
        )
