"""The router connects its backends off the event loop: building one (docker-py asks the engine for its
version, GBox imports its SDK) must not stall the episodes that loop runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.routed import RoutedBackend
from sandbox.base import Backend, SandboxSpec
from sandbox.errors import SandboxError
from sandbox.pool import SandboxPool
from tests.sandbox.loop_lag import loop_lag
from tests.sandbox.test_sandbox_units import FakeBackend

SLOW_S = 1.0
# The loop must keep ticking: what blocks for SLOW_S belongs in a worker thread. Half of SLOW_S leaves room
# for a loaded 2-core machine (CI once saw a 0.28 s gap in a sibling test, with nothing on the loop).
MAX_LAG_S = SLOW_S / 2


def slow_make(made: list[str]):
    def make(name: str, run_id: str) -> Backend:
        time.sleep(SLOW_S)  # an engine slow to answer, or a slow import
        made.append(name)
        backend = FakeBackend()
        backend.run_id = run_id
        return backend

    return make


async def test_building_the_router_and_its_backends_does_not_block_the_loop():
    made: list[str] = []
    async with loop_lag() as lag:
        routed = RoutedBackend("docker", slow_make(made), run_id="run-1")
        pool = SandboxPool(routed, max_size=2, install_handlers=False)  # reaps first: connects the default
        async with pool:
            default = await pool.acquire(SandboxSpec())
            on_gbox = await pool.acquire(SandboxSpec(backend="gbox"))  # built at the first row naming it
            assert made == ["docker", "gbox"]
            assert on_gbox.backend.run_id == default.backend.run_id == "run-1"
            await pool.release(default)
            await pool.release(on_gbox)
    assert lag.worst_s < MAX_LAG_S, f"the loop stalled {lag.worst_s:.2f} s"


def test_a_default_backend_that_cannot_connect_still_fails_listing():
    """The run's preflight lists the boxes: an unreachable default backend must fail it, not list nothing."""

    def make(name: str, run_id: str) -> Backend:
        raise SandboxError(f"{name}: engine unreachable")

    routed = RoutedBackend("docker", make)
    with pytest.raises(SandboxError, match="docker: engine unreachable"):
        routed.list_boxes()
    with pytest.raises(SandboxError, match="docker: engine unreachable"):
        routed.reap()


@contextlib.contextmanager
def silent_engine() -> Iterator[str]:
    """A unix socket that takes connections and never answers: an engine that hangs. Closing it resets the
    connections, so a client still waiting gets an error at the end."""
    folder = Path(tempfile.mkdtemp(prefix="silent-engine-", dir="/tmp"))
    path = folder / "engine.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)  # never accepted: connects succeed, requests wait in the backlog
    try:
        yield f"unix://{path}"
    finally:
        server.close()
        path.unlink(missing_ok=True)
        os.rmdir(folder)


async def test_a_docker_engine_that_never_answers_does_not_stall_the_loop():
    """A real DockerBackend: docker-py's version call waits on the engine (up to 60 s)."""
    from sandbox.backends.docker import DockerBackend

    with silent_engine() as url:
        routed = RoutedBackend("docker", lambda name, rid: DockerBackend(run_id=rid, docker_host=url))
        async with loop_lag() as lag:
            start = asyncio.ensure_future(routed.start(SandboxSpec()))
            done, _ = await asyncio.wait([start], timeout=SLOW_S)
            assert not done  # still waiting on the engine, in a worker thread
        start.cancel()
        assert lag.worst_s < MAX_LAG_S, f"the loop stalled {lag.worst_s:.2f} s"
    with contextlib.suppress(asyncio.CancelledError):
        await start
