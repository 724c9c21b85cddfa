"""LoRA weight sync to stock vLLM servers: the trainer saves the adapter only (PEFT format, megabytes instead
of the whole model), each server loads it under a versioned name through vLLM's runtime LoRA API
(`/v1/load_lora_adapter`; the server runs with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), and
every request of that weight version names it. Version 0 is the base model: a fresh adapter's B matrices are
zero, so it serves exactly what the base serves.

Every sync is verified, because an adapter that never reaches the server looks like staleness, not an error:
- the server lists the new name;
- a fixed probe's logprobs under the new name differ from those under the previous one whenever the
  adapter's tensors do (a load that silently served old weights would not).
Adapters older than the staleness window are unloaded after the new one serves.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import ServerRequestError, WeightUpdateError
from .vllm_server import VLLMServer

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
PROBE_TOKENS = list(range(16, 48))  # byte-level ids every tokenizer we serve has


def is_adapter(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_name(lora_name: str, version: int) -> str:
    """The served name of weight version `version` (AReaL's versioned form, e.g. 'lora-v3')."""
    return f"{lora_name}-v{version}"


def adapter_digest(path: str | Path) -> str:
    """What the adapter's tensors are: a hash of its weights file."""
    for name in ADAPTER_WEIGHTS:
        f = Path(path) / name
        if f.is_file():
            return hashlib.sha256(f.read_bytes()).hexdigest()
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
