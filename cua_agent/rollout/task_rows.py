"""Task rows, one per (task, seed): the training dataset (AReaL's dataloader shuffles and batches them, the
workflow runs a group of episodes per row) and the seeds an evaluation plays."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from sandbox.tasks import load_tasks


def load_task_rows(
    path: str | Path,
    split: str = "train",
    task_ids: list[str] | tuple[str, ...] = (),
    *,
    seeds_per_task: int = 64,
    shuffle_seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows {task_id, seed, instruction, max_turns, sandbox} of one split, `seeds_per_task` seeds drawn
    deterministically from each task's seed range. Unknown task ids are an error naming them."""
    specs = [s for s in load_tasks(Path(path)) if s.split == split]
    if task_ids:
        known = {s.task_id for s in specs}
        missing = sorted(set(task_ids) - known)
        if missing:
            raise ValueError(f"tasks.task_ids: not in {path} (split {split!r}): {', '.join(missing)}")
        specs = [s for s in specs if s.task_id in set(task_ids)]
    if not specs:
        raise ValueError(f"{path}: no task of split {split!r}")
    rng = random.Random(shuffle_seed)
    rows = []
    for spec in specs:
        lo, hi = spec.seeds
        for seed in rng.sample(range(lo, hi), min(seeds_per_task, hi - lo)):
            rows.append(
                {
                    "task_id": spec.task_id,
                    "seed": seed,
                    "instruction": spec.instruction,
                    "max_turns": spec.max_turns,
                    "sandbox": spec.to_dict()["sandbox"],
                }
            )
    return rows
