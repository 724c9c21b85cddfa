"""`sandbox.backend: ray` without a cluster: how many sandbox slots a run holds at once (one rule for the
launcher and `train_areal.py --check`), and what the check says when no Ray cluster answers. The check
against a live cluster: tests/sandbox/test_ray_backend.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cua_agent.inference.local_server import REPO, free_port
from cua_agent.rollout.task_rows import load_task_rows
from cua_agent.train.launch_ray import RayLaunchError, check_capacity
from cua_agent.train.preflight import check, ray_cluster_nodes
from tests.deploy.test_launch_ray import CPU_RUN, launcher_config, node
from tests.training.test_config import load
from tests.training.test_preflight import PLENTY, shape

REPO_TASKS = "sandbox/repo/samples/tasks.jsonl"


def slots(*counts: float) -> list[dict[str, Any]]:
    """Trainer nodes for CPU_RUN's two trainers, and sandbox machines offering `counts` slots."""
    return [node(1), node(1)] + [{"Alive": True, "Resources": {"CPU": 4, "sandbox_slots": n}} for n in counts]


def test_a_repository_run_needs_slots_for_its_episodes_boxes_and_their_scoring_boxes():
    """An episode keeps its box while its tests run in a second one: 2 trainers x 4 x 2 = 16 slots."""
    cfg = launcher_config(
        *CPU_RUN,
        "sandbox.backend=ray",
        "sandbox.max_concurrency=4",
        f"tasks.train_path={REPO_TASKS}",
        "tasks.task_ids=[]",
    )
    check_capacity(cfg, slots(8, 8))
    with pytest.raises(
        RayLaunchError, match=r"^sandbox\.max_concurrency: 2 trainer processes x 8 boxes need 16"
    ):
        check_capacity(cfg, slots(8, 7))


def test_the_launcher_counts_the_trainers_default_max_concurrency():
    cfg = launcher_config(*CPU_RUN, "sandbox.backend=ray", "~sandbox.max_concurrency")
    with pytest.raises(RayLaunchError, match=r"x 4 boxes need 8"):  # SandboxConfig's default: 4
        check_capacity(cfg, slots(2))


def test_rank_0s_held_out_evaluation_needs_slots_beside_the_trainers_boxes():
    """Rank 0 plays the held-out rows while every trainer's pool keeps its boxes (idle ones hold their
    slots too): 2 trainers x 4 desktops + 3 evaluation desktops = 11 slots. Counting only the trainers'
    let a run start that waited for good on its first evaluation."""
    cfg = launcher_config(
        *CPU_RUN, "sandbox.backend=ray", "evaluation.enabled=true", "evaluation.concurrency=3"
    )
    check_capacity(cfg, slots(6, 5))
    with pytest.raises(
        RayLaunchError, match=r"\+ 3 for rank 0's held-out evaluation \(evaluation\.concurrency\) need 11"
    ):
        check_capacity(cfg, slots(5, 5))
    check_capacity(launcher_config(*CPU_RUN, "sandbox.backend=ray", "evaluation.enabled=false"), slots(4, 4))


def preflight(tmp_path, *overrides: str, **ray: Any) -> tuple[list[str], list[str]]:
    cfg = load(tmp_path, "sandbox.backend=ray", *overrides)
    rows = load_task_rows(REPO / cfg.tasks.train_path, cfg.tasks.train_split, list(cfg.tasks.task_ids))
    _, problems, notes = check(
        cfg, rows, shape("qwen2.5-vl-3b"), gpu_bytes=None, host_bytes=PLENTY, disk_bytes=PLENTY, **ray
    )
    return problems, notes


def test_the_check_compares_the_clusters_slots_by_the_launchers_rule(tmp_path):
    problems, _ = preflight(tmp_path, "sandbox.max_concurrency=3", ray_nodes=slots(2))
    refused = "sandbox.max_concurrency: 1 trainer processes x 3 boxes need 3 sandbox_slots"
    assert any(p.startswith(refused) for p in problems), problems
    problems, notes = preflight(tmp_path, "sandbox.max_concurrency=2", ray_nodes=slots(1, 1))
    assert not any("sandbox" in p for p in problems)
    assert any("offer 2 sandbox_slots; the run holds 2 at most" in n for n in notes), notes
    evaluated = ("sandbox.max_concurrency=2", "evaluation.enabled=true", "evaluation.concurrency=2")
    problems, _ = preflight(tmp_path, *evaluated, ray_nodes=slots(1, 2))
    assert any("need 4 sandbox_slots" in p and "evaluation.concurrency" in p for p in problems), problems
    problems, notes = preflight(tmp_path, *evaluated, ray_nodes=slots(2, 2))
    assert not any("sandbox" in p for p in problems)
    assert any("the run holds 4 at most" in n for n in notes), notes


def test_the_check_says_it_skipped_the_slots_and_why_when_no_cluster_answers(tmp_path):
    began = time.monotonic()
    nodes, why = ray_cluster_nodes(f"127.0.0.1:{free_port()}")
    assert nodes is None and why.startswith("nothing answers at 127.0.0.1:")
    assert time.monotonic() - began < 5
    problems, notes = preflight(tmp_path, ray_nodes=None, ray_unchecked=why)
    assert not any("sandbox" in p for p in problems)
    assert any(
        n.startswith("sandbox.backend=ray: the Ray cluster's sandbox_slots were not checked: nothing answers")
        for n in notes
    ), notes
