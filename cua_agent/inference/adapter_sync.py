"""LoRA weight sync to stock vLLM servers: the trainer saves the adapter only (PEFT format, megabytes instead
of the whole model), each server loads it under a versioned name through vLLM's runtime LoRA API
(`/v1/load_lora_adapter`; the server runs with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), and
every request of that weight version names it. Version 0 is the base model: a fresh adapter's B matrices are
zero, so it serves exactly what the base serves.

Every sync is verified, because an adapter that never reaches the server looks like staleness, not an error:
- the server lists the new name;
- a fixed probe's logprobs under the new name differ from those under the previous one whenever what the
  adapter serves does: its tensors changed, unless every B matrix is zero in both versions (B A = 0: each
  serves the base model). A load that silently served old weights would not. The probe is the top next-token
  logprobs after a few fixed prompts: it runs while the server generates (other ranks' rollouts), which a
  `prompt_logprobs` request cannot do on vLLM's CPU build (`VLLMServer.next_token_logprobs`).
Adapters older than the staleness window are unloaded after the new one serves. Before training, each
server loads the run's initial adapter as version 0 (`serve_initial_adapter`): a server started without LoRA,
or with a smaller maximum rank, is refused then, not after the first step's rollouts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import InferenceServerError, ServerRequestError, WeightUpdateError
from .vllm_server import VLLMServer

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
PROBE_TOKENS = list(range(16, 48))  # byte-level ids every tokenizer we serve has
PROBE_PROMPTS = [PROBE_TOKENS[:n] for n in (8, 16, 24, 32)]


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
    before = await server.next_token_logprobs(PROBE_PROMPTS, previous)
    await server.load_lora_adapter(name, path)
    served = await server.served_models()
    if name not in served:
        raise WeightUpdateError(
            server.address, "/v1/models", f"adapter {name} ({path}) was loaded but is not served: {served}"
        )
    after = await server.next_token_logprobs(PROBE_PROMPTS, name)
    moved = max(top_logprobs_moved(a, b) for a, b in zip(after, before, strict=True))
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


def top_logprobs_moved(after: dict[int, float], before: dict[int, float]) -> float:
    """A lower bound of max |Δ logprob| over the next tokens, from two top-k lists: exact on the tokens in
    both; a token in only one list is at most the other list's lowest there."""
    moved = max((abs(after[t] - before[t]) for t in after.keys() & before.keys()), default=0.0)
    for mine, other in ((after, before), (before, after)):
        floor = min(other.values(), default=0.0)
        moved = max([moved, *(mine[t] - floor for t in mine.keys() - other.keys())])
    return moved


async def serve_initial_adapter(server: VLLMServer, path: str, name: str) -> None:
    """Serve the run's initial adapter (`path`, every B zero: exactly the base model) as `name`, version 0's
    name, so that no request of the run names the base model: vLLM's CPU LoRA kernels index the adapter
    slots with the base model's -1, so a base-model request batched with adapter requests was served with
    the last slot's adapter. WeightUpdateError saying what to change if the server cannot serve it."""
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
