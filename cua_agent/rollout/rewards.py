"""Episode rewards and their per-group normalisation.

AReaL 1.0.4's group normaliser slices contiguous rows of a fixed group size, which is wrong when episodes
have different numbers of turns (one row per turn). So the workflow normalises over the *episodes* of a
group itself (set `actor.reward_norm: null`) and gives every turn of an episode its episode's advantage,
optionally discounted by distance from the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RewardConfig:
    format_penalty: float = 0.1  # subtracted per turn whose output had no valid action
    turn_discount: float = 1.0  # turn t of T gets discount ** (T - 1 - t)
    eps: float = 1e-6


def episode_reward(task_reward: float, format_failures: int, cfg: RewardConfig) -> float:
    if not math.isfinite(task_reward):
        raise ValueError(f"task reward must be finite, got {task_reward}")
    return task_reward - cfg.format_penalty * format_failures


def normalise_group(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """(r - mean) / (std + eps) over the group; a group whose rewards are all equal teaches nothing: 0s."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    if std < eps:
        return [0.0] * len(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def turn_rewards(advantage: float, n_turns: int, discount: float) -> list[float]:
    """The reward of each turn's training row: the episode's advantage, discounted from the end."""
    return [advantage * discount ** (n_turns - 1 - t) for t in range(n_turns)]
