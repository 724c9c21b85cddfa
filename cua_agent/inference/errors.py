"""Typed errors of the inference path. Every one names the server and the endpoint it concerns."""

from __future__ import annotations


class InferenceServerError(RuntimeError):
    """Base: a request to an inference server failed."""

    def __init__(self, server: str, endpoint: str, message: str):
        self.server = server
        self.endpoint = endpoint
        super().__init__(f"inference server {server}{endpoint}: {message}")


class ServerUnavailableError(InferenceServerError):
    """The server could not be reached, timed out or kept answering 5xx after every retry."""

    def __init__(self, server: str, endpoint: str, attempts: int, elapsed_s: float, last_error: str):
        self.attempts = attempts
        self.elapsed_s = elapsed_s
        self.last_error = last_error
        super().__init__(
            server,
            endpoint,
            f"unavailable after {attempts} attempt(s) in {elapsed_s:.1f}s; last error: {last_error}",
        )


class ServerRequestError(InferenceServerError):
    """The server rejected the request (4xx): retrying the same request cannot help."""

    def __init__(self, server: str, endpoint: str, status: int, body: str):
        self.status = status
        self.body = body
        super().__init__(server, endpoint, f"HTTP {status}: {body[:500]}")


class MalformedResponseError(InferenceServerError):
    """The server answered 200 with a body that lacks what the RL path needs (token ids, logprobs)."""


class WeightUpdateError(InferenceServerError):
    """A weight update did not take effect (reload failed or the served weights do not match)."""
