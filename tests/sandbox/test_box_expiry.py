"""The last backstop against leaked boxes: a box that no request reaches for its idle time stops itself (its
trainer vanished where no reaper looks: another machine, a killed container), and that stop is never read
as the policy's doing. A box the host keeps talking to stays."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec, broken_from_inside
from sandbox.errors import SandboxDied

pytestmark = pytest.mark.slow
IDLE_S = 4.0


async def test_an_idle_box_stops_itself_and_that_is_not_the_policys_failure(sandbox_setup):
    backend = DockerBackend(run_id="pytest-expiry", idle_exit_s=IDLE_S)
    idle, talked_to = await asyncio.gather(backend.start(SandboxSpec()), backend.start(SandboxSpec()))
    try:
        began = time.monotonic()
        while time.monotonic() - began < IDLE_S + 6:
            await talked_to.health()  # the host's requests keep a box alive
            await asyncio.sleep(1)
        state = backend.state(idle.id)
        assert state is not None and not state.running and state.expired, state
        assert backend.state(talked_to.id).running
        with pytest.raises(SandboxDied) as lost:
            await idle.screenshot()
        assert await broken_from_inside(backend, idle.id, lost.value) is None  # an infrastructure failure
    finally:
        for sb in (idle, talked_to):
            await backend.stop(sb)
        backend.close()
