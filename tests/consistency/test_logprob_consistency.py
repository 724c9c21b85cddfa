"""Consistency: on rows the workflow emitted against the real vLLM CPU server (real sandboxes, real
screenshots, one- and two-image turns; the terminal agent's text-only rows on repository boxes), AReaL's
FSDP actor recomputes the logprobs before any update and they match the rows' server logprobs within 1e-3 (fp32), for each model family's tiny model. Measured on
Qwen2.5-VL: 9.5e-7 — with the fixes of cua_agent/train/patches.py; without them 5e-2 (packed micro-batches
on sdpa) and 3e-3 (Qwen2.5-VL mRoPE). Qwen3-VL: 4.8e-7; 9.8e-2 without the sdpa fix, and the same 4.8e-7
without the mRoPE fix, which is Qwen2.5-VL's only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils.data import concat_padded_tensors

from cua_agent.rollout.workflow import CUAWorkflow
from sandbox.repo.tasks import SAMPLE_TASKS
from tests.agent.test_workflow_rows import FAMILY_MODELS, config

pytestmark = pytest.mark.slow
TOL = 1e-3


ENGINES = {"qwen2.5-vl": "rollout_engine", "qwen3-vl": "qwen3_vl_rollout_engine"}  # tests/conftest.py


@pytest.fixture(params=list(ENGINES))
def family_engine(request):
    """(model family, rollout engine over its tiny model's server), set up before the test's event loop."""
    return request.param, request.getfixturevalue(ENGINES[request.param])


def recompute(batch: dict, family: str, tmp_path: Path) -> dict:
    """AReaL's FSDP actor's logprobs of the rows against the server's (recompute_logp.py, own process)."""
    rows = tmp_path / "rows.pt"
    torch.save(batch, rows)
    out = tmp_path / "result.json"
    script = Path(__file__).with_name("recompute_logp.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(rows), str(FAMILY_MODELS[family]), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


async def test_fsdp_actor_recomputes_the_servers_logprobs(family_engine, sandbox_setup, tmp_path: Path):
    """A step's rows as a mixed run trains them, in one batch: screenshot rows of one and two images (the
    GUI agent's 2-turn episodes) beside the terminal agent's text-only rows of a repository task.
    (GUI-only batches at 2 ranks: test_sync_exact.py's importance ratios of 1.)"""
    family, engine = family_engine
    wf = CUAWorkflow(
        config(
            group_size=2,
            min_group_size=2,
            max_turns=2,
            max_new_tokens=24,
            history_screenshots=2,
            model_family=family,
        )
    )
    terminal = {"task_id": "repo/calc-add", "seed": 0, "agent": "terminal", "tasks_file": str(SAMPLE_TASKS)}
    gui = {"task_id": "miniwob/click-test", "seed": 21, "max_turns": 2, "agent": "gui"}
    try:
        groups = engine.rollout_batch([terminal], workflow=wf)
        # The engine accepts one group per weight version (no off-policyness): as after a weight update.
        engine.set_version(engine.get_version() + 1)
        groups += engine.rollout_batch([gui], workflow=wf)
    finally:
        await wf.close()
    text = next(g for g in groups if not any(g["multi_modal_input"]))
    assert text["input_ids"].shape[0] == 4  # 2 episodes x 2 turns, no image in any row
    check_trajectory_format({k: v for k, v in text.items() if k != "multi_modal_input"})
    batch = concat_padded_tensors(groups)  # as AReaL joins a step's groups
    images = [mm["image_grid_thw"].shape[0] for mm in batch["multi_modal_input"] if mm]
    assert 1 in images and 2 in images, f"want one- and two-image turns: {images}"
    result = recompute(batch, family, tmp_path)
    print(f"\nconsistency ({family}), text-only rows beside screenshot rows: {result}")
    assert result["n_tokens"] > 0 and result["max"] <= TOL, result
