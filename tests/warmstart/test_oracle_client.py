"""The oracles play through the agent's own episode loop (real sandboxes, podman): every turn is recorded as
the policy would see and answer it, the answers parse back to the oracle's actions, and the task is solved
as when the oracle acts directly."""

from __future__ import annotations

import pytest

from cua_agent.episode.actions import Click, Done
from cua_agent.episode.loop import EpisodeConfig, run_episode
from cua_agent.episode.model_view import ModelView
from cua_agent.episode.parser import parse_action
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.processing import load_processor
from cua_agent.warmstart.oracle_client import OracleChatClient
from sandbox.backends import make_backend
from sandbox.pool import SandboxPool

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def view() -> ModelView:
    return ModelView(load_processor(MODELS["untied"]), "qwen2.5-vl")


@pytest.mark.parametrize(
    ("task", "seed"), [("miniwob/click-test", 5), ("miniwob/enter-text", 7), ("desktop/editor-save", 3)]
)
async def test_an_oracle_solves_its_task_through_the_episode_loop(view, task, seed):
    pool = await SandboxPool(make_backend("docker"), max_size=1, install_handlers=False).start()
    try:
        async with pool.sandbox() as sb:
            mapping = view.mapping(*sb.spec.screen)
            client = OracleChatClient(sb, mapping)
            try:
                ep = await run_episode(
                    client.relay, client, {"task_id": task, "seed": seed}, EpisodeConfig(max_turns=8), mapping
                )
            finally:
                await client.close()
    finally:
        await pool.close()
    # A MiniWoB task ends its episode at the oracle's last input, so no `done` is recorded that a policy
    # would never be asked for; a desktop task waits for the agent's `done`.
    miniwob = task.startswith("miniwob/")
    want = "task_done" if miniwob else "done"
    assert ep.ok and ep.status == want and ep.task_reward == 1.0, (ep.status, ep.error, ep.task_reward)
    assert ep.format_failures == 0 and len(client.turns) == len(ep.turns) >= 1
    actions = [parse_action(t.answer, mapping).action for t in client.turns]
    assert not any(isinstance(a, Done) for a in actions[:-1])
    assert isinstance(actions[-1], Done) != miniwob
    assert isinstance(actions[0], Click) or not miniwob
    for t in client.turns:  # what the policy would see: the system prompt, the task, the newest screenshots
        assert t.messages[0]["role"] == "system" and 1 <= len(t.images) <= 2
