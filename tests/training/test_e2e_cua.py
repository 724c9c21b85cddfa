"""End to end, the product path: `train_areal.py` with the CUA workflow — real podman sandboxes with
chromium and MiniWoB++, the real vLLM CPU server, AReaL's PPOTrainer with FSDP on CPU — runs 2 GRPO steps,
pushes new weights twice (the server serves version 2), records every episode, leaves no sandbox and no
process behind, and keeps no per-step weight copies."""

from __future__ import annotations

import asyncio
import getpass
import json
from pathlib import Path

import pytest

from cua_agent.inference.local_server import MODELS
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from tests.training.harness import boxes_of, left_in_session, restore_weights, run_training

pytestmark = pytest.mark.slow


async def served_version(address: str) -> int | None:
    try:
        return await VLLMServer(address).weight_version()
    finally:
        await close_loop_session()


def test_two_grpo_steps_on_real_sandboxes(vllm_servers, tmp_path: Path):
    server = vllm_servers["untied"]
    exp = tmp_path / "exp"
    run = run_training(
        [
            f"cluster.fileroot={exp}",
            "total_train_steps=2",
            "inference.launch_local=false",
            f'inference.addresses=["{server.address}"]',
            "tasks.task_ids=[miniwob/click-test,miniwob/click-button]",
            "agent.group_size=2",
            "agent.min_group_size=2",
            "agent.max_turns=2",
            "agent.max_new_tokens=24",
            "agent.save_screenshots=true",
            "sandbox.max_concurrency=2",
            "evaluation.enabled=true",  # held-out evaluation after step 2
            "evaluator.freq_steps=2",
            "evaluation.seeds_per_task=1",
            "evaluation.concurrency=2",
        ],
        tmp_path / "run.log",
    )
    assert run.rc == 0, f"train_areal.py exited {run.rc} after {run.elapsed_s:.0f}s:\n{run.tail()}"
    assert left_in_session(run.pid) == [], "the run left processes behind"
    assert boxes_of(run.pid) == [], "the run left sandboxes behind"

    assert asyncio.run(served_version(server.address)) == 2
    episodes = [json.loads(line) for line in (exp / "rollouts.jsonl").read_text().splitlines()]
    assert len(episodes) >= 4 and all(
        e["status"] in ("max_turns", "done", "task_done", "parse_failure") for e in episodes
    )
    assert all(e["task_reward"] is not None and e["turns"] for e in episodes)
    assert {t["version"] for e in episodes for t in e["turns"]} <= {0, 1}
    assert list((exp / "screenshots").rglob("*.png"))
    log = (exp / "logs" / "training.log").read_text(errors="replace")
    assert "Train step 2/" in log
    # what the policy achieved, per step: in steps.jsonl and in the step's log line, from the episodes
    steps = [json.loads(x) for x in next((exp / "logs").rglob("steps.jsonl")).read_text().splitlines()]
    scored = sum(s["episodes"].get("all/episodes", 0) for s in steps)
    assert 0 < scored <= len(episodes)
    assert all(0 <= s["episodes"]["all/success_rate"] <= 1 for s in steps if s["episodes"])
    assert any("miniwob/success_rate" in s["episodes"] for s in steps)
    assert "Step 1: success " in log or "Step 1: no episode scored" in log
    # the held-out evaluation: after step 2 only, 2 tasks x 1 test seed, in the stats, steps.jsonl and log
    assert steps[0]["eval"] == {} and steps[1]["eval"]["eval/all/episodes"] == 2, [s["eval"] for s in steps]
    assert steps[1]["eval"]["eval/miniwob/click-test/episodes"] == 1
    report = json.loads((exp / "eval" / "step2" / "report.json").read_text())
    assert report["overall"]["episodes"] == 2 and report["meta"]["split"] == "test"
    assert all(
        r["seed"] >= 100000 for r in map(json.loads, (exp / "eval" / "step2" / "rollouts.jsonl").open())
    )
    assert "Held-out eval after step 2: success " in log
    trial = exp / "checkpoints" / getpass.getuser() / "cua-local" / "trial0" / "default"
    assert (trial.parent / "recover" / "globalstep1" / "manifest.json").is_file()
    assert not list(trial.glob("weight_update_v*")), "weight-sync copies must be removed once loaded"
    print(f"\n2 GRPO steps on real sandboxes: {run.elapsed_s:.0f}s, {len(episodes)} episodes")
    restore_weights(server.address, MODELS["untied"], tmp_path, version=3)
