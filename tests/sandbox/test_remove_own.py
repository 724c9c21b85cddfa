"""A trainer's last-resort removal of its own boxes (at a forced exit) removes its boxes only: trainers in two
containers on one engine each have a pid namespace of their own, so a neighbour's boxes can carry the same
owner pid. The neighbour here is a box on the same engine labelled as another trainer with this process's pid.
"""

from __future__ import annotations

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
