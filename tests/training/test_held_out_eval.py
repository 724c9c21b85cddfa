"""The trainer's held-out evaluation: an evaluation that cannot run (here: no server at the address, through
the real client and its retries) is logged and counted, and training goes on."""

from __future__ import annotations

from types import SimpleNamespace

from cua_agent.evaluate.held_out import HeldOutEval
from cua_agent.inference.local_server import free_port
from cua_agent.train.trainer import CUATrainer
from tests.training.test_config import load


def test_a_failing_evaluation_does_not_stop_training(tmp_path):
    config = load(tmp_path, "evaluation.enabled=true", "tasks.task_ids=[miniwob/click-test]")
    fake = SimpleNamespace(  # the trainer's state this method reads: no FSDP actor is needed for it
        held_out=HeldOutEval(config),
        config=config,
        server_addresses=[f"127.0.0.1:{free_port()}"],  # nothing listens there
        rollout=SimpleNamespace(model_for=lambda version: None, get_version=lambda: 4),
        _eval_stats={},
    )
    CUATrainer._evaluate_held_out(fake, 4)  # type: ignore[arg-type]
    assert fake._eval_stats == {"eval/failed": 1.0}


def test_each_held_out_seed_is_played_episodes_per_seed_times(tmp_path):
    config = load(
        tmp_path,
        "evaluation.enabled=true",
        "tasks.task_ids=[miniwob/click-test]",
        "evaluation.seeds_per_task=2",
        "evaluation.episodes_per_seed=3",
    )
    seeds = [row["seed"] for row in HeldOutEval(config).rows]
    assert len(seeds) == 6 and all(seeds.count(s) == 3 for s in set(seeds))
