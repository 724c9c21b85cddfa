"""A box that stops itself after its idle time reads as an infrastructure failure, never the policy's 0
(sandbox/server/__main__.py, exit status 75). A policy with a shell in its box must not be able to pass off
the box it broke as such an expiry: it kills its box's control server with every signal its user can send,
and each time the box is the policy's failure (BoxBroken), not expired."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec, broken_from_inside
from sandbox.errors import BoxBroken, SandboxError
from tests.security.box_shell import box_shell

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signal", ["TERM", "INT", "HUP", "KILL"])
async def test_a_server_the_policy_killed_is_its_failure_not_an_expiry(sandbox_setup, signal):
    backend = DockerBackend(run_id="pytest-expiry-forgery")
    sb = await backend.start(SandboxSpec())
    try:
        shell = box_shell(backend, sb.id)
        shell(f"pkill -{signal} -f 'sandbox.server' || kill -{signal} $(pgrep -f sandbox.server)")
        with pytest.raises(SandboxError) as lost:
            for _ in range(20):  # the server goes, then its box
                await sb.health(timeout=2)
                await asyncio.sleep(0.5)
        state = backend.state(sb.id)
        assert state is not None and not state.expired, state
        assert isinstance(await broken_from_inside(backend, sb.id, lost.value), BoxBroken)
    finally:
        await backend.stop(sb)
        backend.close()
