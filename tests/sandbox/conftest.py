"""Shared, expensive sandbox resources: set up once per session (image, podman service, pools)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox.base import SandboxSpec
from sandbox.pool import SandboxPool

REPO = Path(__file__).resolve().parents[2]
BOXES = 2  # 2 cores: two desktops stepping concurrently keep the suite fast without thrashing


@pytest.fixture(scope="session")
def docker_backend(sandbox_setup: None):
    from sandbox.backends.docker import DockerBackend

    backend = DockerBackend(run_id=f"pytest-{os.getpid()}-docker")
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def local_backend(sandbox_setup: None):
    from sandbox.backends.local import LocalBackend

    return LocalBackend(run_id=f"pytest-{os.getpid()}-local")


@pytest.fixture(scope="session")
async def docker_pool(docker_backend) -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(docker_backend, SandboxSpec(), max_size=BOXES, warm=BOXES, install_handlers=False)
    await pool.start()
    yield pool
    await pool.close()
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == []


@pytest.fixture(scope="session")
async def local_pool(local_backend) -> AsyncIterator[SandboxPool]:
    pool = SandboxPool(local_backend, SandboxSpec(), max_size=BOXES, warm=BOXES, install_handlers=False)
    await pool.start()
    yield pool
    await pool.close()
    assert local_backend.list_boxes(run_id=local_backend.run_id) == []


def office_spec(image: str) -> SandboxSpec:
    return SandboxSpec(image=image, memory_mb=1536)  # LibreOffice with a document open


@pytest.fixture(scope="session")
async def office_pool(docker_backend, office_image: str) -> AsyncIterator[SandboxPool]:
    """Office boxes (each serves one episode: the pool starts a fresh one per acquire)."""
    pool = SandboxPool(
        docker_backend, office_spec(office_image), max_size=BOXES, warm=BOXES, install_handlers=False
    )
    await pool.start()
    yield pool
    await pool.close()
