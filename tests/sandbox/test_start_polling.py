"""A starting box is watched through its ready file on this host; the engine is asked whether it still runs
about twice a second, not at the ready file's pace: at warm-up a hundred boxes start at once on one engine,
and asking at 20 Hz each was thousands of inspections a second. Repository boxes wait the same way
(sandbox/repo/box.py, through `start_polls`), but start too fast here for a count to tell the two paces."""

from __future__ import annotations

import time

import pytest

from sandbox.base import ENGINE_POLL_S, SandboxSpec

pytestmark = pytest.mark.slow


@pytest.fixture
def inspections(docker_backend, monkeypatch) -> list[float]:
    """Every inspection of a container the backend asks of the engine (the real call, counted)."""
    calls: list[float] = []
    api = docker_backend.docker.api
    real = api.inspect_container

    def counted(*args, **kwargs):
        calls.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "inspect_container", counted)
    return calls


def most(took_s: float) -> float:
    return took_s / ENGINE_POLL_S + 3  # the first ask, docker-py's own inspection after `run`, one spare


async def test_a_starting_desktop_box_asks_the_engine_twice_a_second(docker_backend, inspections):
    began = time.monotonic()
    sb = await docker_backend.start(SandboxSpec())
    took = time.monotonic() - began
    try:
        assert len(inspections) <= most(took), (len(inspections), took)
    finally:
        await docker_backend.stop(sb)
