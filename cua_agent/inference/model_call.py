"""One call of the policy, the one record of it everywhere: the server returns it, the engine stamps the
weight version on it, the chat client adds the images it sent, the episode keeps it per turn, and the
workflow turns it into a training row."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelCall:
    text: str
    # The server's own prompt ids (image tokens expanded), the sampled ids and their logprobs. Empty for a
    # client that does not return them (an OpenAI-compatible endpoint used for evaluation).
    prompt_token_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "abort" | ...
    latency_s: float = 0.0
    version: int = -1  # the weight version that produced every output token; -1: not known
    attempts: int = 1  # > 1 when a weight update aborted the call and it was generated again
    server: str = ""
    model: str = ""  # the served name that answered, as the server says (a LoRA run: the version's adapter)
    images: list[bytes] = field(default_factory=list)  # PNG bytes, in the order they appear in the prompt
