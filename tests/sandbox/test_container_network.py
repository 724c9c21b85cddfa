"""The setup's container-network check (scripts/common.sh podman_network_problem), against the real podman.

A fresh machine once failed `make local` at the sandbox image build with `netavark: No such file or
directory (os error 2)`: podman's network backend calls iptables, which the machine lacked. The sandbox
setup now checks for that before it builds, and names the missing piece.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def network_problem(image: str = "", path: str | None = None) -> str:
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    out = subprocess.run(
        ["bash", "-c", f'source scripts/common.sh && podman_network_problem "{image}"'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return out.stdout.strip()


def test_a_container_gets_a_network_on_this_machine(sandbox_setup):
    """The probe the image build runs first: a real container on a bridge network starts."""
    assert network_problem("cua-sandbox:latest") == ""


def test_iptables_missing_from_netavark_is_named(sandbox_setup):
    """The same machine without iptables on PATH (netavark looks it up there): the check says what is
    missing and how to install it, before any container is tried."""
    backend = subprocess.run(
        ["podman", "info", "--format", "{{.Host.NetworkBackend}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert backend == "netavark"  # Debian bookworm's podman with netavark installed (scripts/setup.sh)
    problem = network_problem("cua-sandbox:latest", path="/usr/bin:/bin")
    assert "netavark" in problem and "needs iptables" in problem and "scripts/setup.sh system" in problem
