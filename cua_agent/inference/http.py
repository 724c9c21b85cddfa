"""JSON over HTTP with bounded retries: never an unbounded hang, always a typed error at the end."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from .errors import ServerRequestError, ServerUnavailableError

# 429 and 5xx are the server's transient states (overload, restart, engine hiccup); other 4xx are ours.
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How long to insist. The worst case wall time is bounded by
    attempts * timeout_s + the sum of backoffs (each at most max_backoff_s)."""

    attempts: int = 3
    timeout_s: float = 120.0
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.timeout_s <= 0:
            raise ValueError(f"RetryPolicy.timeout_s must be > 0, got {self.timeout_s}")

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter, so many clients do not retry in lockstep."""
        return random.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))


DEFAULT_RETRY = RetryPolicy()


async def request_json(
    session: aiohttp.ClientSession,
    server: str,
    endpoint: str,
    payload: dict[str, Any] | None = None,
    *,
    method: str = "POST",
    policy: RetryPolicy = DEFAULT_RETRY,
) -> Any:
    """Send one request, retrying transient failures; return the decoded JSON body (None if empty).

    `server` is "host:port" or a full base URL; `endpoint` starts with "/" and may carry a query string.
    Raises ServerRequestError on a 4xx (no retry) and ServerUnavailableError once retries are spent.
    """
    base = server if "://" in server else f"http://{server}"
    url = base.rstrip("/") + endpoint
    start = time.monotonic()
    last_error = ""
    for attempt in range(1, policy.attempts + 1):
        try:
            async with session.request(
                method, url, json=payload, timeout=aiohttp.ClientTimeout(total=policy.timeout_s)
            ) as resp:
                body = await resp.read()
                if resp.status < 400:
                    if resp.content_type != "application/json":  # vLLM's LoRA endpoints answer in text
                        return body.decode(errors="replace")
                    return json.loads(body) if body.strip() else None
                text = body.decode(errors="replace")
                if resp.status not in _RETRY_STATUSES:
                    raise ServerRequestError(server, endpoint, resp.status, text)
                last_error = f"HTTP {resp.status}: {text[:200]}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except json.JSONDecodeError as exc:
            last_error = f"invalid JSON body: {exc}"
        if attempt < policy.attempts:
            await asyncio.sleep(policy.backoff(attempt))
    raise ServerUnavailableError(server, endpoint, policy.attempts, time.monotonic() - start, last_error)
