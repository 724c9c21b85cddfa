"""Exact resume, on the product path (train_areal.py, real sandboxes, the real vLLM CPU server, AReaL's
PPOTrainer): a run killed with SIGKILL in the middle of a step and restarted with `--resume` trains the
remaining steps on the same rows, in the same order, with the same learning rates as an uninterrupted run
of the same seed; the sandboxes the killed run left are reaped; an older checkpoint can be chosen;
corrupt or incompatible checkpoints are refused with the reason. At 2 trainer ranks. SIGTERM, with its
stop-time checkpoint and a resume: the rehearsals of every shipped GPU config (tests/rehearsal)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from areal.api.cli_args import load_expr_config

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.train.checkpointing import CheckpointError, read_manifest
from cua_agent.train.job import _absolute_paths, _resume_point
from tests.training.harness import (
    RANKS,
    boxes_of,
    kill_mid_step,
    left_behind,
    rank_args,
    recover_dir,
    restore_weights,
    run_training,
    same_steps,
    served_version,
    steps_of,
)

pytestmark = pytest.mark.slow

STEPS = 3  # 2, a kill in the 3rd, then the 3rd again after the resume


def args(exp: Path, address: str, steps: int = STEPS) -> list[str]:
    return [
        f"cluster.fileroot={exp}",
        f"total_train_steps={steps}",
        "seed=7",
        "inference.launch_local=false",
        f'inference.addresses=["{address}"]',
        "tasks.task_ids=[miniwob/click-test,miniwob/click-button]",
        "agent.group_size=2",
        "agent.min_group_size=2",
        "agent.max_turns=2",
        "agent.max_new_tokens=16",
        "sandbox.max_concurrency=2",
        # One group in flight: step k trains draw k, so runs compare step by step. (With more, groups finish
        # out of order and a checkpoint has rows in flight; their replay is tested in test_data_feed.py.)
        "rollout.max_concurrent_rollouts=1",
        "actor.optimizer.lr_scheduler_type=linear",  # the LR changes every step
    ]


@pytest.fixture(scope="module")
def reference(vllm_servers, tmp_path_factory):
    """An uninterrupted run of STEPS steps."""
    server = vllm_servers["untied"]
    exp = tmp_path_factory.mktemp("reference") / "exp"
    run = run_training(args(exp, server.address), exp.parent / "run.log")
    assert run.rc == 0, f"reference run exited {run.rc}:\n{run.tail()}"
    steps = steps_of(exp)
    assert sorted(steps) == list(range(STEPS))
    assert len({s["lr"] for s in steps.values()}) == STEPS, "the linear schedule must change the LR"
    yield exp, steps
    restore_weights(server.address, MODELS["untied"], exp.parent, version=0)


def test_kill_9_mid_step_then_resume_matches_an_uninterrupted_run(vllm_servers, reference, tmp_path: Path):
    server = vllm_servers["untied"]
    _, ref_steps = reference
    exp = tmp_path / "exp"
    # Kill in the middle of step 3 (global step 2): after step 2 was logged, while its episodes run.
    killed = kill_mid_step(args(exp, server.address), exp, tmp_path / "killed.log", finished=2)
    assert killed.rc == -9
    orphans = boxes_of(killed.pids)
    assert orphans, "the killed run should have left its sandboxes running (or the test killed too late)"
    assert 2 not in steps_of(exp, killed.pids)
    assert [p.name for p in sorted(recover_dir(exp).iterdir())] == ["globalstep0", "globalstep1"]

    resumed = run_training(["--resume", *args(exp, server.address)], tmp_path / "resumed.log")
    assert resumed.rc == 0, f"resumed run exited {resumed.rc}:\n{resumed.tail()}"
    log = (exp / "logs" / "training.log").read_text(errors="replace")
    assert f"Resumed from {recover_dir(exp) / 'globalstep1'}" in log

    first, second = steps_of(exp, killed.pids), steps_of(exp, resumed.pids)
    assert sorted(first) == [0, 1] and sorted(second) == [2]
    assert same_steps({**first, **second}, ref_steps) == []
    assert served_version(server.address) == STEPS
    assert boxes_of(killed.pids) == [] and boxes_of(resumed.pids) == [], "orphaned sandboxes must be reaped"
    assert left_behind(resumed) == []
    wandb_runs = list(exp.glob("logs/*/*/*/wandb/offline-run-*"))
    assert len(wandb_runs) == 2 and all(p.name.endswith("-cua-local_trial0_train") for p in wandb_runs), (
        f"the resumed run must continue the same wandb run id: {wandb_runs}"
    )
    print(
        f"\nkill -9 at step 3 after {killed.elapsed_s:.0f}s ({len(orphans)} orphaned sandboxes); "
        f"resumed run {resumed.elapsed_s:.0f}s; step 3 matches the uninterrupted run"
    )


def test_resume_from_an_older_checkpoint(vllm_servers, reference, tmp_path: Path):
    server = vllm_servers["untied"]
    ref_exp, ref_steps = reference
    exp = tmp_path / "exp"
    shutil.copytree(ref_exp, exp)
    older = recover_dir(exp) / "globalstep0"
    assert sorted(p.name for p in recover_dir(exp).iterdir()) == ["globalstep0", "globalstep1", "globalstep2"]

    run = run_training(
        ["--resume_from_checkpoint", str(older), *args(exp, server.address, steps=2)], tmp_path / "run.log"
    )
    assert run.rc == 0, f"exited {run.rc}:\n{run.tail()}"
    assert same_steps(steps_of(exp, run.pids), ref_steps) == [] and sorted(steps_of(exp, run.pids)) == [1]
    committed = sorted(p.name for p in recover_dir(exp).iterdir() if p.name.startswith("globalstep"))
    assert committed == ["globalstep0", "globalstep1"]
    assert read_manifest(recover_dir(exp) / "globalstep1")["created"] > time.time() - run.elapsed_s
    assert sorted(p.name.split("-")[0] for p in (recover_dir(exp) / "superseded").iterdir()) == [
        "globalstep1",
        "globalstep2",
    ]


def load_config(exp: Path, address: str, *extra: str) -> CUAGRPOConfig:
    """The config of a run like the reference (RANKS ranks), with `extra` on top."""
    keys = {e.split("=", 1)[0] for e in extra}
    ranks = [a for a in rank_args(RANKS) if a.split("=", 1)[0] not in keys]
    config, _ = load_expr_config(
        ["--config", str(REPO / "configs" / "local_cpu.yaml"), *args(exp, address), *ranks, *extra],
        CUAGRPOConfig,
    )
    _absolute_paths(config)
    return config


def test_corrupt_and_incompatible_checkpoints_are_refused_with_the_reason(
    vllm_servers, reference, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("WORLD_SIZE", str(RANKS))  # as the reference ran
    address = vllm_servers["untied"].address
    ref_exp, _ = reference
    exp = tmp_path / "exp"
    shutil.copytree(recover_dir(ref_exp), recover_dir(exp))
    ckpt = recover_dir(exp) / "globalstep2"

    def refused(*extra: str) -> str:
        with pytest.raises(CheckpointError) as err:
            _resume_point(load_config(exp, address, *extra), rank=0)
        return str(err.value)

    assert "checkpoint has 'fsdp:d2', this run has 'fsdp:d4'" in refused(
        f"checkpoint.resume_from={ckpt}", "actor.backend=fsdp:d4"
    )
    assert "train_dataset.batch_size: checkpoint has 2, this run has 4" in refused(
        f"checkpoint.resume_from={ckpt}", "train_dataset.batch_size=4"
    )
    shard = next((ckpt / "model").glob("*.distcp"))
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    assert f"is corrupt: model/{shard.name} has" in refused(f"checkpoint.resume_from={ckpt}")
    (recover_dir(exp) / "globalstep1" / "manifest.json").unlink()
    assert "no manifest.json" in refused(f"checkpoint.resume_from={recover_dir(exp) / 'globalstep1'}")

    # End to end: a different model is refused before any server or sandbox starts.
    run = run_training(
        [
            "--resume_from_checkpoint",
            str(recover_dir(exp) / "globalstep0"),
            *args(exp, address),
            f"actor.path={MODELS['tied']}",
        ],
        tmp_path / "run.log",
    )
    assert run.rc != 0
    assert "model.tie_word_embeddings: checkpoint has False, this run has True" in run.tail(200)
    assert boxes_of(run.pids) == []
