"""Screenshots kept for the viewer stay within agent.screenshots_budget_mb: the oldest episodes' go first,
also those an earlier attempt of a resumed run left."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.recorder import RolloutRecorder

SHOT = 100_000  # bytes per screenshot here


def episode(turns: int) -> SimpleNamespace:
    """The fields RolloutRecorder.record reads from an Episode and its turns."""
    call = ModelCall("o", prompt_token_ids=[1], output_token_ids=[2], version=0, images=[b"x" * SHOT])
    turn = SimpleNamespace(
        output="o",
        wire={"type": "click", "x": 1, "y": 1},
        note="ok",
        model_s=0.1,
        env_s=0.1,
        observation="",
        call=call,
    )
    return SimpleNamespace(
        task_id="miniwob/click-test", seed=1, instruction="i", status="task_done", error=None, verdict=None,
        task_reward=1.0,
        format_failures=0, wall_s=1.0, turns=[turn] * turns,
    )  # fmt: skip


def kept(folder: Path) -> list[str]:
    return sorted(d.name for d in (folder / "screenshots").iterdir())


def test_the_oldest_episodes_screenshots_go_first_past_the_budget(tmp_path: Path):
    budget_mb = 5 * SHOT / 2**20  # five screenshots
    rec = RolloutRecorder(tmp_path / "rollouts.jsonl", screenshots=True, budget_mb=budget_mb)
    for _ in range(4):
        rec.record([episode(2)], {}, "g")  # two screenshots an episode
    ids = [json.loads(x)["episode"] for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert kept(tmp_path) == sorted(ids[-2:])  # 4 of 5 screenshots: the two newest episodes
    assert len(ids) == 4  # the records stay; the viewer says the screenshots were not kept

    # a resumed run counts what is on disk before it writes more
    resumed = RolloutRecorder(tmp_path / "rollouts.jsonl", screenshots=True, budget_mb=budget_mb)
    resumed.record([episode(2)], {}, "g")
    ids = [json.loads(x)["episode"] for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert kept(tmp_path) == sorted(ids[-2:])


def test_no_budget_keeps_every_screenshot_and_one_episode_over_it_is_kept(tmp_path: Path):
    rec = RolloutRecorder(tmp_path / "a" / "rollouts.jsonl", screenshots=True, budget_mb=0)
    for _ in range(3):
        rec.record([episode(1)], {}, "g")
    assert len(kept(tmp_path / "a")) == 3
    small = RolloutRecorder(tmp_path / "b" / "rollouts.jsonl", screenshots=True, budget_mb=SHOT / 2**20)
    small.record([episode(3)], {}, "g")
    assert len(kept(tmp_path / "b")) == 1  # the newest episode, even alone over the budget
