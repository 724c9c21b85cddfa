"""The agent's only view of a model: an OpenAI-style chat call that returns a `ModelCall`.

- `EngineChatClient` (training) runs over `StockVLLMEngine.achat`: the call carries exactly what the
  trainer needs (the server's prompt ids with image tokens expanded, output ids, their logprobs, the weight
  version) and the PNG bytes of the images sent.
- `OpenAIChatClient` (evaluation) wraps `openai.AsyncOpenAI` pointed at any OpenAI-compatible server: its
  calls carry the text and the latency, no token ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.errors import MalformedResponseError, ServerRequestError, ServerUnavailableError
from cua_agent.inference.model_call import ModelCall
from cua_agent.inference.vllm_server import SamplingParams


class ChatClient(Protocol):
    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall: ...


@dataclass
class EngineChatClient:
    """Training client: one instance per episode (its rid keeps the episode on one server)."""

    engine: StockVLLMEngine
    sampling: SamplingParams
    rid: str

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall:
        call = await self.engine.achat(messages, self.sampling, rid=self.rid)
        call.images = list(images)
        return call


class OpenAIChatClient:
    """Evaluation client for any OpenAI-compatible endpoint (vLLM, a hosted API)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        sampling: SamplingParams | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 2,
    ):
        from openai import AsyncOpenAI

        self.model, self.base_url, self.max_retries = model, base_url, max_retries
        self.sampling = sampling or SamplingParams()
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall:
        """Raises the inference path's typed errors (the episode loop ends the episode as an infrastructure
        failure): ServerUnavailableError once the openai client's own retries are spent (connection errors,
        timeouts, 5xx), ServerRequestError for a 4xx, MalformedResponseError for an answer without choices."""
        import openai

        start = time.perf_counter()
        endpoint = "/chat/completions"
        try:
            resp = await self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=self.sampling.max_tokens,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
            )
        except openai.APIStatusError as exc:
            if exc.status_code < 500:
                raise ServerRequestError(self.base_url, endpoint, exc.status_code, str(exc)) from exc
            raise ServerUnavailableError(
                self.base_url, endpoint, self.max_retries + 1, time.perf_counter() - start, str(exc)
            ) from exc
        except (
            openai.APIConnectionError,
            openai.APITimeoutError,
        ) as exc:  # APITimeoutError: a connection error
            raise ServerUnavailableError(
                self.base_url, endpoint, self.max_retries + 1, time.perf_counter() - start, str(exc)
            ) from exc
        if not resp.choices:
            raise MalformedResponseError(self.base_url, endpoint, "no choices in the answer")
        choice = resp.choices[0]
        return ModelCall(
            choice.message.content or "",
            finish_reason=choice.finish_reason or "stop",
            latency_s=time.perf_counter() - start,
            images=list(images),
        )

    async def close(self) -> None:
        await self._client.close()
