"""The terminal agent through the evaluation command on the sample repository tasks (real repository boxes
of the locally built image, the real vLLM CPU server). Its training, mixed with MiniWoB++ rows at 2 trainer
ranks: the rehearsal of configs/cua_grpo.yaml (tests/rehearsal)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cua_agent.inference.local_server import MODELS
from sandbox.repo.tasks import SAMPLE_TASKS
from tests.training.harness import evaluate_cli

pytestmark = pytest.mark.slow


def episodes_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_evaluation_command_plays_repository_tasks(vllm_servers, sandbox_setup, tmp_path):
    server = vllm_servers["untied"]
    out = tmp_path / "eval"
    args = ["--base-url", f"http://{server.address}/v1", "--model", str(MODELS["untied"])]
    args += ["--tasks", str(SAMPLE_TASKS), "--split", "train", "--seeds-per-task", "2", "--max-turns", "2"]
    args += ["--max-new-tokens", "24", "--out", str(out)]
    proc = evaluate_cli(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["overall"]["episodes"] == 4, report  # 2 train tasks x 2 rows
    played = episodes_of(out / "rollouts.jsonl")
    assert {e["task_id"] for e in played} == {"repo/calc-add", "repo/textstats-words"}
    assert all(e["status"] != "infra_error" and len(e["turns"]) == 2 for e in played), played
