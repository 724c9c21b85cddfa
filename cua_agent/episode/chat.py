"""The agent's only view of a model: an OpenAI-style chat call.

- `EngineChatClient` (training) runs over `StockVLLMEngine.achat` and records, for every call, exactly
  what the trainer needs: the server's prompt ids (image tokens expanded), output ids, their logprobs, the
  weight version, and the PNG bytes of the images sent.
- `OpenAIChatClient` (evaluation) wraps `openai.AsyncOpenAI` pointed at any OpenAI-compatible server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.vllm_server import SamplingParams


@dataclass
class CallRecord:
    """One model call, exactly as the policy saw and produced it."""

    prompt_token_ids: list[int]
    output_token_ids: list[int]
    output_logprobs: list[float]
    version: int
    images: list[bytes]  # PNG bytes, in the order they appear in the prompt
    finish_reason: str
    latency_s: float
    attempts: int = 1


@dataclass
class ChatReply:
    text: str
    record: CallRecord | None = None  # None for clients that do not train (evaluation)


class ChatClient(Protocol):
    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ChatReply: ...


@dataclass
class EngineChatClient:
    """Training client: one instance per episode (its rid keeps the episode on one server)."""

    engine: StockVLLMEngine
    sampling: SamplingParams
    rid: str
    records: list[CallRecord] = field(default_factory=list)

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ChatReply:
        turn = await self.engine.achat(messages, self.sampling, rid=self.rid)
        g = turn.generation
        record = CallRecord(
            prompt_token_ids=g.prompt_token_ids,
            output_token_ids=g.output_token_ids,
            output_logprobs=g.output_logprobs,
            version=turn.version,
            images=list(images),
            finish_reason=g.finish_reason,
            latency_s=g.latency_s,
            attempts=turn.attempts,
        )
        self.records.append(record)
        return ChatReply(g.text, record)


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

        self.model = model
        self.sampling = sampling or SamplingParams()
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ChatReply:
        resp = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=self.sampling.max_tokens,
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
        )
        return ChatReply(resp.choices[0].message.content or "")

    async def close(self) -> None:
        await self._client.close()
