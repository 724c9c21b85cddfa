"""The learning signal reaches the weights with its sign: one GRPO update of AReaL's FSDP actor, configured
as configs/local_cpu.yaml (decoupled loss, rejection sampling, no reward or advantage re-normalisation),
raises the logprobs of the answers in rows with a positive advantage and lowers those with a negative one.

The rows are real (the workflow against the vLLM CPU server and real sandboxes); their advantages are set
+1 / -1 by row, so the expected direction of every row is known. A flipped sign, advantages that never
reach the loss, a loss mask off by one token or rows paired with another row's advantage make it fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cua_agent.inference.local_server import MODELS
from cua_agent.rollout.workflow import CUAWorkflow
from tests.agent.test_workflow_rows import config

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("one_update.py")


async def test_one_update_moves_each_rows_answer_the_way_its_advantage_says(rollout_engine, tmp_path: Path):
    wf = CUAWorkflow(config(group_size=4, min_group_size=4, max_turns=2, max_new_tokens=16))
    try:
        (batch,) = rollout_engine.rollout_batch(
            [{"task_id": "miniwob/click-test", "seed": 5, "max_turns": 2}], workflow=wf
        )
    finally:
        await wf.close()
    n = batch["input_ids"].shape[0]
    assert n >= 4
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n)])
    batch["rewards"] = signs
    rows = tmp_path / "rows.pt"
    torch.save(batch, rows)
    out = tmp_path / "update.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(rows), str(MODELS["untied"]), str(out), "actor.optimizer.lr=1e-3"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())["rows"]
    print(
        "\nper row (advantage, mean logprob change of its answer):",
        [(r["reward"], round(r["delta"], 4)) for r in result],
    )
    assert [r["reward"] for r in result] == signs.tolist()
    wrong = [r for r in result if r["delta"] * r["reward"] <= 0]
    assert not wrong, f"rows whose answer moved against their advantage: {wrong}"
