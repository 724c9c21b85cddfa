"""A GRPO step with its desktops on GBox: `train_areal.py` with `sandbox.backend=gbox`, the real gbox-sdk
and the local GBox server (it stands in for the GBox cloud, unreachable here, and drives real local
desktops), the real vLLM CPU server and AReaL's trainer. The run leaves no box on the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cua_agent.inference.local_server import MODELS
from tests.sandbox.gbox_fake import start_fake_gbox
from tests.training.harness import SMALL_STEP_ARGS, left_behind, restore_weights, run_training

pytestmark = pytest.mark.slow


def test_a_grpo_step_on_gbox_desktops(vllm_servers, tmp_path: Path, monkeypatch):
    server = vllm_servers["untied"]
    gbox = start_fake_gbox(tmp_path / "gbox")
    try:
        for key, value in gbox.env.items():
            monkeypatch.setenv(key, value)
        exp = tmp_path / "exp"
        run = run_training(
            [
                *SMALL_STEP_ARGS,
                f"cluster.fileroot={exp}",
                "total_train_steps=1",
                f'inference.addresses=["{server.address}"]',
                "sandbox.backend=gbox",
            ],
            tmp_path / "run.log",
        )
        assert run.rc == 0, f"train_areal.py exited {run.rc} after {run.elapsed_s:.0f}s:\n{run.tail()}"
        assert left_behind(run) == [], "the run left processes behind"
        episodes = [json.loads(line) for line in (exp / "rollouts.jsonl").read_text().splitlines()]
        assert len(episodes) >= 2 and all(e["status"] != "infra_error" for e in episodes), episodes
        assert all(e["task_reward"] is not None and e["turns"] for e in episodes)
        assert gbox.running() == [], "the run left boxes on the GBox server"
        created = gbox.boxes()
        assert created and all(b["status"] == "terminated" for b in created)
        print(f"\na GRPO step on gbox: {run.elapsed_s:.0f}s, {len(episodes)} episodes, {len(created)} boxes")
    finally:
        gbox.stop()
        # The step trained the shared server's weights: later tests sample from the original model.
        restore_weights(server.address, MODELS["untied"], tmp_path, version=2)
