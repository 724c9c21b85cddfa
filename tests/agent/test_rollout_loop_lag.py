"""A group's end does not stall the rollout loop: building its rows (~3 ms each, 80 of them for a group of
8 ten-turn episodes) and appending its episodes to rollouts.jsonl (on NFS in multi-node runs) happen in a
worker thread while the other groups' episodes keep stepping. The rows are the ones `group_to_batch` builds."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import torch

from cua_agent.rollout.workflow import CUAWorkflow
from tests.agent.test_workflow_rows import episode, rows_of, workflow_factory  # noqa: F401  (a fixture)
from tests.sandbox.loop_lag import loop_lag

SLOW_S = 1.0
# An append on the loop would stall it for SLOW_S or more. Half of that leaves room for what a loaded 2-core
# machine adds: CI saw 0.28 s while the worker thread held the GIL beside two training runs.
MAX_LAG_S = SLOW_S / 2


def playing(wf: CUAWorkflow, groups: list[list]) -> None:
    """The workflow plays prepared episodes: group i's from groups[i], in order."""
    queue = [ep for group in groups for ep in group]

    async def pool():
        return None

    async def play(engine, pool, task):
        await asyncio.sleep(0)
        return queue.pop(0)

    wf.sandboxes.pool = pool  # type: ignore[method-assign]
    wf._episode = play  # type: ignore[method-assign]


def slow_appends(wf: CUAWorkflow) -> None:
    """rollouts.jsonl on a filesystem that takes SLOW_S per append."""
    record = wf.recorder.record

    def slow(*args, **kwargs):
        time.sleep(SLOW_S)
        record(*args, **kwargs)

    wf.recorder.record = slow  # type: ignore[method-assign]


async def test_a_groups_rows_and_records_are_made_off_the_rollout_loop(workflow_factory):  # noqa: F811
    wf = workflow_factory(group_size=3)
    groups = [
        [episode(wf, t, r, seed=20 + g * 3 + t) for t, r in ((1, 1.0), (2, 0.0), (3, 0.0))] for g in range(2)
    ]
    reference = workflow_factory(group_size=3)
    expected = [reference.group_to_batch(list(g), {"task_id": "t", "seed": 0}) for g in groups]
    playing(wf, groups)
    slow_appends(wf)
    async with loop_lag() as lag:
        (batch_a, record_a), (batch_b, record_b) = await asyncio.gather(
            wf.run_group(None, {"task_id": "t", "seed": 0}), wf.run_group(None, {"task_id": "t", "seed": 0})
        )
    assert lag.worst_s < MAX_LAG_S, f"the loop stalled {lag.worst_s:.2f} s"
    for batch, want in zip((batch_a, batch_b), expected, strict=True):
        assert rows_of(batch) == rows_of(want) == 6
        for key in ("input_ids", "loss_mask", "logprobs", "versions", "rewards", "attention_mask"):
            assert torch.equal(batch[key], want[key]), key
    assert record_a.group != record_b.group
    assert wf.stats["episodes"] == 6 and wf.stats["rows"] == 12  # both groups counted, none lost
    lines = [json.loads(x) for x in Path(wf.recorder.path).read_text().splitlines()]
    assert sorted(r["group"] for r in lines) == sorted([record_a.group] * 3 + [record_b.group] * 3)
