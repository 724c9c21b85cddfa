"""A desktop box that handed the agent a shell serves no other episode (sandbox/base.py REUSABLE_FAMILIES):
in desktop/terminal-file the agent has bash in an xterm, and a process it leaves there could read the box's
secrets or set a later episode's reward. Real boxes of the sandbox image under podman."""

from __future__ import annotations

import os

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec
from sandbox.pool import SandboxPool

pytestmark = pytest.mark.slow


async def test_a_box_that_gave_a_shell_is_removed_and_a_miniwob_box_is_reused(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-reuse-{os.getpid()}")
    pool = SandboxPool(backend, SandboxSpec(), max_size=1, install_handlers=False)
    await pool.start()
    try:
        async with pool.sandbox(timeout=120) as sb:
            state = await sb.reset("desktop/terminal-file", 0)
            w, h = sb.spec.screen
            await sb.act({"type": "click", "x": w // 2, "y": h // 2})  # the xterm
            await sb.act({"type": "type", "text": "nohup sleep 1000 >/dev/null 2>&1 &"})  # left behind
            await sb.act({"type": "key", "keys": "Return"})
            assert state.get("instruction"), state
            shell_box = sb.id
        async with pool.sandbox(timeout=120) as sb:
            assert sb.id != shell_box, "the box the agent had a shell in served the next episode"
            await sb.reset("miniwob/click-test", 0)
            page_box = sb.id
        assert not backend.is_running(shell_box) and shell_box not in {b["id"] for b in backend.list_boxes()}
        async with pool.sandbox(timeout=120) as sb:
            assert sb.id == page_box, "a MiniWoB box serves many episodes"
            await sb.reset("miniwob/click-test", 1)
    finally:
        await pool.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        backend.close()
