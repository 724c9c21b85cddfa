"""A run has removed its sandboxes when `run()` returns, not only when its process exits: a Ray worker lives
on after its trainer task. The multi-node rehearsal found a stopped rank's boxes still running after the
launcher had exited (boxes of the episodes in flight at the stop went only at the interpreter's exit)."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.training.harness import (
    SMALL_STEP_ARGS,
    TINY_MODEL_ARGS,
    Training,
    boxes_of,
    steps_of,
    wait_for,
    wait_training,
)

pytestmark = pytest.mark.slow


def test_a_run_stopped_with_episodes_in_flight_has_removed_its_boxes_when_it_returns(
    vllm_servers, sandbox_setup, tmp_path: Path
):
    out, exp = tmp_path / "out.json", tmp_path / "exp"
    args = [
        "--config", "configs/local_cpu.yaml", *TINY_MODEL_ARGS, *SMALL_STEP_ARGS,
        f'inference.addresses=["{vllm_servers["untied"].address}"]',
        f"cluster.fileroot={exp}", "total_train_steps=4", "agent.max_turns=1",
    ]  # fmt: skip
    script = Path(__file__).with_name("run_in_process.py")
    proc = Training([sys.executable, str(script), str(out), *args], tmp_path / "run.log")
    start = time.monotonic()
    try:
        wait_for(lambda: 0 in steps_of(exp), 300, "step 1", proc)
        wait_for(lambda: len(boxes_of(proc.pid)) > 0, 120, "step 2's sandboxes", proc)
        proc.send_signal(signal.SIGTERM)
    finally:
        run = wait_training(proc, tmp_path / "run.log", start)
    result = json.loads(out.read_text())
    assert result["exit"] == 128 + signal.SIGTERM, run.tail()
    assert result["owned"] == [], "boxes still running when run() returned"
