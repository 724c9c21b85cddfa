"""Server down, HTTP 500 and a hanging server: a typed error naming the server after the configured
retries, within a bounded time; 4xx fail at once. The misbehaving servers are small local HTTP servers
standing in for a vLLM server in those states (a real one cannot be made to answer 500 or hang on demand);
"server down" is a real closed port, and the last test kills a real vLLM server mid-run."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from cua_agent.inference.errors import MalformedResponseError, ServerRequestError, ServerUnavailableError
from cua_agent.inference.http import RetryPolicy
from cua_agent.inference.local_server import MODELS, free_port, start_vllm
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session

FAST = RetryPolicy(attempts=3, timeout_s=1.0, backoff_s=0.05, max_backoff_s=0.2)
# attempts * timeout + backoffs + slack
BOUND_S = FAST.attempts * FAST.timeout_s + FAST.attempts * FAST.max_backoff_s + 2.0


@pytest.fixture(autouse=True)
async def _close_sessions():
    yield
    await close_loop_session()


class StubServer:
    """An HTTP server whose /v1/chat/completions misbehaves as told; counts the requests it receives."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.hits = 0
        self.port = free_port()

    async def handler(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        if self.behaviour == "500":
            return web.Response(status=500, text="engine dead")
        if self.behaviour == "400":
            return web.json_response({"error": "bad sampling params"}, status=400)
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        if self.behaviour == "503-then-ok" and self.hits == 1:
            return web.Response(status=503, text="starting")
        if self.behaviour == "no-token-ids" or self.behaviour == "503-then-ok":
            choice = {"message": {"content": "hi"}, "finish_reason": "stop", "logprobs": {"content": []}}
            if self.behaviour == "503-then-ok":
                choice["token_ids"] = []
                return web.json_response({"choices": [choice], "prompt_token_ids": [1, 2]})
            return web.json_response({"choices": [choice]})
        raise AssertionError(self.behaviour)

    async def __aenter__(self) -> VLLMServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handler)
        # a short shutdown: the "hang" handler never returns, and the default waits 60 s for it
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return VLLMServer(f"127.0.0.1:{self.port}", policy=FAST)

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


MESSAGES = [{"role": "user", "content": "hello"}]


async def timed(coro) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        await coro
    return info.value, time.monotonic() - start


async def test_server_down_is_a_typed_error_naming_the_server():
    server = VLLMServer(f"127.0.0.1:{free_port()}", policy=FAST)
    err, elapsed = await timed(server.chat(MESSAGES, SamplingParams()))
    assert isinstance(err, ServerUnavailableError)
    assert err.server == server.address and err.attempts == FAST.attempts
    assert server.address in str(err) and "/v1/chat/completions" in str(err)
    assert elapsed < BOUND_S


async def test_http_500_is_retried_then_typed_error():
    stub = StubServer("500")
    async with stub as server:
        err, elapsed = await timed(server.chat(MESSAGES, SamplingParams()))
    assert isinstance(err, ServerUnavailableError) and "HTTP 500" in err.last_error
    assert stub.hits == FAST.attempts
    assert elapsed < BOUND_S


async def test_hanging_server_times_out_within_bound():
    async with StubServer("hang") as server:
        err, elapsed = await timed(server.chat(MESSAGES, SamplingParams()))
    assert isinstance(err, ServerUnavailableError) and "Timeout" in err.last_error
    assert FAST.attempts * FAST.timeout_s <= elapsed < BOUND_S


async def test_client_error_is_not_retried():
    stub = StubServer("400")
    async with stub as server:
        err, _ = await timed(server.chat(MESSAGES, SamplingParams()))
    assert isinstance(err, ServerRequestError) and err.status == 400 and "bad sampling params" in err.body
    assert stub.hits == 1


async def test_transient_503_recovers():
    stub = StubServer("503-then-ok")
    async with stub as server:
        gen = await server.chat(MESSAGES, SamplingParams())
    assert stub.hits == 2 and gen.prompt_token_ids == [1, 2]


async def test_response_without_token_ids_is_malformed_not_silently_empty():
    async with StubServer("no-token-ids") as server:
        with pytest.raises(MalformedResponseError, match="token_ids"):
            await server.chat(MESSAGES, SamplingParams())


@pytest.mark.slow
async def test_real_server_killed_mid_run(artefacts):
    proc = start_vllm(MODELS["untied"], artefacts)
    try:
        proc.wait_healthy(400)
        # A cold server's first request may take seconds: warm up with the default policy.
        gen = await VLLMServer(proc.address).chat(MESSAGES, SamplingParams(max_tokens=4, ignore_eos=True))
        assert len(gen.output_token_ids) == 4
    finally:
        proc.stop()
    server = VLLMServer(proc.address, policy=FAST)
    err, elapsed = await timed(server.chat(MESSAGES, SamplingParams(max_tokens=4)))
    assert isinstance(err, ServerUnavailableError) and err.server == proc.address
    assert elapsed < BOUND_S
