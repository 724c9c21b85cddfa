"""Two trainer ranks whose groups differ in rows (episodes of different turn counts) redistribute their
trajectories through AReaL's own `redistribute_trajectories`, as its FSDP engine does before every update.
AReaL 1.0.4 gathers every list across ranks element by element and raised `Trying to all-gather lists
with mismatched lengths` on the per-row `multi_modal_input` lists. Real gloo, two real processes."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cua_agent.inference.local_server import free_port

ROWS = {0: 2, 1: 3}  # rows (turns) of the one group each rank prepared


def trajectory(rank: int) -> dict:
    rows, length = ROWS[rank], 5 + rank
    gen = torch.Generator().manual_seed(rank)
    return {
        "input_ids": torch.randint(0, 100, (rows, length), generator=gen),
        "attention_mask": torch.ones(rows, length, dtype=torch.bool),
        "rewards": torch.arange(rows, dtype=torch.float32) + 10 * rank,
        "multi_modal_input": [
            {
                "pixel_values": torch.randn(4 * (i + 1), 6, generator=gen),
                "image_grid_thw": torch.tensor([[1, 2, 2]]),
            }
            for i in range(rows)
        ],
    }


def worker(rank: int, port: int, patched: bool, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        if patched:
            from cua_agent.train import patches

            patches.install("sdpa")
        from areal.infra.dist_rollout import redistribute_trajectories

        try:
            redist = redistribute_trajectories([trajectory(rank)])
        except RuntimeError as exc:
            results[rank] = f"error: {exc}"
            return
        results[rank] = [
            {
                "rows": int(d["input_ids"].shape[0]),
                "mm": [m["pixel_values"].clone() for m in d["multi_modal_input"]],
            }
            for d in redist.all_data
        ]
    finally:
        dist.destroy_process_group()


def redistribute(patched: bool) -> dict:
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(free_port(), patched, results), nprocs=2, join=True)
        return dict(results)


def test_areal_alone_fails_on_ragged_multi_modal_lists():
    """The defect, reproduced: what AReaL 1.0.4 does without our patch."""
    results = redistribute(patched=False)
    assert all("mismatched lengths" in str(r) for r in results.values()), results


def test_with_the_patch_every_rank_sees_every_row_exactly():
    results = redistribute(patched=True)
    for rank in (0, 1):
        seen = results[rank]
        assert [t["rows"] for t in seen] == [ROWS[0], ROWS[1]], (rank, seen)
        for src, t in enumerate(seen):
            expected = [m["pixel_values"] for m in trajectory(src)["multi_modal_input"]]
            assert len(t["mm"]) == len(expected)
            assert all(torch.equal(a, b) for a, b in zip(t["mm"], expected, strict=True))
