"""A mixed GUI + terminal step at 2 trainer ranks, below the redistribution: after it, one rank's micro-batch
may hold screenshot rows and the other's text rows only. FSDP shards the vision tower block by block, so a
rank that skipped the tower also skipped its collectives while the other ran them: gloo aborted the step
("Received data size doesn't match expected size"; NCCL would hang). Found by the mixed rehearsal of
configs/cua_grpo.yaml (tests/rehearsal). Real processes, gloo, AReaL's FSDP actor, one full update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cua_agent.inference.local_server import REPO

pytestmark = pytest.mark.slow


def test_a_rank_with_text_rows_only_updates_beside_a_rank_with_screenshots(tmp_path: Path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(Path(__file__).with_name("mixed_update.py")), str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank, sign in ((0, 1), (1, -1)):  # the screenshot row's reward is +1, the text row's -1
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        moved = sum(r["logp_after"]) - sum(r["logp_before"])
        assert moved * sign > 0, f"rank {rank}: its answer's logprob moved by {moved}"
