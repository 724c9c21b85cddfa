"""Episode rewards and their per-group normalisation.

An episode's reward is its task reward plus a format term, less a quit penalty:
    task_reward + format_reward * (valid - malformed) / (valid + malformed) - quit_penalty * [quit]
where valid turns ran an action (or ended the episode with done), malformed turns had no valid action in
the output (or one the sandbox refused), and `quit` means the model declared done while the task was not
solved (task reward 0). With 0 < quit_penalty < 2 * format_reward this orders what GRPO compares within a
group: solving > attempting with valid actions > quitting early > malformed output. A plain format penalty
per malformed turn (the former design) made an immediate `done` the best move in a group that fails anyway.

AReaL 1.0.4's group normaliser slices contiguous rows of a fixed group size, which is wrong when episodes
have different numbers of turns (one row per turn). So the workflow normalises over the *episodes* of a
group itself (set `actor.reward_norm: null`) and gives every turn of an episode its episode's advantage,
optionally discounted by distance from the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cua_agent.episode.loop import Episode


@dataclass(frozen=True)
class RewardConfig:
    format_reward: float = 0.1  # the format term's range: +format_reward (all turns valid) .. -format_reward
    quit_penalty: float = 0.1  # declaring done on an unsolved task
    turn_discount: float = 1.0  # turn t of T gets discount ** (T - 1 - t)
    std_norm: bool = True  # divide by the group's std (GRPO) or not (Dr. GRPO)
    eps: float = 1e-6


def episode_reward(ep: Episode, cfg: RewardConfig) -> float:
    task = ep.task_reward if ep.task_reward is not None else 0.0
    if not math.isfinite(task):
        raise ValueError(f"task reward must be finite, got {task}")
    valid = sum(1 for t in ep.turns if t.note in ("ok", "done"))
    malformed = ep.format_failures
    fmt = cfg.format_reward * (valid - malformed) / (valid + malformed) if valid + malformed else 0.0
    quit = ep.status == "done" and task <= 0
    return task + fmt - (cfg.quit_penalty if quit else 0.0)


def normalise_group(rewards: list[float], eps: float = 1e-6, std_norm: bool = True) -> list[float]:
    """r - mean over the group, divided by (std + eps) when `std_norm`; a group whose rewards are all
    equal teaches nothing: 0s."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std < eps:
        return [0.0] * len(rewards)
    return [(r - mean) / (std + eps) if std_norm else r - mean for r in rewards]


def turn_rewards(advantage: float, n_turns: int, discount: float) -> list[float]:
    """The reward of each turn's training row: the episode's advantage, discounted from the end."""
    return [advantage * discount ** (n_turns - 1 - t) for t in range(n_turns)]
