"""A trainer's last-resort removal of its own boxes (at a forced exit) removes its boxes only: trainers in two
containers on one engine each have a pid namespace of their own, so a neighbour's boxes can carry the same
owner pid. The neighbour here is a box on the same engine labelled as another trainer with this process's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid

import docker.errors
import pytest

from cua_agent.config import SandboxConfig
from cua_agent.rollout.sandboxes import RolloutSandboxes
from sandbox.base import LABEL

pytestmark = pytest.mark.slow
BOXES_IN_BURSTS = True  # tests/conftest.py: played in the engine2 unit, never beside the multi-endpoint tests


@pytest.fixture
def neighbours_box(docker_backend):
    """A box of another trainer container whose process has this process's pid (another start time)."""
    name = f"cua-sb-neighbour-{uuid.uuid4().hex[:8]}"
    labels = {
        LABEL: "1",
        "cua.run_id": f"{os.getpid()}-neighbour",
        "cua.owner_pid": str(os.getpid()),
        "cua.owner_start": "1",
        "cua.owner_host": f"{socket.gethostname()}-neighbour",  # a container has a hostname of its own
    }
    docker_backend.docker.containers.run(
        "cua-sandbox:latest",
        name=name,
        entrypoint=["sleep", "300"],
        labels=labels,
        network_mode="none",
        detach=True,
    )
    yield name
    with contextlib.suppress(docker.errors.NotFound):  # removed by the defect this test is about
        docker_backend.docker.api.remove_container(name, force=True)


async def test_a_forced_exit_removes_this_trainers_boxes_and_not_a_neighbours_with_the_same_pid(
    docker_backend, neighbours_box
):
    sandboxes = RolloutSandboxes(SandboxConfig(backend="docker", max_concurrency=1))
    try:
        pool = await sandboxes.pool()
        own = await pool.acquire(sandboxes.spec)
        removed = sandboxes.remove_own()
        assert removed == [own.id]
        assert [b["id"] for b in docker_backend.list_boxes() if b["id"] == neighbours_box] == [neighbours_box]
    finally:
        await sandboxes.close()


async def test_a_forced_exit_while_boxes_are_starting_leaves_none_and_starts_no_more(docker_backend):
    """At the stop deadline the episodes still run: their boxes keep starting (a pool refill, an episode's
    retry after its box was removed) while the last resort lists and removes the run's boxes. A box whose
    create was under way when the list was taken, or began after it, outlived the trainer (seen after a
    SIGTERM past checkpoint.stop_timeout_s: 3 boxes created in the second of the removal)."""
    sandboxes = RolloutSandboxes(SandboxConfig(backend="docker", max_concurrency=3))
    await sandboxes.pool()
    backend, stop = sandboxes._pool_backend, asyncio.Event()
    outcomes: list[str] = []

    async def keep_starting() -> None:
        while not stop.is_set():
            try:
                outcomes.append((await backend.start(sandboxes.spec)).id)
            except Exception as exc:  # removed under its start, or refused: the episode fails
                outcomes.append(type(exc).__name__)

    starters = [asyncio.create_task(keep_starting()) for _ in range(3)]
    try:
        while not any(o.startswith("cua-sb-") for o in outcomes):  # boxes up, and more being created
            await asyncio.sleep(0.1)
        await asyncio.to_thread(sandboxes.remove_own)
        stop.set()  # the process exits now; starts already under way finish on the engine's side
        await asyncio.gather(*starters)
        assert backend.list_boxes(run_id=backend.run_id) == [], outcomes
    finally:
        stop.set()
        await asyncio.gather(*starters, return_exceptions=True)
        await asyncio.to_thread(sandboxes.remove_own)  # this run's boxes only: other tests' boxes run
        await sandboxes.close()
