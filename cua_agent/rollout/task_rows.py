"""Task rows, one per (task, seed): the training dataset (AReaL's dataloader shuffles and batches them, the
workflow runs a group of episodes per row) and the seeds an evaluation plays.

A row names the agent that plays it (`agent`): "gui" for desktop and web tasks (sandbox/tasks.py),
"terminal" for repository tasks (sandbox/repo/tasks.py; the row points back to its task file, whose
task gives the box and the tests). A repository task has no seeds: its rows are copies numbered 0..n-1."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from sandbox.repo.tasks import is_repo_task_file, load_repo_tasks
from sandbox.tasks import load_tasks


class NoTaskOfSplit(ValueError):
    """A task file has no task of the split asked for."""


def load_task_rows(
    path: str | Path,
    split: str = "train",
    task_ids: list[str] | tuple[str, ...] = (),
    *,
    seeds_per_task: int = 64,
    shuffle_seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows {task_id, seed, agent, instruction, max_turns, sandbox [, osworld] | tasks_file} of one split,
    `seeds_per_task` seeds drawn deterministically from each task's seed range. Unknown task ids are an
    error naming them."""
    if is_repo_task_file(path):
        return _repo_rows(Path(path), split, task_ids, seeds_per_task)
    specs = [s for s in load_tasks(Path(path)) if s.split == split]
    if task_ids:
        known = {s.task_id for s in specs}
        missing = sorted(set(task_ids) - known)
        if missing:
            raise ValueError(f"tasks.task_ids: not in {path} (split {split!r}): {', '.join(missing)}")
        specs = [s for s in specs if s.task_id in set(task_ids)]
    if not specs:
        raise NoTaskOfSplit(f"{path}: no task of split {split!r}")
    rng = random.Random(shuffle_seed)
    rows = []
    for spec in specs:
        lo, hi = spec.seeds
        for seed in rng.sample(range(lo, hi), min(seeds_per_task, hi - lo)):
            rows.append(
                {
                    "task_id": spec.task_id,
                    "seed": seed,
                    "agent": "gui",
                    "instruction": spec.instruction,
                    "max_turns": spec.max_turns,
                    "sandbox": spec.to_dict()["sandbox"],
                    **(
                        {"osworld": dict(spec.osworld)} if spec.osworld else {}
                    ),  # its task file, sent at reset
                }
            )
    return rows


def _repo_rows(
    path: Path, split: str, task_ids: list[str] | tuple[str, ...], seeds_per_task: int
) -> list[dict[str, Any]]:
    tasks = load_repo_tasks(path, split)
    if task_ids:
        missing = sorted(set(task_ids) - {t.task_id for t in tasks})
        if missing:
            raise ValueError(f"tasks.task_ids: not in {path} (split {split!r}): {', '.join(missing)}")
        tasks = [t for t in tasks if t.task_id in set(task_ids)]
    if not tasks:
        raise NoTaskOfSplit(f"{path}: no task of split {split!r}")
    return [
        {
            "task_id": t.task_id,
            "seed": i,
            "agent": "terminal",
            "instruction": t.issue,
            "max_turns": t.max_steps,
            "tasks_file": str(path.resolve()),
        }
        for t in tasks
        for i in range(seeds_per_task)
    ]


def rows_of_files(
    paths: list[str], split: str, task_ids: list[str] | tuple[str, ...] = (), seeds_per_task: int = 64
) -> list[dict[str, Any]]:
    """The rows of several task files (either family) of one split. `task_ids` selects across the files;
    an id in none of them is an error naming it."""
    ids = list(task_ids)
    rows: list[dict[str, Any]] = []
    for path in paths:
        wanted: list[str] = []
        if ids:
            try:
                known = {r["task_id"] for r in load_task_rows(path, split, seeds_per_task=1)}
            except NoTaskOfSplit:  # other files may hold the ids; a bad file still fails
                known = set()
            wanted = [i for i in ids if i in known]
            if not wanted:
                continue
        rows += load_task_rows(path, split, wanted, seeds_per_task=seeds_per_task)
    missing = sorted(set(ids) - {r["task_id"] for r in rows})
    if missing:
        raise ValueError(
            f"tasks.task_ids: in none of {', '.join(map(str, paths))} (split {split!r}): {', '.join(missing)}"
        )
    return rows


def training_rows(tasks: Any, seeds_per_task: int = 64) -> list[dict[str, Any]]:
    """The run's training rows: `tasks.train_path` and every `tasks.extra_train_paths` file, of
    `tasks.train_split`, selected by `tasks.task_ids`."""
    paths = [tasks.train_path, *tasks.extra_train_paths]
    return rows_of_files(paths, tasks.train_split, list(tasks.task_ids), seeds_per_task)
