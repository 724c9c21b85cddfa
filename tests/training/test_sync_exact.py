"""After every weight sync the server samples with exactly the weights the trainer holds: `train_areal.py` on
configs/local_cpu.yaml (the warm start, so groups carry a signal and the weights move) at 2 trainer ranks,
with rollouts kept on policy (`rollout.max_head_offpolicyness=0`: each step's rows are sampled by the version
being trained).

The trainer recomputes every answer token's logprob (pi_proximal) and AReaL divides it by the server's
(pi_behaviour): that ratio, in steps.jsonl's `importance`, is 1 for every token of every step, also after
the weights moved. A sync that is lossy (a dtype, a renamed or dropped tensor, the vision tower left
behind), or one that is not loaded at all, shows here as ratios away from 1; the logprob parity tests
compare the server with a reference model, not with what the trainer saved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from cua_agent.inference.local_server import WARM_MODEL
from tests.training.harness import Run, boxes_of, left_behind, restore_weights, run_training, steps_of

pytestmark = pytest.mark.slow
STEPS = 3
TOLERANCE = 1e-4  # of the ratio; fp32 recompute against the server is within ~5e-7 in logprob


def train(address: str, exp: Path, log: Path) -> Run:
    return run_training(
        [
            f"actor.path={WARM_MODEL}",
            "inference.launch_local=false",
            f'inference.addresses=["{address}"]',
            f"cluster.fileroot={exp}",
            f"total_train_steps={STEPS}",
            "total_train_epochs=100",
            "tasks.task_ids=[miniwob/click-test]",
            "agent.filter_equal_reward_groups=true",
            "agent.max_turns=1",
            "agent.group_size=4",  # x 2 ranks: 8 episodes a step
            "agent.min_group_size=2",
            "train_dataset.batch_size=2",
            "rollout.max_concurrent_rollouts=1",
            "rollout.max_head_offpolicyness=0",
            "actor.optimizer.lr=1e-3",
            "saver.freq_epochs=null",
            f"saver.freq_steps={STEPS}",
        ],
        log,
    )


def test_every_synced_version_is_served_as_the_trainer_holds_it(warm_server, tmp_path: Path):
    exp = tmp_path / "exp"
    try:
        run = train(warm_server.address, exp, tmp_path / "run.log")
    finally:
        restore_weights(warm_server.address, WARM_MODEL, tmp_path, version=0)  # a shared server
    assert run.rc == 0, f"train_areal.py exited {run.rc} after {run.elapsed_s:.0f}s:\n{run.tail()}"
    assert left_behind(run) == [] and boxes_of(run.pids) == []

    steps = steps_of(exp)
    assert sorted(steps) == list(range(STEPS)), sorted(steps)
    for step, record in sorted(steps.items()):
        assert record["versions"]["sample_staleness_theta_max"] == 0, (step, record["versions"])
        ratio = record["importance"]
        assert abs(ratio["behave_imp_weight_min"] - 1) < TOLERANCE, (step, ratio)
        assert abs(ratio["behave_imp_weight_max"] - 1) < TOLERANCE, (step, ratio)

    # ...while the weights did move: the run's last HF save differs from the warm start it began from,
    # except the language model's attention, which configs/local_cpu.yaml's lr_groups keep still (scale 0)
    (saved,) = exp.glob(f"checkpoints/*/*/*/default/*globalstep{STEPS - 1}/model.safetensors")
    before, after = load_file(WARM_MODEL / "model.safetensors"), load_file(saved)
    moved = {name for name in before if not before[name].equal(after[name])}
    still = {name for name in before if ".self_attn." in name}
    assert len(still) == 14 and not moved & still, sorted(moved & still)
    assert len(moved) > (len(before) - len(still)) // 2, f"only {len(moved)} of {len(before)} tensors moved"
    print(f"\n{STEPS} on-policy steps, every ratio within {TOLERANCE} of 1: {run.elapsed_s:.0f}s")
