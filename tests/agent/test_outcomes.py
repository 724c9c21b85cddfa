"""The numbers a user watches (rollout/outcomes.py): tallies of a group's scored episodes, per task family
and overall, summed over the groups a step consumed, and their rates."""

from __future__ import annotations

import pytest

from cua_agent.rollout.outcomes import add_tallies, rates, tally
from tests.agent.test_rewards import ep


def test_a_steps_rates_come_from_the_sum_of_its_groups_tallies():
    solved = ep(1.0, "ok", "done", status="done")
    quit_ = ep(0.0, "done", status="done")
    desktop = ep(0.0, "bad", "bad", "ok")
    desktop.task_id = "desktop/editor-save"
    lost = ep(0.0, "ok")
    lost.task_reward = None  # lost to infrastructure: not scored
    r = rates(add_tallies([tally([solved, quit_, lost]), tally([desktop])]))
    assert r["all/episodes"] == 3 and r["all/success_rate"] == pytest.approx(1 / 3)
    assert r["all/task_reward"] == pytest.approx(1 / 3) and r["all/episode_turns"] == pytest.approx(2.0)
    assert r["all/format_failure_rate"] == pytest.approx(2 / 6) and r["all/quit_rate"] == pytest.approx(1 / 3)
    assert r["desktop/episodes"] == 1 and r["desktop/success_rate"] == 0
    assert r["t/episodes"] == 2 and r["t/success_rate"] == pytest.approx(0.5)  # task id "t": family "t"


def test_a_step_without_scored_episodes_has_no_rates():
    assert rates({}) == {}
    assert rates(add_tallies([])) == {}
