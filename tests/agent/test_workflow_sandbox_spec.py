"""A task row's `sandbox` block is what the workflow starts its box with: its image and resources over the
run's defaults (the real pool starting real boxes from such specs: tests/sandbox/test_sandbox_real.py)."""

from __future__ import annotations

from pathlib import Path

from cua_agent.rollout.sandboxes import RolloutSandboxes
from cua_agent.rollout.task_rows import load_task_rows
from sandbox.base import SandboxSpec
from tests.agent.test_workflow_rows import config

REPO = Path(__file__).resolve().parents[2]


def test_a_rows_sandbox_block_is_the_spec_its_box_gets():
    run = config().sandbox
    sandboxes = RolloutSandboxes(run)
    desktop = load_task_rows(REPO / "tasks" / "desktop.jsonl", seeds_per_task=1)[0]
    miniwob = load_task_rows(REPO / "tasks" / "miniwob.jsonl", seeds_per_task=1)[0]
    own = {**desktop, "sandbox": {"image": "cua-office:1", "resources": {"screen": "1024x768"}}}
    assert sandboxes.spec_for(desktop) == SandboxSpec(image=run.image, memory_mb=1024)  # tasks/desktop.jsonl
    assert sandboxes.spec_for(miniwob) == SandboxSpec(image=run.image)  # names nothing: the run's defaults
    assert sandboxes.spec_for(own) == SandboxSpec(image="cua-office:1", screen=(1024, 768))
    assert sandboxes.spec_for({"task_id": "t", "seed": 0}) == SandboxSpec(image=run.image)  # no block at all
