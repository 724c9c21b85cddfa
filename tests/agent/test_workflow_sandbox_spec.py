"""A task row's `sandbox` block is what the workflow's boxes are started with (the real pool; a backend that
records its start calls and hands out boxes whose reset fails, so no episode needs a model)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from cua_agent.rollout import workflow as workflow_module
from cua_agent.rollout.workflow import CUAWorkflow
from cua_agent.train.dataset import load_task_rows
from sandbox.base import Backend, Sandbox, SandboxSpec
from sandbox.errors import SandboxDied
from tests.agent.test_workflow_rows import config

REPO = Path(__file__).resolve().parents[2]


class DeadOnReset:
    async def health(self, timeout: float = 5.0) -> dict:
        return {"ok": True}

    async def reset(self, task_id: str, seed: int) -> dict:
        raise SandboxDied("recording backend: no desktop here")

    async def aclose(self) -> None:
        pass


class RecordingBackend(Backend):
    name = "recording"

    def __init__(self) -> None:
        super().__init__("recording-run")
        self.started_with: list[SandboxSpec] = []

    async def start(self, spec: SandboxSpec) -> Sandbox:
        self.started_with.append(spec)
        return Sandbox(id=f"box{len(self.started_with)}", backend=self, client=DeadOnReset(), spec=spec)  # type: ignore[arg-type]

    async def stop(self, sb: Sandbox) -> None:
        pass

    def remove_sync(self, box_id: str) -> None:
        pass

    def list_boxes(self, run_id: str | None = None) -> list[dict]:
        return []


async def test_a_rows_sandbox_block_reaches_the_backends_start_call(monkeypatch):
    backend = RecordingBackend()
    monkeypatch.setattr(workflow_module, "make_backend", lambda *a, **kw: backend)
    wf = CUAWorkflow(config(group_size=2))
    desktop = load_task_rows(REPO / "tasks" / "desktop.jsonl", seeds_per_task=1)[0]
    own = {**desktop, "sandbox": {"image": "cua-office:1", "resources": {"screen": "1024x768"}}}
    engine = SimpleNamespace()  # never called: every episode ends at reset
    try:
        assert await wf.arun_episode(engine, desktop) is None  # infrastructure failures: group rejected
        assert await wf.arun_episode(engine, own) is None
    finally:
        await wf.close()
    run = SandboxSpec(image=wf.sandbox_cfg.image)
    assert (
        backend.started_with
        == [SandboxSpec(image=run.image, memory_mb=1024)] * 2
        + [SandboxSpec(image="cua-office:1", screen=(1024, 768))] * 2
    )
