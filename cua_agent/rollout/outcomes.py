"""What the policy achieved, in the numbers a user looks at: per task family and overall, how many scored
episodes, successes, task reward, turns, format failures and quits. The workflow tallies every episode
that got a task reward (whatever became of its group); the trainer turns each step's share of the tallies
into rates (`rates`) for the step's stats, its log line and steps.jsonl.

Success is a task reward above 0: MiniWoB++ pays max(0, its raw reward) only on success, the desktop tasks
1 or 0.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the viewer reads success from here without importing the agent (and AReaL)
    from cua_agent.episode.loop import Episode


def reward_succeeded(task_reward: float | None) -> bool:
    return (task_reward or 0.0) > 0


def succeeded(ep: Episode) -> bool:
    return reward_succeeded(ep.task_reward)


class Outcomes:
    """Cumulative tallies, keyed "<scope>/<field>" with scope "all" or a task family ("miniwob")."""

    def __init__(self) -> None:
        self._totals: defaultdict[str, float] = defaultdict(float)
        self._lock = threading.Lock()  # tallied in the rollout thread, read by the trainer

    def add(self, ep: Episode) -> None:
        values = {
            "episodes": 1,
            "successes": int(succeeded(ep)),
            "task_reward": ep.task_reward or 0.0,
            "turns": len(ep.turns),
            "format_failures": ep.format_failures,
            "quits": int(ep.status == "done" and not succeeded(ep)),
        }
        with self._lock:
            for scope in ("all", ep.task_id.split("/")[0]):
                for field, v in values.items():
                    self._totals[f"{scope}/{field}"] += v

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._totals)


def rates(tallies: dict[str, float]) -> dict[str, float]:
    """Rates of a window (e.g. one step: the difference of two snapshots), per scope: episodes,
    success_rate, task_reward (mean), episode_turns (mean), format_failure_rate (per turn), quit_rate."""
    out: dict[str, float] = {}
    for scope in sorted({k.split("/")[0] for k in tallies}):
        n = tallies.get(f"{scope}/episodes", 0)
        if not n:
            continue
        turns = tallies.get(f"{scope}/turns", 0)
        out[f"{scope}/episodes"] = n
        out[f"{scope}/success_rate"] = tallies.get(f"{scope}/successes", 0) / n
        out[f"{scope}/task_reward"] = tallies.get(f"{scope}/task_reward", 0) / n
        out[f"{scope}/episode_turns"] = turns / n
        out[f"{scope}/format_failure_rate"] = (
            tallies.get(f"{scope}/format_failures", 0) / turns if turns else 0.0
        )
        out[f"{scope}/quit_rate"] = tallies.get(f"{scope}/quits", 0) / n
    return out
