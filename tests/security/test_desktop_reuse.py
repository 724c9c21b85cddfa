"""A desktop box that handed the agent a shell serves no other episode (`reusable` in
sandbox/server/task_families.py): in desktop/terminal-file the agent has bash in an xterm, and a process it
leaves there could read the box's secrets or set a later episode's reward. Real boxes of the sandbox image under podman."""

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


async def test_a_policy_that_kills_its_desktop_box_from_its_shell_scores_0(sandbox_setup):
    """desktop/terminal-file's xterm: the policy types `kill -9 -1`, which ends the box's control server
    and with it the box. Before: an infrastructure failure, so the episode was dropped and its 0 unscored."""
    from cua_agent.episode.actions import Click, Key, TypeText
    from cua_agent.episode.coordinates import CoordinateMapping
    from cua_agent.episode.loop import EpisodeConfig, run_episode
    from cua_agent.episode.tool_calls import format_tool_call
    from cua_agent.inference.model_call import ModelCall

    backend = DockerBackend(run_id=f"pytest-kill-{os.getpid()}")
    pool = SandboxPool(backend, SandboxSpec(), max_size=1, install_handlers=False)
    await pool.start()
    w, h = SandboxSpec().screen
    mapping = CoordinateMapping.identity(w, h)
    actions = [Click(w // 2, h // 2), TypeText("kill -9 -1"), Key("Return"), Key("Return")]

    class Policy:
        async def chat(self, messages, images) -> ModelCall:
            return ModelCall(format_tool_call(actions.pop(0), mapping))

    try:
        sb = await pool.acquire(timeout=120)
        cfg = EpisodeConfig(max_turns=4, episode_timeout_s=120)
        ep = await run_episode(sb, Policy(), {"task_id": "desktop/terminal-file", "seed": 0}, cfg, mapping)
        await pool.release(sb, broken=ep.box_spoiled)
        assert (ep.status, ep.task_reward) == ("box_broken", 0.0), ep
        assert "BoxBroken" in ep.error and " broke (" in ep.error, ep.error
        assert ep.turns[-1].note == "box lost" and ep.turns[-1].action.keys == "Return"  # trained with its 0
    finally:
        await pool.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        backend.close()
