"""Two trainer ranks redistribute their trajectories through AReaL's own `redistribute_trajectories`, as its
FSDP engine does before every update. Real gloo, two real processes.

- Ragged: the ranks' groups differ in rows (episodes of different turn counts). AReaL 1.0.4 gathers every
  list across ranks element by element and raised `Trying to all-gather lists with mismatched lengths` on
  the per-row `multi_modal_input` lists.
- Mixed: one rank's group is a GUI group (each row's entry holds its screenshots and image grid), the other a
  terminal group (each row's entry is empty), with as many rows. Equal lengths sent the gather element by
  element, and it raised `Trying to all-gather dicts with mismatched keys` on `{}` against the GUI entry."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cua_agent.inference.local_server import free_port
from cua_agent.rollout.rows import SCREENSHOTS

ROWS = {"ragged": {0: 2, 1: 3}, "mixed": {0: 2, 1: 2}}  # rows (turns) of the one group each rank prepared


def multi_modal(case: str, rank: int, rows: int, gen: torch.Generator) -> list[dict]:
    if case == "mixed" and rank == 1:  # the terminal agent's rows: no image
        return [{} for _ in range(rows)]
    if case == "mixed":  # the GUI agent's rows as the workflow builds them: PNG bytes and the image grid
        return [
            {SCREENSHOTS: [bytes([i, rank]) * (i + 3)], "image_grid_thw": torch.tensor([[1, 2, 2]])}
            for i in range(rows)
        ]
    return [
        {
            "pixel_values": torch.randn(4 * (i + 1), 6, generator=gen),
            "image_grid_thw": torch.tensor([[1, 2, 2]]),
        }
        for i in range(rows)
    ]


def trajectory(case: str, rank: int) -> dict:
    rows, length = ROWS[case][rank], 5 + rank
    gen = torch.Generator().manual_seed(rank)
    return {
        "input_ids": torch.randint(0, 100, (rows, length), generator=gen),
        "attention_mask": torch.ones(rows, length, dtype=torch.bool),
        "rewards": torch.arange(rows, dtype=torch.float32) + 10 * rank,
        "multi_modal_input": multi_modal(case, rank, rows, gen),
    }


def worker(rank: int, port: int, case: str, patched: bool, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        if patched:
            from cua_agent.train import patches

            patches.install("sdpa")
        from areal.infra.dist_rollout import redistribute_trajectories

        try:
            redist = redistribute_trajectories([trajectory(case, rank)])
        except RuntimeError as exc:
            results[rank] = f"error: {exc}"
            return
        results[rank] = [
            {"rows": int(d["input_ids"].shape[0]), "mm": d["multi_modal_input"]} for d in redist.all_data
        ]
    finally:
        dist.destroy_process_group()


def redistribute(case: str, patched: bool) -> dict:
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(free_port(), case, patched, results), nprocs=2, join=True)
        return dict(results)


@pytest.mark.parametrize(("case", "error"), [("ragged", "mismatched lengths"), ("mixed", "mismatched keys")])
def test_areal_alone_fails(case: str, error: str):
    """The defects, reproduced: what AReaL 1.0.4 does without our patch."""
    results = redistribute(case, patched=False)
    assert all(error in str(r) for r in results.values()), results


def same(a: object, b: object) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("case", ["ragged", "mixed"])
def test_with_the_patch_every_rank_sees_every_row_exactly(case: str):
    results = redistribute(case, patched=True)
    for rank in (0, 1):
        seen = results[rank]
        assert not isinstance(seen, str), f"rank {rank}: {seen}"
        assert [t["rows"] for t in seen] == [ROWS[case][0], ROWS[case][1]], (rank, seen)
        for src, t in enumerate(seen):
            assert same(list(t["mm"]), trajectory(case, src)["multi_modal_input"]), (rank, src, t["mm"])
