"""An evaluation's numbers: per task and overall, the success rate with its 95% Wilson interval, mean task
reward, format-failure rate (per turn) and mean turns, over the episodes the model played to the end; for a
task played over several turns, its numbers by turn (evaluate/turns.py). Episodes lost to infrastructure
(after their retries) are counted apart: they say nothing about the model.

Success is a task reward above 0 (rollout/outcomes.py).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cua_agent.episode.loop import Episode
from cua_agent.evaluate.turns import Turns
from cua_agent.rollout.outcomes import succeeded

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: valid at 0 and n successes, unlike p ± z·se."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def fisher_greater(wins_a: int, n_a: int, wins_b: int, n_b: int) -> float:
    """One-sided Fisher exact test: the probability, were both arms equally good, that arm A would win at
    least `wins_a` of the `wins_a + wins_b` wins (hypergeometric tail). Small: A is better than B."""
    wins, n = wins_a + wins_b, n_a + n_b
    total = math.comb(n, wins)
    return (
        sum(math.comb(n_a, k) * math.comb(n_b, wins - k) for k in range(wins_a, min(n_a, wins) + 1)) / total
    )


@dataclass
class Score:
    episodes: int  # played to the end (a task reward)
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    task_reward: float  # mean
    format_failure_rate: float  # malformed or rejected outputs per turn
    turns: float  # mean
    infra_failures: int  # episodes lost to infrastructure after their retries: not scored

    @classmethod
    def of(cls, episodes: list[Episode]) -> Score:
        scored = [e for e in episodes if e.ok]
        n, wins = len(scored), sum(succeeded(e) for e in scored)
        turns = sum(len(e.turns) for e in scored)
        return cls(
            episodes=n,
            successes=wins,
            success_rate=wins / n if n else 0.0,
            ci95=wilson(wins, n),
            task_reward=sum(e.task_reward or 0.0 for e in scored) / n if n else 0.0,
            format_failure_rate=sum(e.format_failures for e in scored) / turns if turns else 0.0,
            turns=turns / n if n else 0.0,
            infra_failures=len(episodes) - n,
        )


@dataclass
class Report:
    overall: Score
    tasks: dict[str, Score]
    meta: dict[str, Any]  # what was evaluated: model, endpoint, task file, split, seeds, sampling
    turns: dict[str, Turns]  # the tasks played over several turns: their numbers by turn

    @classmethod
    def of(cls, episodes: list[Episode], meta: dict[str, Any]) -> Report:
        by_task: defaultdict[str, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_task[e.task_id].append(e)
        tasks = sorted(by_task.items())
        turns = {t: Turns.of(eps) for t, eps in tasks}
        return cls(
            Score.of(episodes),
            {t: Score.of(eps) for t, eps in tasks},
            meta,
            {t: by_turn for t, by_turn in turns.items() if by_turn.multi_turn},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "overall": asdict(self.overall),
            "tasks": {t: asdict(s) for t, s in self.tasks.items()},
            "turns": {t: asdict(by_turn) for t, by_turn in self.turns.items()},
        }

    def markdown(self) -> str:
        head = "| task | episodes | success | 95% CI | task reward | format failures / turn | turns | infra failures |"
        lines = [head, "|" + " --- |" * 8]
        for name, s in [*self.tasks.items(), ("**all**", self.overall)]:
            lines.append(
                f"| {name} | {s.episodes} | {s.success_rate:.1%} | {s.ci95[0]:.1%}–{s.ci95[1]:.1%} | "
                f"{s.task_reward:.3f} | {s.format_failure_rate:.2f} | {s.turns:.1f} | {s.infra_failures} |"
            )
        return "\n".join([*lines, *("\n" + by_turn.markdown(t) for t, by_turn in self.turns.items())]) + "\n"

    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "report.json").write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (out_dir / "report.md").write_text(self.markdown())
