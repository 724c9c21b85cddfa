"""The tiny Qwen3-VL, `agent.model_family: qwen3-vl` (the computer_use tool, 0-1000 coordinates), through the
evaluation command against the real vLLM CPU server and real sandboxes. Its training, with a held-out
evaluation, at 2 trainer ranks: the rehearsal of configs/cua_grpo_qwen3vl_8b.yaml (tests/rehearsal)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cua_agent.inference.local_server import QWEN3_VL_MODELS
from tests.training.harness import evaluate_cli

pytestmark = pytest.mark.slow
MODEL = QWEN3_VL_MODELS["untied"]


def test_the_evaluation_command_on_the_tiny_qwen3_vl(qwen3_vl_servers, tmp_path: Path):
    server = qwen3_vl_servers["untied"]
    out = tmp_path / "eval"
    base_url = f"http://{server.address}/v1"
    args = ["--base-url", base_url, "--model", str(MODEL), "--model-family", "qwen3-vl"]
    args += [
        "--task-ids",
        "miniwob/click-test",
        "--seeds-per-task",
        "2",
        "--max-turns",
        "2",
        "--out",
        str(out),
    ]
    proc = evaluate_cli(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["episodes"] == 2 and report["meta"]["model_family"] == "qwen3-vl", report
    played = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert all(e["status"] != "infra_error" for e in played), played
