"""The numbers a user watches (rollout/outcomes.py): tallies of scored episodes, per task family and
overall, and the rates of a step's share of them."""

from __future__ import annotations

import pytest

from cua_agent.rollout.outcomes import Outcomes, rates
from tests.agent.test_rewards import ep


def test_a_steps_rates_come_from_the_difference_of_two_snapshots():
    out = Outcomes()
    out.add(ep(0.0, "ok", "bad"))  # before the step
    before = out.snapshot()
    solved = ep(1.0, "ok", "done", status="done")
    quit_ = ep(0.0, "done", status="done")
    desktop = ep(0.0, "bad", "bad", "ok")
    desktop.task_id = "desktop/editor-save"
    for e in (solved, quit_, desktop):
        out.add(e)
    now = out.snapshot()
    r = rates({k: v - before.get(k, 0) for k, v in now.items()})
    assert r["all/episodes"] == 3 and r["all/success_rate"] == pytest.approx(1 / 3)
    assert r["all/task_reward"] == pytest.approx(1 / 3) and r["all/episode_turns"] == pytest.approx(2.0)
    assert r["all/format_failure_rate"] == pytest.approx(2 / 6) and r["all/quit_rate"] == pytest.approx(1 / 3)
    assert r["desktop/episodes"] == 1 and r["desktop/success_rate"] == 0
    assert r["t/episodes"] == 2 and r["t/success_rate"] == pytest.approx(0.5)  # task id "t": family "t"


def test_a_step_without_scored_episodes_has_no_rates():
    assert rates({}) == {}
