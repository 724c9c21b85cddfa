"""An HTTP proxy in front of a real vLLM server that injects the faults a cluster shows: answers 500,
hangs, and (while the server behind it restarts) refuses with 502. Only chat completions get injected
faults; everything else (health, weight reloads, versions) passes through. `hold()` keeps chat requests
waiting until `release()`: an episode whose request is held is certainly in the middle of its turn."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web

from cua_agent.inference.local_server import free_port

FAULTY = "/v1/chat/completions"


class FaultProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream
        self.port = free_port()
        self.fail_next = 0  # chat requests still to answer with 500
        self.hang_next = 0  # chat requests still to hold until the client gives up
        self.counts = {"forwarded": 0, "failed": 0, "hung": 0, "unreachable": 0, "held": 0}
        self._open = threading.Event()
        self._open.set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._session = aiohttp.ClientSession()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == FAULTY and not self._open.is_set():
            self.counts["held"] += 1
            while not self._open.is_set():
                await asyncio.sleep(0.05)
        if request.path == FAULTY and self.fail_next > 0:
            self.fail_next -= 1
            self.counts["failed"] += 1
            return web.Response(status=500, text="injected fault")
        if request.path == FAULTY and self.hang_next > 0:
            self.hang_next -= 1
            self.counts["hung"] += 1
            await asyncio.sleep(3600)  # cancelled when the client's timeout closes the connection
        body = await request.read()
        try:
            async with self._session.request(
                request.method,
                f"http://{self.upstream}{request.path_qs}",
                data=body,
                headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
            ) as up:
                payload = await up.read()
                self.counts["forwarded"] += 1
                return web.Response(
                    status=up.status, body=payload, content_type=up.content_type or "application/json"
                )
        except aiohttp.ClientError as exc:
            self.counts["unreachable"] += 1
            return web.Response(status=502, text=f"upstream unreachable: {exc}")
