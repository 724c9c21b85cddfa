"""The agent loop and the workflow on real sandboxes (podman + chromium + MiniWoB++) and a real vLLM server.

`ScriptedPolicy` stands in for a trained model, which the tiny random model is not: it reads the task's
state (the oracle view) and *writes text* — actions in a model family's own form and coordinates, with
prose around them — so what is tested is the agent's real path: text → parser → coordinate mapping → sandbox
payload → OS input → the task's own verifier.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from areal.infra.workflow_executor import check_trajectory_format

from cua_agent.episode.actions import Click, Done, TypeText
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import DEFAULT_FAMILY, FAMILIES, ModelFamily
from cua_agent.episode.loop import EpisodeConfig, run_episode
from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.model_call import ModelCall
from cua_agent.inference.processing import load_processor
from cua_agent.rollout.workflow import CUAWorkflow
from sandbox.backends import make_backend
from sandbox.base import SandboxSpec
from sandbox.oracles import Ctx
from sandbox.pool import SandboxPool
from tests.agent.test_workflow_rows import config

pytestmark = pytest.mark.slow


def center(el: dict) -> tuple[int, int]:
    return round(el["x"] + el["w"] / 2), round(el["y"] + el["h"] / 2)


class ScriptedPolicy:
    """Plans from the task state after reset, then answers each chat call with the next tool call."""

    def __init__(self, sandbox, mapping: CoordinateMapping, family: ModelFamily = FAMILIES[DEFAULT_FAMILY]):
        self.sb, self.mapping, self.family = sandbox, mapping, family
        self.plan: list | None = None
        self.calls = 0

    async def _make_plan(self) -> list:
        c = Ctx(self.sb, await self.sb.oracle())
        task = c.state["task"]
        if task == "miniwob/click-test":
            return [Click(*center(c.find(tag="BUTTON")))]
        if task == "miniwob/click-button":
            return [Click(*center(c.find(tag="BUTTON", text=c.fields["target"])))]
        if task == "miniwob/enter-text":
            return [
                Click(*center(c.find(tag="INPUT_text"))),
                TypeText(c.fields["target"]),
                Click(*center(c.find(tag="BUTTON", text="Submit"))),
            ]
        raise AssertionError(task)

    async def chat(self, messages, images) -> ModelCall:
        assert images and messages[-1]["role"] == "user"
        assert messages[0]["content"] == self.family.system_prompt(self.mapping)  # the family's prompt
        if self.plan is None:
            self.plan = await self._make_plan()
        self.calls += 1
        action = self.plan.pop(0) if self.plan else Done(success=True)
        return ModelCall(f"Looking at the screen, I act.\n{self.family.answer(action, self.mapping)}")


class Garbage:
    async def chat(self, messages, images) -> ModelCall:
        return ModelCall("I think the button is somewhere { not json ) <tool_call> {'x': nan}")


@pytest.fixture(scope="module")
def view() -> ModelView:
    return ModelView(load_processor(MODELS["untied"]), DEFAULT_FAMILY)


@pytest.fixture
async def pool():
    p = await SandboxPool(make_backend("docker"), SandboxSpec(), max_size=2).start()
    try:
        yield p
    finally:
        await p.close()


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_scripted_policy_solves_tasks_through_the_agent_loop(pool, view, family):
    """Each model family's prompt reaches the model, and its own action form and coordinates (0-1000 for
    qwen3-vl, the resized image's pixels for the others) reach the right element."""
    cfg = EpisodeConfig(max_turns=5, episode_timeout_s=120, model_family=family)
    for task_id in ("miniwob/click-test", "miniwob/click-button", "miniwob/enter-text"):
        async with pool.sandbox() as sb:
            mapping = ModelView(view.processor, family).mapping(*sb.spec.screen)
            policy = ScriptedPolicy(sb, mapping, FAMILIES[family])
            ep = await run_episode(sb, policy, {"task_id": task_id, "seed": 11}, cfg, mapping)
        # MiniWoB ends its episode at the decisive click: the agent's episode ends there, no `done` turn.
        assert ep.status == "task_done" and ep.error is None, (task_id, ep.status, ep.error)
        assert ep.task_reward == 1.0, (task_id, family, [t.action for t in ep.turns])
        assert ep.format_failures == 0 and ep.instruction
        assert policy.calls == len(ep.turns) and not policy.plan, (task_id, policy.calls, policy.plan)


async def test_a_wrong_click_ends_the_episode_with_the_tasks_verdict(pool, view):
    """A wrong button ends MiniWoB's episode (raw reward -1): the agent's ends with it, unsolved, instead of
    playing on over the START cover (whose click would start a new problem)."""

    class WrongButton(ScriptedPolicy):
        async def _make_plan(self) -> list:
            c = Ctx(self.sb, await self.sb.oracle())
            wrong = [
                b for b in c.find_all(tag="BUTTON") if (b.get("text") or "").strip() != c.fields["target"]
            ]
            right = c.find(tag="BUTTON", text=c.fields["target"])
            return [Click(*center(wrong[0])), Click(*center(wrong[0])), Click(*center(right))]

    cfg = EpisodeConfig(max_turns=5, episode_timeout_s=120)
    async with pool.sandbox() as sb:
        mapping = view.mapping(*sb.spec.screen)
        policy = WrongButton(sb, mapping)
        ep = await run_episode(sb, policy, {"task_id": "miniwob/click-button", "seed": 11}, cfg, mapping)
    assert ep.status == "task_done" and len(ep.turns) == 1 and policy.calls == 1, (ep.status, ep.turns)
    assert ep.task_reward == 0.0


async def test_garbage_output_is_a_format_failure_not_an_error(pool, view):
    cfg = EpisodeConfig(max_turns=3, episode_timeout_s=120)
    async with pool.sandbox() as sb:
        ep = await run_episode(
            sb, Garbage(), {"task_id": "miniwob/click-test", "seed": 1}, cfg, view.mapping(1280, 800)
        )
    assert ep.status == "max_turns" and ep.ok
    assert ep.format_failures == 3 and ep.task_reward == 0.0
    assert all(t.action is None and t.note.startswith("no valid action") for t in ep.turns)


async def test_box_killed_mid_episode_is_an_infra_error(pool, view):
    class KillAfterFirstCall(Garbage):
        def __init__(self, sb):
            self.sb = sb

        async def chat(self, messages, images):
            await asyncio.to_thread(self.sb.backend.remove_sync, self.sb.id)
            return await super().chat(messages, images)

    cfg = EpisodeConfig(max_turns=3, episode_timeout_s=60)
    sb = await pool.acquire()
    ep = await run_episode(
        sb, KillAfterFirstCall(sb), {"task_id": "miniwob/click-test", "seed": 2}, cfg, view.mapping(1280, 800)
    )
    await pool.release(sb, broken=True)
    assert ep.status == "infra_error" and not ep.ok and ep.task_reward is None
    assert ep.wall_s < 60


async def test_workflow_with_real_engine_and_sandboxes(rollout_engine, tmp_path: Path):
    engine = rollout_engine
    wf = CUAWorkflow(
        config(group_size=2, min_group_size=2, max_turns=2, max_new_tokens=12),
        rollouts_path=tmp_path / "rollouts.jsonl",
    )
    try:
        (batch,) = engine.rollout_batch(
            [{"task_id": "miniwob/click-test", "seed": 5, "max_turns": 2}], workflow=wf
        )
    finally:
        run_id = wf.sandboxes._pool.backend.run_id if wf.sandboxes._pool else None
        await wf.close()
    # AReaL's check wants pixel_values in multi_modal_input; ours carries PNG screenshots (rows.py)
    check_trajectory_format({k: v for k, v in batch.items() if k != "multi_modal_input"})
    episodes = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["status"] in ("max_turns", "done", "task_done") for e in episodes)
    n_calls = sum(len(e["turns"]) for e in episodes)
    assert batch["input_ids"].shape[0] == n_calls == len(batch["multi_modal_input"])
    assert all(t["version"] == 0 and t["images"] >= 1 for e in episodes for t in e["turns"])
    assert run_id is not None and make_backend("docker").list_boxes(run_id=run_id) == []  # pool closed


async def test_evaluation_client_runs_an_episode_over_the_openai_api(vllm_servers, pool, view):
    """Evaluation path: the agent loop over `openai.AsyncOpenAI` against the vLLM server's OpenAI API (any
    OpenAI-compatible endpoint works the same). The random tiny model gives text, no valid action."""
    from cua_agent.episode.chat import OpenAIChatClient
    from cua_agent.inference.vllm_server import SamplingParams

    client = OpenAIChatClient(
        base_url=f"http://{vllm_servers['untied'].address}/v1",
        model=str(MODELS["untied"]),  # the launcher serves the model under its path
        sampling=SamplingParams(max_tokens=16),
    )
    try:
        async with pool.sandbox() as sb:
            ep = await run_episode(
                sb,
                client,
                {"task_id": "miniwob/click-test", "seed": 3},
                EpisodeConfig(max_turns=2, episode_timeout_s=120),
                view.mapping(1280, 800),
            )
    finally:
        await client.close()
    assert ep.ok and ep.status == "max_turns" and len(ep.turns) == 2, ep.error
    assert all(
        not t.call.output_token_ids and t.output for t in ep.turns
    )  # text only: evaluation records no ids


async def test_a_raising_or_cancelled_episode_gives_its_box_back(rollout_engine, tmp_path: Path):
    """The box of an episode that raises (here: a bug, no engine) or is cancelled mid-generation (a run
    stopping) is released, not left busy for the rest of the run."""
    wf = CUAWorkflow(config(group_size=1, min_group_size=1, max_turns=2), rollouts_path=tmp_path / "r.jsonl")
    row = {"task_id": "miniwob/click-test", "seed": 4}
    try:
        pool = await wf.sandboxes.pool()
        with pytest.raises(AttributeError):
            await wf._episode(None, pool, row)  # type: ignore[arg-type]
        assert pool.size["busy"] == 0

        episode = asyncio.ensure_future(wf._episode(rollout_engine, pool, row))
        for _ in range(600):  # until the episode holds its box
            if pool.size["busy"] == 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # resetting the task or waiting on the model
        assert pool.size["busy"] == 1 and not episode.done()
        episode.cancel()
        with pytest.raises(asyncio.CancelledError):
            await episode
        assert pool.size["busy"] == 0
    finally:
        await wf.close()
