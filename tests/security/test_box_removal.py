"""Attacks on the removal of a box, the step every episode's clean-up ends with (sandbox/aio.py `finish`,
DockerBackend.remove_sync). A box (the model's shell in it) controls its own processes and file names; the
host must still remove it, in bounded time, and never count as removed a box the engine still runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest

from sandbox.aio import finish
from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import start_repo_box
from sandbox.repo.tasks import SAMPLE_TASKS, load_repo_tasks


class _EngineThatClaimsGone:
    """Stands in for a container engine whose removal fails with a message that merely reads like podman's
    'does not exist' (a box can put such words in the paths an engine reports); the container stays listed.
    A real engine cannot be made to fail a forced removal on demand, so this one does."""

    def __init__(self, stays: bool):
        self.stays, self.removals = stays, 0

    def remove_container(self, box_id: str, force: bool) -> None:
        self.removals += 1
        if self.stays:
            response = SimpleNamespace(status_code=500, reason="Internal Server Error")
            raise docker.errors.APIError(
                "500", response=response, explanation=f"unlinkat /x/{box_id}/no such container: busy"
            )
        raise docker.errors.NotFound("404", explanation=f"no such container {box_id}")

    def containers(self, all: bool, filters: dict) -> list[dict]:
        return [{"Names": ["/cua-sb-victim"]}] if self.stays else []


def test_a_removal_error_that_only_reads_like_gone_does_not_forget_a_running_box(tmp_path: Path):
    backend = DockerBackend.__new__(DockerBackend)  # its engine is the stand-in: no connection made
    engine = _EngineThatClaimsGone(stays=True)
    backend.docker, backend.run_dir = SimpleNamespace(api=engine), tmp_path
    (tmp_path / "cua-sb-victim").mkdir()
    with pytest.raises(docker.errors.APIError):
        backend.remove_sync("cua-sb-victim", settle_s=0.5)
    assert engine.removals > 1, "retried while the engine still listed the box"
    assert (tmp_path / "cua-sb-victim").is_dir(), "its control folder stays with it (the reaper finds both)"

    engine.stays = False  # a box another client really removed: gone, no error
    backend.remove_sync("cua-sb-victim", settle_s=0.5)
    assert not (tmp_path / "cua-sb-victim").exists()


@pytest.mark.slow
async def test_a_box_whose_processes_ignore_sigterm_is_removed_when_its_episode_is_cancelled(sandbox_setup):
    """The model's shell leaves processes that ignore SIGTERM, then the run ends and cancels the episode
    twice while it hands the box back: the cancellation waits for the removal, which takes bounded time,
    and the engine no longer has the box."""
    backend = DockerBackend(run_id=f"pytest-security-{time.monotonic_ns()}")
    box = await asyncio.to_thread(start_repo_box, backend, load_repo_tasks(SAMPLE_TASKS)[0].spec)
    try:
        got = await box.run(
            "(trap '' TERM INT HUP; while :; do sleep 1; done) >/dev/null 2>&1 & echo planted"
        )
        assert "planted" in got.output, got

        async def episode() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                await finish(box.close())

        task = asyncio.create_task(episode())
        await asyncio.sleep(0.1)
        start = time.monotonic()
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # a second cancellation (the run's end) while the removal runs
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
        took = time.monotonic() - start
        assert not backend._known(box.id), "the box still runs after its episode ended"
        assert took < 30, f"removal took {took:.1f}s"
    finally:
        await asyncio.to_thread(backend.remove_sync, box.id)
        backend.close()
