"""The rollouts' preflight names an unreachable sandbox engine instead of crashing with the Docker client's
traceback (seen when podman's API service was not running: `python -m cua_agent.evaluate` died inside
docker-py's DockerClient constructor, which connects before the preflight's own check ran)."""

from __future__ import annotations

import pytest

from cua_agent.config import SandboxConfig
from cua_agent.rollout.sandboxes import RolloutSandboxes
from sandbox.errors import SandboxError


def test_preflight_names_an_engine_that_is_not_there(tmp_path):
    socket = tmp_path / "no-engine.sock"  # nothing listens here
    sandboxes = RolloutSandboxes(SandboxConfig(backend="docker", docker_hosts=[f"unix://{socket}"]))
    with pytest.raises(SandboxError, match=r"sandbox backend 'docker' is unreachable .*make setup"):
        sandboxes.preflight()
