"""The tests' Ray clusters (tests/deploy/ray_cluster.py) end with the process that started them, however it
ends: their daemons run in sessions of their own, so a killed pytest (CI's limit, a SIGKILL) would leave
gcs_server, raylets and workers running, and the next run would share the machine with them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cua_agent.inference.local_server import REPO
from tests.deploy.ray_cluster import session_processes

pytestmark = pytest.mark.slow

OWNER = """
from tests.deploy.ray_cluster import LocalRayCluster

cluster = LocalRayCluster()
node = cluster.start_node("head", cpus=0, gpus=0)
print(node.sid, cluster.temp_dir, flush=True)
input()  # until killed
"""


def test_a_killed_owner_leaves_no_ray_process_and_no_temp_dir():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        sid, temp_dir = owner.stdout.readline().split()
        assert session_processes({int(sid)}), "the head started no process of its own session"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 60
    while (
        (left := session_processes({int(sid)})) or os.path.exists(temp_dir)
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [" ".join(p.cmdline())[:120] for p in left]
    assert not os.path.exists(temp_dir)  # the watcher removes it last
