"""What the training run does with each group the workflow returns (train/rollouts.py TrackedWorkflow):
groups whose rewards are all equal carry no signal and are filtered (counted, their row done, more rows
drawn so the step's batch stays full); rejected groups count towards the abort; rows are stamped with their
draw number. The inner workflow here hands back prepared groups: it stands for any RolloutWorkflow, whose
contract is a dict of [B, L] tensors or None."""

from __future__ import annotations

import asyncio
import errno
import logging
from types import SimpleNamespace

import torch
from areal.api.workflow_api import RolloutWorkflow

from cua_agent.train import rollouts
from cua_agent.train.data_feed import DRAW_KEY
from cua_agent.train.rollouts import TrackedWorkflow


class Prepared(RolloutWorkflow):
    def __init__(self, groups: list[dict | BaseException | None]):
        self.groups = list(groups)
        self.stats = {"infra_failures/SandboxDied": 2}

    async def arun_episode(self, engine, data):
        group = self.groups.pop(0)
        if isinstance(group, BaseException):
            raise group
        return group


class Run:
    """The run's side of TrainingEngine that TrackedWorkflow talks to."""

    def __init__(self) -> None:
        self.done: list[int] = []
        self.aborted: list[str] = []

    def row_dropped(self, row: dict, record=None) -> None:
        self.done.append(row[DRAW_KEY])

    def abort_run(self, reason: str) -> None:
        self.aborted.append(reason)


def group(*rewards: float) -> dict:
    n = len(rewards)
    return {"input_ids": torch.ones(n, 4, dtype=torch.long), "rewards": torch.tensor(rewards)}


def run(tracked: TrackedWorkflow, n: int) -> list[dict | None]:
    async def go():
        return [
            await tracked.arun_episode(SimpleNamespace(), {"task_id": "t", DRAW_KEY: i}) for i in range(n)
        ]

    return asyncio.run(go())


def test_equal_reward_groups_are_filtered_counted_and_their_rows_done():
    engine = Run()
    inner = Prepared([group(0.7, -0.7, 0.0), group(0.0, 0.0, 0.0, 0.0), group(0.0, 0.0), None])
    tracked = TrackedWorkflow(
        inner, engine, max_rejected_in_a_row=2, filter_equal_rewards=True, max_filtered_in_a_row=8
    )
    out = run(tracked, 4)
    assert out[0] is not None and out[0][DRAW_KEY].tolist() == [0, 0, 0]
    assert out[1:] == [None, None, None]
    assert tracked.stats == {"groups_filtered": 2, "equal_groups_kept": 0, "groups_failed": 0}
    assert engine.done == [1, 2, 3]  # filtered and rejected rows are never replayed
    assert engine.aborted == []  # filtered groups are no infrastructure failures: one rejection in a row


def test_without_the_filter_equal_groups_are_trained_on():
    tracked = TrackedWorkflow(
        Prepared([group(0.0, 0.0)]),
        Run(),
        max_rejected_in_a_row=2,
        filter_equal_rewards=False,
        max_filtered_in_a_row=8,
    )
    (out,) = run(tracked, 1)
    assert out is not None and tracked.stats == {
        "groups_filtered": 0,
        "equal_groups_kept": 0,
        "groups_failed": 0,
    }


def test_rejections_in_a_row_abort_with_the_failure_counts():
    engine = Run()
    inner = Prepared([None, group(0.0, 0.0), None, None])
    tracked = TrackedWorkflow(
        inner, engine, max_rejected_in_a_row=2, filter_equal_rewards=True, max_filtered_in_a_row=8
    )
    run(tracked, 4)
    assert len(engine.aborted) == 1
    assert engine.aborted[0].startswith("2 groups in a row rejected (agent.max_rejected_in_a_row)")
    assert "infra_failures/SandboxDied=2" in engine.aborted[0]


class Warnings(logging.Handler):
    """Records on the module's own logger: AReaL's logging setup cuts them off from caplog's root."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_run_of_equal_reward_groups_cannot_stall_the_step():
    """A policy that fails (or solves) every episode alike gives only equal-reward groups: filtering them
    all would leave the step drawing rows forever, silently (seen: a CI job hung on a random model). After
    `max_filtered_in_a_row` filtered groups the next one is trained on (advantage 0: the step completes),
    with a warning that says why, and the count starts again."""
    engine = Run()
    inner = Prepared([group(0.0, 0.0)] * 3 + [group(0.5, -0.5)] + [group(0.0, 0.0)] * 3)
    tracked = TrackedWorkflow(
        inner, engine, max_rejected_in_a_row=2, filter_equal_rewards=True, max_filtered_in_a_row=2
    )
    warnings = Warnings()
    rollouts.logger.addHandler(warnings)
    try:
        out = run(tracked, 7)
    finally:
        rollouts.logger.removeHandler(warnings)
    assert [o is not None for o in out] == [False, False, True, True, False, False, True]
    assert tracked.stats == {"groups_filtered": 4, "equal_groups_kept": 2, "groups_failed": 0}
    assert engine.done == [0, 1, 4, 5]
    assert len(warnings.lines) == 2
    assert warnings.lines[0].startswith("2 groups in a row had equal rewards (agent.max_filtered_in_a_row)")


def test_a_group_that_raises_is_rejected_counted_and_its_row_done():
    """AReaL turns an exception out of a workflow into a rejection and draws the next row, without a limit:
    a failure every group hits (a host I/O error on a box file, a dead Docker socket in `pool()`) went on
    for ever, and the row stayed outstanding (replayed on resume). It counts as a rejected group, with its
    type in the stats; the run aborts after `max_rejected_in_a_row` of them in a row."""
    engine = Run()
    boom = [FileNotFoundError("/run/cua/box-1/status"), group(0.5, -0.5), ValueError("bad status file")]
    tracked = TrackedWorkflow(
        Prepared([*boom, ValueError("bad status file")]),
        engine,
        max_rejected_in_a_row=2,
        filter_equal_rewards=True,
        max_filtered_in_a_row=8,
    )
    out = run(tracked, 4)
    assert [o is not None for o in out] == [False, True, False, False]
    assert engine.done == [0, 2, 3]
    assert tracked.stats["groups_failed"] == 3
    assert tracked.stats["groups_failed/ValueError"] == 2
    assert tracked.stats["groups_failed/FileNotFoundError"] == 1
    assert len(engine.aborted) == 1, "two failed groups in a row abort"
    assert "groups_failed/ValueError=2" in engine.aborted[0]


def test_a_full_disk_aborts_at_once_naming_the_file():
    engine = Run()
    full = OSError(errno.ENOSPC, "No space left on device", "/outputs/exp/rollouts.jsonl")
    tracked = TrackedWorkflow(
        Prepared([full]), engine, max_rejected_in_a_row=16, filter_equal_rewards=True, max_filtered_in_a_row=8
    )
    assert run(tracked, 1) == [None]
    assert len(engine.aborted) == 1
    assert "disk full" in engine.aborted[0] and "/outputs/exp/rollouts.jsonl" in engine.aborted[0]
