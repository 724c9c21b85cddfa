"""LoRA weight sync to stock vLLM servers: the trainer saves the adapter only (PEFT format, megabytes instead
of the whole model), each server loads it under a versioned name through vLLM's runtime LoRA API
(`/v1/load_lora_adapter`; the server runs with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), and
every request of that weight version names it. Version 0 is the base model: a fresh adapter's B matrices are
zero, so it serves exactly what the base serves.

Every sync is verified, because an adapter that never reaches the server looks like staleness, not an error:
- the server lists the new name;
- a fixed probe's logprobs under the new name differ from those under the previous one whenever what the
  adapter serves does: its tensors changed, unless every B matrix is zero in both versions (B A = 0: each
  serves the base model). A load that silently served old weights would not.
Adapters older than the staleness window are unloaded after the new one serves. Before training, each
server must take the run's initial adapter (`check_serves_adapters`): a server started without LoRA, or with
a smaller maximum rank, is refused then, not after the first step's rollouts.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from .errors import InferenceServerError, ServerRequestError, WeightUpdateError
from .vllm_server import VLLMServer

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
PROBE_TOKENS = list(range(16, 48))  # byte-level ids every tokenizer we serve has


def is_adapter(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_name(lora_name: str, version: int, digest: str) -> str:
    """The served name of weight version `version` whose tensors have sha256 `digest`, e.g.
    'default_lora-v3-1f2e3d4c5b6a'. The digest is in the name because vLLM keys its prefix cache by adapter
    name and path: the same version synced again from the same directory with other tensors (a resume from an
    older checkpoint, a trial started over, while the server still holds the old adapter) would reuse prompts
    cached under the old tensors (0.52 logprob off on the tiny model)."""
    return f"{lora_name}-v{version}-{digest[:12]}"


def adapter_digest(path: str | Path) -> str:
    """What the adapter's tensors are: a hash of its weights file."""
    return hashlib.sha256(_weights_file(path).read_bytes()).hexdigest()


def adapter_inert(path: str | Path) -> bool:
    """Whether every B matrix of the adapter is zero: it then serves exactly the base model (B A = 0), as a
    fresh adapter does, and as one still does after updates whose gradients were all zero (AdamW's weight
    decay moves A all the same)."""
    f = _weights_file(path)
    if f.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(f), "pt") as sf:
            return all(not sf.get_tensor(k).any() for k in sf.keys() if "lora_B" in k)  # noqa: SIM118
    import torch

    state = torch.load(f, map_location="cpu", weights_only=True)
    return all(not t.any() for k, t in state.items() if "lora_B" in k)


def _weights_file(path: str | Path) -> Path:
    for name in ADAPTER_WEIGHTS:
        f = Path(path) / name
        if f.is_file():
            return f
    raise ValueError(f"{path} has {ADAPTER_CONFIG} but no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")


async def load_adapter(
    server: VLLMServer, path: str, name: str, *, previous: str | None, changed: bool, unload: list[str]
) -> float:
    """Serve the adapter at `path` as `name` and verify it (module doc). `previous`: the name the last
    version was served under (None: the base model); `changed`: whether its tensors differ from the
    previous version's. Returns the probe's max |Δ logprob| between the two."""
    before = await server.prompt_logprobs(PROBE_TOKENS, previous)
    await server.load_lora_adapter(name, path)
    served = await server.served_models()
    if name not in served:
        raise WeightUpdateError(
            server.address, "/v1/models", f"adapter {name} ({path}) was loaded but is not served: {served}"
        )
    after = await server.prompt_logprobs(PROBE_TOKENS, name)
    moved = max(abs(a - b) for a, b in zip(after, before, strict=True))
    if changed and moved == 0.0:
        raise WeightUpdateError(
            server.address,
            "/v1/load_lora_adapter",
            f"adapter {name} ({path}) serves exactly what {previous or 'the base model'} served although "
            "its tensors changed: the server did not take the new adapter",
        )
    for old in unload:
        try:
            await server.unload_lora_adapter(old)
        except ServerRequestError as exc:
            if exc.status != 404:  # already gone (a restarted server) is fine
                raise
    return moved


async def check_serves_adapters(server: VLLMServer, path: str, name: str) -> None:
    """Load the adapter at `path` (the run's initial one) under `name` plus a suffix of its own and unload
    it again; WeightUpdateError saying what to change if the server cannot serve it. The suffix keeps checks
    that meet on one server apart (several trainer ranks, two runs): one check's unload would otherwise take
    another's adapter, and the second unload answers 404."""
    name = f"{name}-{uuid.uuid4().hex[:8]}"
    endpoint = "/v1/load_lora_adapter"
    try:
        await server.load_lora_adapter(name, path)
    except ServerRequestError as exc:
        if exc.status == 404:  # the route exists only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
            raise WeightUpdateError(
                server.address,
                endpoint,
                "the server has no runtime LoRA API: start it with --enable-lora and "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (VLLM_LORA_RANK=<actor.lora_rank> in .env does both)",
            ) from exc
        raise WeightUpdateError(
            server.address, endpoint, f"the server refuses the run's adapter: {exc}"
        ) from exc
    except InferenceServerError as exc:  # vLLM answers 500 to an adapter it cannot take, e.g. a rank too high
        raise WeightUpdateError(
            server.address,
            endpoint,
            f"the server cannot serve the run's adapter ({exc}); an adapter of actor.lora_rank above the "
            "server's --max-lora-rank (VLLM_LORA_RANK) is refused so",
        ) from exc
    await server.unload_lora_adapter(name)
