"""The evaluation's numbers: Wilson intervals, per-task and overall scores, infrastructure failures apart."""

from __future__ import annotations

import itertools
import json

import pytest

from cua_agent.episode.actions import Click, Key, TypeText
from cua_agent.episode.loop import Episode
from cua_agent.episode.turn import Turn
from cua_agent.evaluate.report import Report, Score, fisher_greater, wilson


@pytest.mark.parametrize(
    ("wins", "n", "lo", "hi"),
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0), (30, 200, 0.1072, 0.2061)],
)
def test_wilson_interval_matches_published_values(wins, n, lo, hi):
    got = wilson(wins, n)
    assert got == pytest.approx((lo, hi), abs=1e-4)


def test_wilson_without_episodes_says_nothing():
    assert wilson(0, 0) == (0.0, 1.0)


def test_fisher_exact_one_sided_matches_the_published_tea_tasting():
    # Fisher (1935): 3 of 4 cups right, 4 of each kind: P = 17/70
    assert fisher_greater(3, 4, 1, 4) == pytest.approx(17 / 70)
    assert fisher_greater(0, 5, 5, 5) == 1.0


@pytest.mark.parametrize(("wins_a", "wins_b"), [(5, 1), (4, 2), (3, 3), (6, 0), (1, 4)])
def test_fisher_exact_one_sided_matches_counting_every_relabelling(wins_a, wins_b):
    """Under the null every split of the pooled outcomes into arms of 6 and 5 is equally likely."""
    outcomes = [1] * (wins_a + wins_b) + [0] * (11 - wins_a - wins_b)
    splits = list(itertools.combinations(range(11), 6))
    extreme = sum(sum(outcomes[i] for i in arm) >= wins_a for arm in splits)
    assert fisher_greater(wins_a, 6, wins_b, 5) == pytest.approx(extreme / len(splits))


def ep(task: str, reward: float | None, turns: int = 2, malformed: int = 0, status: str = "done") -> Episode:
    from types import SimpleNamespace

    e = Episode(task, 0, "x", task_reward=reward, format_failures=malformed, status=status)
    e.turns = [SimpleNamespace(action=Click(1, 1)) for _ in range(turns)]  # type: ignore[misc]
    return e


def test_scores_count_infrastructure_failures_apart():
    episodes = [
        ep("miniwob/a", 1.0, turns=1),
        ep("miniwob/a", 0.0, turns=3, malformed=1, status="max_turns"),
        ep("miniwob/a", None, status="infra_error"),  # lost to infrastructure: not a failure of the model
        ep("miniwob/b", 0.6, turns=2),
    ]
    report = Report.of(episodes, {"model": "m"})
    a = report.tasks["miniwob/a"]
    assert (a.episodes, a.successes, a.infra_failures) == (2, 1, 1)
    assert a.success_rate == 0.5 and a.turns == 2.0 and a.format_failure_rate == 0.25
    assert a.ci95 == wilson(1, 2)
    overall = report.overall
    assert (overall.episodes, overall.successes, overall.infra_failures) == (3, 2, 1)
    assert overall.task_reward == pytest.approx(1.6 / 3)
    assert Score.of([ep("x", None, status="infra_error")]).episodes == 0


def test_report_files(tmp_path):
    report = Report.of([ep("miniwob/a", 1.0, 1), ep("miniwob/b", 0.0, 1)], {"model": "m", "split": "test"})
    report.write(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["meta"] == {"model": "m", "split": "test"}
    assert data["overall"]["episodes"] == 2 and data["tasks"]["miniwob/a"]["success_rate"] == 1.0
    table = (tmp_path / "report.md").read_text().splitlines()
    assert table[0].startswith("| task | episodes | success | 95% CI")
    assert table[2].startswith("| miniwob/a | 1 | 100.0% |") and table[-1].startswith(
        "| **all** | 2 | 50.0% |"
    )


def played(reward: float | None, *actions, status: str = "task_done") -> Episode:
    e = Episode(
        "miniwob/enter-text", 0, 'Enter "Deneen" into the text field and press Submit.', status=status
    )
    e.task_reward = reward
    e.turns = [Turn(None, a) for a in actions]  # type: ignore[arg-type]
    return e


def test_a_multi_turn_task_is_reported_by_turn_with_the_typed_texts_exact_rate(tmp_path):
    field, submit = Click(60, 80), Click(60, 120)
    episodes = [
        played(1.0, field, TypeText("Deneen"), submit),
        played(0.0, field, TypeText("Vanda"), submit),
        played(0.0, submit),  # submitted at once
        played(0.0, None, field, status="max_turns"),  # nothing valid, then a click
        played(0.0, Key("ctrl+a"), status="max_turns"),
        played(None, field, status="infra_error"),  # not scored
    ]
    report = Report.of([*episodes, ep("miniwob/click-test", 1.0, 1)], {"model": "m"})
    assert list(report.turns) == ["miniwob/enter-text"]  # click-test ends at its first turn
    by_turn = report.turns["miniwob/enter-text"]
    assert [(p.reached, p.actions, p.ended, p.ended_won) for p in by_turn.positions] == [
        (5, {"click": 3, "invalid": 1, "key ctrl+a": 1}, 2, 0),
        (3, {"type": 2, "click": 1}, 1, 0),
        (2, {"click": 2}, 2, 1),
    ]
    assert (by_turn.typed, by_turn.typed_exact) == (2, 1)
    report.write(tmp_path)
    assert (
        json.loads((tmp_path / "report.json").read_text())["turns"]["miniwob/enter-text"]["typed_exact"] == 1
    )
    text = (tmp_path / "report.md").read_text()
    assert "| 1 | 5 | click 60%, invalid 20%, key ctrl+a 20% | 2 | 0 |" in text
    assert "typed text exactly as quoted: 1 of 2" in text
