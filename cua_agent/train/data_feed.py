"""The training data as AReaL's rollout loop draws it, with a resume position that loses nothing.

AReaL's `prepare_batch` pulls rows from the dataloader ahead of training (rollouts run while the previous
step trains), and rollouts finish out of order. Its recover checkpoint stores the dataloader's position,
which is past every row in flight at save time, so a resumed run silently skips those rows. `TaskFeed`
numbers every row it hands out (`DRAW_KEY`); the engine reports the numbers of the rows a step trained on
(or dropped) and the checkpoint keeps the rows still outstanding, which a resumed run hands out first, in
their original order. The resumed run therefore draws the same rows, in the same order, as a run that was
never interrupted.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from cua_agent.config import ConfigError

DRAW_KEY = "_draw"  # row field (and trajectory key) holding the row's draw number


class TaskFeed:
    """Wraps AReaL's StatefulDataLoader; iterating it yields batches (lists of row dicts) like the loader."""

    def __init__(self, loader: Any):
        self.loader = loader
        self.batch_size = loader.batch_size
        if len(loader) == 0:  # the loader drops an incomplete batch: every epoch would be empty
            raise ConfigError(
                f"train_dataset.batch_size: {self.batch_size} rows a step, but there are only "
                f"{len(loader.dataset)} training row(s) (tasks.train_path, train_split, task_ids): no step "
                "would run; lower the batch size or add rows"
            )
        # The feed sets the sampler's epoch itself and keeps it in its state: AReaL's cycle_dataloader
        # counts epochs from 0 in every process, which would reshuffle a resumed epoch differently.
        self._epoch = 0
        self._next_draw = 0
        self._outstanding: dict[int, dict[str, Any]] = {}  # drawn, neither trained nor dropped
        self._replay: list[dict[str, Any]] = []  # outstanding rows of the checkpoint we resumed from
        self._lock = threading.Lock()  # rows are drawn by the trainer, dropped by the rollout thread

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        while self._replay:
            batch, self._replay = self._replay[: self.batch_size], self._replay[self.batch_size :]
            with self._lock:
                for row in batch:
                    self._outstanding[row[DRAW_KEY]] = row
            yield [copy.deepcopy(r) for r in batch]
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self._epoch)
        for batch in self.loader:
            rows = []
            with self._lock:
                for row in batch:
                    row = {**row, DRAW_KEY: self._next_draw}
                    self._outstanding[self._next_draw] = row
                    self._next_draw += 1
                    rows.append(copy.deepcopy(row))
            yield rows
        self._epoch += 1

    def done(self, draws: Iterable[int]) -> list[dict[str, Any]]:
        """Rows a step trained on, or that were dropped (their rollout was rejected); returns them."""
        with self._lock:
            found = [self._outstanding.pop(int(d), None) for d in draws]
        return [r for r in found if r is not None]

    @property
    def outstanding(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._outstanding[d] for d in sorted(self._outstanding)]

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return self._state()

    def _state(self) -> dict[str, Any]:
        return {
            "loader": self.loader.state_dict(),
            "epoch": self._epoch,
            "next_draw": self._next_draw,
            # Not yet handed out again after a resume, or handed out and still in flight: replayed first.
            "outstanding": sorted([*self._replay, *self._outstanding.values()], key=lambda r: r[DRAW_KEY]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self._epoch = int(state["epoch"])
        self._next_draw = int(state["next_draw"])
        self._replay = list(state["outstanding"])
        self._outstanding = {}
