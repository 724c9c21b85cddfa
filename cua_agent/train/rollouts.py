"""The training run's hold on its rollouts: which rows and groups a step consumed, stopping, and giving up.

The inference engine only generates; the workflow only turns a row into a group's training rows (or None
when the group is rejected). What a *run* needs on top lives here:
- `TrainingEngine` (the rollout engine `CUATrainer` builds): tells the `TaskFeed` which rows each batch
  trained on, keeps the records of the groups each batch consumed (trained, or dropped while it waited),
  refuses to start a batch after a stop signal, and carries an abort from the rollout thread to the
  trainer's main thread. With several trainer ranks, a stop or an abort is acted on only when every rank
  has agreed on it (`stopping.agree`), right after each rank's wait for its share of the batch: a rank that
  left for its stop-time checkpoint while another sat in the collective that spreads rows across ranks
  deadlocked both;
- `TrackedWorkflow` wraps the workflow: it stamps each row's draw number on its training rows; filters
  groups whose rewards are all equal (no signal: every advantage is 0; AReaL draws another row, so the
  step's batch stays full), but trains on the next one after `agent.max_filtered_in_a_row` in a row, so a
  policy that fails (or solves) every episode alike cannot stall a step; reports the row of a filtered or
  rejected group as done (never replayed); and aborts the run after `agent.max_rejected_in_a_row` groups
  in a row were rejected (every episode lost to infrastructure: a dead server or sandbox engine). A group
  whose workflow raises counts as rejected, by exception type (AReaL would log it, draw the next row and
  keep the row outstanding, without any limit); a full disk aborts at once.
"""

from __future__ import annotations

import _thread
import errno
import logging
import signal
import threading
from typing import Any

import torch
from areal.api.workflow_api import RolloutWorkflow

from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.rollout.outcomes import GROUP_KEY, GroupRecord
from cua_agent.train.data_feed import DRAW_KEY, TaskFeed
from cua_agent.train.stopping import RunAborted, StopTraining, agree

logger = logging.getLogger("TrackedWorkflow")  # a flat name, as the trainer's other loggers


class TrainingEngine(StockVLLMEngine):
    """`StockVLLMEngine` with the run's bookkeeping around `prepare_batch`."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.feed: TaskFeed | None = None
        self.ranks: Any = None  # the trainer ranks' CPU process group (CUATrainer sets it); None: one rank
        self.waiting_for_batch = False  # blocked in this rank's own wait for its batch (a stop may end it)
        self.stop_requested: int | None = None  # the signal of a requested stop: no further batch starts
        self.fatal: RunAborted | None = None  # set from the rollout thread; raised in the main thread
        self.last_trained_rows: list[dict[str, Any]] = []
        self.trained_groups: list[GroupRecord] = []  # of the last batch
        self.dropped_groups: list[GroupRecord] = []  # filtered or rejected while the last batch was collected
        self._dropped: list[GroupRecord] = []
        self._dropped_lock = threading.Lock()  # dropped in the rollout thread, collected in the main thread

    def prepare_batch(
        self, dataloader: Any, workflow: Any, *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """AReaL's prepare_batch, then every rank agrees whether to go on (`stopping.agree`); then the batch's
        rows are reported to the TaskFeed as trained and its groups' records kept."""
        if isinstance(dataloader, TaskFeed):
            self.feed = dataloader
        batch: list[dict[str, Any]] = []
        if self.stop_requested is None and self.fatal is None:
            try:
                try:
                    self.waiting_for_batch = True
                    batch = super().prepare_batch(dataloader, workflow, *args, **kwargs)
                finally:
                    self.waiting_for_batch = False
            except (StopTraining, RunAborted):
                pass  # the signal handler's way out of the wait: the ranks decide together, next
        agree(self.stop_requested, self.fatal, self.ranks)  # raises the same on every rank
        draws = sorted({int(d) for traj in batch for d in traj.pop(DRAW_KEY, torch.empty(0)).tolist()})
        self.trained_groups = [traj.pop(GROUP_KEY) for traj in batch if GROUP_KEY in traj]
        with self._dropped_lock:
            self.dropped_groups, self._dropped = self._dropped, []
        self.last_trained_rows = self.feed.done(draws) if self.feed is not None else []
        return batch

    def row_dropped(self, row: dict[str, Any], record: GroupRecord | None = None) -> None:
        """The row's group was rejected or filtered: it will not be trained on, and must not be replayed."""
        if self.feed is not None and DRAW_KEY in row:
            self.feed.done([row[DRAW_KEY]])
        if record is not None:
            record.draw = row.get(DRAW_KEY)
            with self._dropped_lock:
                self._dropped.append(record)

    def abort_run(self, reason: str) -> None:
        """From the rollout thread: make the trainer's main thread leave its wait for a batch (through the
        SIGINT handler the job installed, `job._StopSignals`); every rank then aborts together."""
        if self.fatal is None:
            self.fatal = RunAborted(reason)
            _thread.interrupt_main(signal.SIGINT)


class TrackedWorkflow(RolloutWorkflow):
    """The workflow as the training run submits it (see the module docstring)."""

    def __init__(
        self,
        workflow: RolloutWorkflow,
        engine: TrainingEngine,
        max_rejected_in_a_row: int,
        filter_equal_rewards: bool,
        max_filtered_in_a_row: int,
    ):
        self.workflow = workflow
        self.engine = engine
        self.max_rejected_in_a_row = max_rejected_in_a_row
        self.filter_equal_rewards = filter_equal_rewards
        self.max_filtered_in_a_row = max_filtered_in_a_row
        self.rejected_in_a_row = 0
        self.filtered_in_a_row = 0
        self.stats = {"groups_filtered": 0, "equal_groups_kept": 0, "groups_failed": 0}

    async def arun_episode(self, engine: Any, data: dict[str, Any]) -> dict[str, Any] | None:
        try:
            batch, record = await self._run(engine, data)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                return self._failed(data, exc)
            self.engine.row_dropped(data)
            self.engine.abort_run(
                f"disk full ({exc.strerror}) writing {exc.filename or 'a file'}: free space there, then "
                "resume with --resume (the last checkpoint stands)"
            )
            return None
        except Exception as exc:
            return self._failed(data, exc)
        if batch is None:
            return self._rejected(data, record)
        self.rejected_in_a_row = 0
        # The workflow's rows carry the group-normalised advantage: all exactly 0 when the rewards are equal.
        if self.filter_equal_rewards and not bool(batch["rewards"].any()):
            if self.filtered_in_a_row < self.max_filtered_in_a_row:
                self.filtered_in_a_row += 1
                self.stats["groups_filtered"] += 1
                self.engine.row_dropped(data, record)
                return None
            self.stats["equal_groups_kept"] += 1
            logger.warning(
                "%d groups in a row had equal rewards (agent.max_filtered_in_a_row): training on this one "
                "(advantage 0) so the step completes. A policy that fails or solves every episode alike does "
                "this: start from a policy that succeeds sometimes (docs/warm-start.md) or pick other tasks.",
                self.filtered_in_a_row,
            )
        self.filtered_in_a_row = 0
        if DRAW_KEY in data:
            batch[DRAW_KEY] = torch.full((batch["input_ids"].shape[0],), int(data[DRAW_KEY]))
        if record is not None:
            record.draw = data.get(DRAW_KEY)
            batch[GROUP_KEY] = record
        return batch

    async def _run(
        self, engine: Any, data: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, GroupRecord | None]:
        """The workflow's group and, when it keeps one (`run_group`), the group's record."""
        run_group = getattr(self.workflow, "run_group", None)
        if run_group is not None:
            return await run_group(engine, data)
        return await self.workflow.arun_episode(engine, data), None

    def _rejected(self, data: dict[str, Any], record: GroupRecord | None = None) -> None:
        self.engine.row_dropped(data, record)
        self.rejected_in_a_row += 1
        if self.rejected_in_a_row >= self.max_rejected_in_a_row:
            self._abort()
        return None

    def _failed(self, data: dict[str, Any], exc: Exception) -> None:
        """The workflow raised: the group is rejected, and the error counted by type and logged in full."""
        kind = f"groups_failed/{type(exc).__name__}"
        self.stats["groups_failed"] += 1
        self.stats[kind] = self.stats.get(kind, 0) + 1
        logger.error(
            "group of %s seed %s failed: %s: %s",
            data.get("task_id"),
            data.get("seed"),
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        return self._rejected(data)

    def _abort(self) -> None:
        stats = {**getattr(self.workflow, "stats", {}), **self.stats}
        causes = ", ".join(
            f"{k}={v}"
            for k, v in sorted(stats.items())
            if k.startswith(("infra_failures/", "groups_failed/"))
        )
        self.engine.abort_run(
            f"{self.rejected_in_a_row} groups in a row rejected (agent.max_rejected_in_a_row): every episode "
            f"failed for infrastructure reasons, or the workflow raised; failures so far: "
            f"{causes or 'none recorded'} (each group's errors are in the log above)"
        )
