"""What the policy achieved, in the numbers a user looks at: per task family and overall, how many scored
episodes, successes, task reward, turns, format failures and quits. The workflow tallies each group's scored
episodes (`tally`), whatever becomes of the group, into the group's `GroupRecord`; the trainer sums the
records of the groups each step consumed, over every rank, and turns the sums into rates (`rates`) for the
step's stats, its log line and steps.jsonl.

Success is a task reward above 0: MiniWoB++ pays max(0, its raw reward) only on success, the desktop tasks
1 or 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the viewer reads success from here without importing the agent (and AReaL)
    from cua_agent.episode.loop import Episode

GROUP_KEY = "_group"  # trajectory key of a trained group's GroupRecord (removed before AReaL trains on it)


def reward_succeeded(task_reward: float | None) -> bool:
    return (task_reward or 0.0) > 0


def succeeded(ep: Episode) -> bool:
    return reward_succeeded(ep.task_reward)


def tally(episodes: Iterable[Episode]) -> dict[str, float]:
    """The tallies of the scored episodes (those with a task reward), keyed "<scope>/<field>" with scope
    "all" or a task family ("miniwob")."""
    totals: Counter[str] = Counter()
    for ep in episodes:
        if ep.task_reward is None:
            continue
        values = {
            "episodes": 1,
            "successes": int(succeeded(ep)),
            "task_reward": ep.task_reward,
            "turns": len(ep.turns),
            "format_failures": ep.format_failures,
            "quits": int(ep.status == "done" and not succeeded(ep)),
        }
        for scope in ("all", ep.task_id.split("/")[0]):
            for name, v in values.items():
                totals[f"{scope}/{name}"] += v
    return dict(totals)


def add_tallies(tallies: Iterable[dict[str, float]]) -> dict[str, float]:
    total: Counter[str] = Counter()
    for t in tallies:
        total.update(t)
    return dict(total)


@dataclass
class GroupRecord:
    """One group's outcome, as rollouts.jsonl has its episodes (`group` is their group id)."""

    group: str
    task_id: str
    seed: int
    tallies: dict[str, float] = field(default_factory=dict)
    draw: int | None = None  # the training row's draw number (train/data_feed.py), once the run stamps it

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "task_id": self.task_id, "seed": self.seed, "draw": self.draw}


def rates(tallies: dict[str, float]) -> dict[str, float]:
    """Rates of summed tallies (e.g. one step's groups), per scope: episodes,
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
