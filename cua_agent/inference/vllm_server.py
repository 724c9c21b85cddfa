"""Client of a stock vLLM OpenAI-compatible server (CPU build here, CUDA build on GPUs; no patched server).

Everything RL needs goes over vLLM's public and dev-mode endpoints (the server runs with
VLLM_SERVER_DEV_MODE=1): chat completions that return the exact prompt ids (image tokens expanded by the
server), output ids and per-token logprobs; pause/resume; in-place weight reload from a checkpoint
directory; cache resets; the served weight version.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .errors import MalformedResponseError
from .http import DEFAULT_RETRY, RetryPolicy, request_json
from .model_call import ModelCall

_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def loop_session() -> aiohttp.ClientSession:
    """One pooled HTTP session per event loop (rollouts and weight updates run on different loops)."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        _sessions[loop] = session
    return session


async def close_loop_session() -> None:
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


def close_sessions_of_other_loops(timeout_s: float = 5.0) -> None:
    """Close the sessions of event loops running in other threads (AReaL's rollout thread), from outside."""
    for loop, session in list(_sessions.items()):
        if loop.is_running() and not session.closed:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout_s)
        _sessions.pop(loop, None)


@dataclass
class SamplingParams:
    """Every sampling parameter, sent explicitly with each request. The trainer recomputes the plain
    (temperature-scaled) distribution and the server returns logprobs from before its logits processors,
    so the tokens must be sampled from that distribution: no truncation, no penalties. A parameter left out
    would take the model's generation_config.json default (Qwen2.5-VL-7B-Instruct ships
    repetition_penalty 1.05, top_k, top_p); the launchers also pass `--generation-config vllm`."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # fixed-length generations (benchmarks, tests)
    # Never sampled (logit bias -100), e.g. vision placeholders: a sampled <|image_pad|> would be read as an
    # image slot by the trainer's model. vLLM returns raw logprobs (before the bias), like the trainer's.
    banned_token_ids: list[int] = field(default_factory=list)

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "stop_token_ids": list(self.stop_token_ids),
            # Token ids are the truth for training; text is derived. Keep special tokens in the text so the
            # text and the ids agree.
            "skip_special_tokens": False,
            "ignore_eos": self.ignore_eos,
        }
        if self.seed is not None:
            payload["seed"] = self.seed
        if self.banned_token_ids:
            payload["logit_bias"] = {str(t): -100 for t in self.banned_token_ids}
        return payload


class VLLMServer:
    """One vLLM server. Methods are coroutines; each request is bounded by `policy`."""

    def __init__(self, address: str, *, model: str | None = None, policy: RetryPolicy = DEFAULT_RETRY):
        self.address = address
        self.model = model
        self.policy = policy

    def __repr__(self) -> str:
        return f"VLLMServer({self.address!r})"

    async def _call(
        self,
        endpoint: str,
        payload: dict[str, Any] | None = None,
        *,
        method: str = "POST",
        policy: RetryPolicy | None = None,
    ) -> Any:
        return await request_json(
            loop_session(), self.address, endpoint, payload, method=method, policy=policy or self.policy
        )

    # ---- generation -------------------------------------------------------------------------------------
    async def chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, *, model: str | None = None
    ) -> ModelCall:
        """Chat completion with images; returns the server's own prompt ids and the sampled ids + logprobs.
        `model`: the served name to ask (a LoRA adapter's), else this server's `model`, else its default."""
        payload = {
            "messages": messages,
            **sampling.to_payload(),
            "logprobs": True,
            "return_token_ids": True,
        }
        if model or self.model:
            payload["model"] = model or self.model
        start = time.perf_counter()
        body = await self._call("/v1/chat/completions", payload)
        try:
            choice = body["choices"][0]
            prompt_ids = body["prompt_token_ids"]
            output_ids = choice["token_ids"]
            content = (choice.get("logprobs") or {}).get("content") or []
            logprobs = [float(t["logprob"]) for t in content]
            finish = choice.get("finish_reason") or "stop"
            text = (choice.get("message") or {}).get("content") or ""
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise MalformedResponseError(
                self.address, "/v1/chat/completions", f"missing field: {exc!r}"
            ) from exc
        self._check_ids(prompt_ids, output_ids, logprobs, "/v1/chat/completions")
        return ModelCall(
            text,
            prompt_ids,
            output_ids,
            logprobs,
            finish,
            time.perf_counter() - start,
            server=self.address,
            model=str(body.get("model") or ""),
        )

    async def complete_tokens(
        self, prompt_token_ids: list[int], sampling: SamplingParams, *, model: str | None = None
    ) -> ModelCall:
        """Token-in, token-out completion (text-only prompts); `model` as in `chat`."""
        payload = {
            "prompt": list(prompt_token_ids),
            **sampling.to_payload(),
            "logprobs": 0,
            "return_token_ids": True,
        }
        if model or self.model:
            payload["model"] = model or self.model
        start = time.perf_counter()
        body = await self._call("/v1/completions", payload)
        try:
            choice = body["choices"][0]
            output_ids = choice["token_ids"]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
            finish = choice.get("finish_reason") or "stop"
            text = choice.get("text") or ""
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise MalformedResponseError(self.address, "/v1/completions", f"missing field: {exc!r}") from exc
        prompt_ids = list(prompt_token_ids)
        self._check_ids(prompt_ids, output_ids, logprobs, "/v1/completions")
        return ModelCall(
            text,
            prompt_ids,
            output_ids,
            logprobs,
            finish,
            time.perf_counter() - start,
            server=self.address,
            model=str(body.get("model") or ""),
        )

    def _check_ids(self, prompt: Any, output: Any, logprobs: list[float], endpoint: str) -> None:
        if not isinstance(prompt, list) or not isinstance(output, list):
            raise MalformedResponseError(
                self.address, endpoint, "token ids are not lists (return_token_ids ignored?)"
            )
        if len(output) != len(logprobs):
            raise MalformedResponseError(
                self.address, endpoint, f"{len(output)} output ids but {len(logprobs)} logprobs"
            )

    # ---- control ----------------------------------------------------------------------------------------
    async def healthy(self, timeout_s: float = 5.0) -> bool:
        try:
            await self._call("/health", method="GET", policy=RetryPolicy(attempts=1, timeout_s=timeout_s))
            return True
        except Exception:
            return False

    async def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.healthy():
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM server {self.address} not healthy after {timeout_s:.0f}s")
            await asyncio.sleep(1.0)

    async def pause(self, mode: str = "abort") -> None:
        """Stop scheduling; `abort` ends in-flight requests (finish_reason 'abort'), `wait` drains them."""
        await self._call(f"/pause?mode={mode}")

    async def resume(self) -> None:
        await self._call("/resume")

    async def is_paused(self) -> bool:
        return bool((await self._call("/is_paused", method="GET"))["is_paused"])

    async def reload_weights(self, path: str) -> None:
        """Reload every weight in place from an HF checkpoint directory (vLLM's worker reload_weights)."""
        await self._call("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}})

    async def reset_caches(self) -> None:
        # Prefix/encoder/multimodal caches hold values computed by the old weights; skipping these resets
        # crashed the engine on the next image request (docs/architecture.md, vLLM).
        for endpoint in ("/reset_prefix_cache", "/reset_encoder_cache", "/reset_mm_cache"):
            await self._call(endpoint)

    async def set_weight_version(self, version: int) -> None:
        await self._call("/update_weight_version", {"new_version": str(version)})

    async def served_models(self) -> list[str]:
        """Every name the server answers to: the model, then the LoRA adapters loaded."""
        return [str(m["id"]) for m in (await self._call("/v1/models", method="GET"))["data"]]

    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Serve the PEFT adapter at `path` as `name` (needs --enable-lora and
        VLLM_ALLOW_RUNTIME_LORA_UPDATING=True on the server)."""
        # in place: a name a previous run of the same trial left loaded is replaced, not refused (HTTP 400)
        await self._call(
            "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path, "load_inplace": True}
        )

    async def unload_lora_adapter(self, name: str) -> None:
        await self._call("/v1/unload_lora_adapter", {"lora_name": name})

    async def next_token_logprobs(
        self, prompts: list[list[int]], model: str | None = None, top: int = 20
    ) -> list[dict[int, float]]:
        """For each prompt (token ids), the `top` most likely next tokens and their logprobs under `model`.
        Sampled-position logprobs, not `prompt_logprobs`: vLLM's CPU LoRA path sizes the logits of prompt
        logprobs by the batch's sampled requests, and a prompt-logprobs request sharing an engine step with
        other requests on a server with a LoRA-wrapped lm_head kills the engine."""
        payload: dict[str, Any] = {
            "prompt": [list(p) for p in prompts],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": top,
            "return_tokens_as_token_ids": True,  # keys "token_id:<id>": distinct tokens never collide
        }
        if model or self.model:
            payload["model"] = model or self.model
        body = await self._call("/v1/completions", payload)
        try:
            choices = sorted(body["choices"], key=lambda c: int(c["index"]))
            tops = [c["logprobs"]["top_logprobs"][0] for c in choices]
            result = [{int(k.rsplit(":", 1)[1]): float(v) for k, v in t.items()} for t in tops]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedResponseError(self.address, "/v1/completions", f"top logprobs: {exc!r}") from exc
        if len(result) != len(prompts):
            raise MalformedResponseError(
                self.address, "/v1/completions", f"{len(result)} choices for {len(prompts)} prompts"
            )
        return result

    async def served_model(self) -> str:
        """The name the server serves its model under (OpenAI API requests must name it)."""
        return str((await self._call("/v1/models", method="GET"))["data"][0]["id"])

    async def weight_version(self) -> int | None:
        """The version last set by a weight update; None while it serves the weights it started with
        (vLLM reports "default" then)."""
        value = str((await self._call("/weight_info", method="GET")).get("weight_version"))
        return int(value) if value.lstrip("-").isdigit() else None

    async def weight_checksums(self) -> dict[str, str]:
        return (await self._call("/weight_checker", {"action": "checksum"}))["checksums"]
