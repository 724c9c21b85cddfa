"""A repository box filling the host's disk, from the model's shell (its own commands) and from the code its
tests run. Real boxes of the sample repository image under podman.

Before: a repository box wrote to the engine's writable layer and to its answers folder, both on the host's
disk, with no bound: a `dd` in the box ran until the host's disk was full. The engines' own bound
(`--storage-opt size`) needs XFS with project quotas. Now the host measures what the box wrote (the engine's
layer and the answers folder) at each request and once a second while one runs; a box over its
`sandbox.resources.disk_mb` is removed and the episode is the policy's 0 (DiskQuotaExceeded, a BoxBroken),
in the agent's box or the tests' box alike."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import DiskQuotaExceeded, RepoBox, repo_box, start_repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTests, load_repo_tasks

pytestmark = pytest.mark.slow

CALC = next(t for t in load_repo_tasks(SAMPLE_TASKS) if t.task_id == "repo/calc-add")
QUOTA_MB = 64
FILL = "i=0; while :; do dd if=/dev/zero of={folder}/fill$i bs=1M count=8 2>/dev/null; i=$((i+1)); done"


@pytest.fixture
def backend(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-repo-disk-{os.getpid()}")
    yield backend
    assert backend.list_boxes(run_id=backend.run_id) == [], "every box is removed"
    assert [b for b in STARTED if (backend.run_dir / b).exists()] == [], "and its folder"
    backend.close()


STARTED: set[str] = set()  # this module's boxes (the run folder is shared with other processes' boxes)


async def started(backend: DockerBackend) -> RepoBox:
    box = await asyncio.to_thread(start_repo_box, backend, replace(CALC.spec, disk_mb=QUOTA_MB))
    STARTED.add(box.id)
    return box


@pytest.mark.parametrize("folder", ["/repos/calc", "/run/cua/out"])
async def test_a_command_that_fills_the_disk_is_stopped_near_its_quota(backend: DockerBackend, folder: str):
    """The workdir is the engine's layer; the answers folder is a host folder the box writes."""
    box = await started(backend)
    try:
        start = time.monotonic()
        with pytest.raises(DiskQuotaExceeded, match=f"over its quota of {QUOTA_MB} MiB") as refused:
            await box.run(FILL.format(folder=folder), timeout_s=120)
        took = time.monotonic() - start
    finally:
        await box.close()
    written = float(str(refused.value).split(" wrote ")[1].split(" MiB")[0])
    print(f"\n{folder}: stopped after {took:.1f}s at {written:.0f} MiB (quota {QUOTA_MB} MiB)")
    assert took < 30, "within seconds, not at the command's timeout"
    assert written < QUOTA_MB + 4096, "a second or two of writing past the quota, not the host's disk"


async def test_a_job_left_running_is_stopped_at_the_next_request(backend: DockerBackend):
    box = await started(backend)
    try:
        left = await box.run(f"({FILL.format(folder='/tmp')}) >/dev/null 2>&1 & echo started")
        assert left.output == "started\n"
        await asyncio.sleep(3)  # the agent thinks; the job writes
        with pytest.raises(DiskQuotaExceeded):
            await box.run("echo next")
    finally:
        await box.close()


async def test_tests_that_fill_the_disk_score_0_as_the_policys_failure(backend: DockerBackend):
    """The agent's code runs again in the tests' box: what it writes there is bounded the same way."""
    agent = await started(backend)
    try:
        fresh = lambda: repo_box(backend, replace(CALC.spec, disk_mb=QUOTA_MB))  # noqa: E731
        verdict = await score(agent, RepoTests(command=FILL.format(folder="."), timeout_s=120), fresh)
    finally:
        await agent.close()
    assert verdict.reward == 0.0
    assert "the tests' box" in verdict.reason and "quota" in verdict.reason, verdict.reason


async def test_a_box_within_its_quota_is_untouched(backend: DockerBackend):
    box = await started(backend)
    try:
        wrote = await box.run("dd if=/dev/zero of=/repos/calc/data bs=1M count=16 2>&1 | tail -1")
        assert wrote.exit_code == 0, wrote
        again = await box.run("du -m /repos/calc/data | cut -f1")
        assert again.output.strip() == "16"
    finally:
        await box.close()
