"""A rank that hangs can be asked where it waits: `kill -USR1 <pid>` prints every thread's stack to its stderr
and the rank goes on (cua_agent/train/job.py registers it with the stop signals). The test harness relies on
it: a run that misses its deadline fails with the stacks of its ranks in the message (harness.hung)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.training.harness import Training, hung, wait_for

pytestmark = pytest.mark.slow

STUCK = """
import threading, time
from cua_agent.train.job import _StopSignals
_StopSignals().install()
def wait_in_a_collective():
    time.sleep(600)
threading.Thread(target=wait_in_a_collective, name="collective").start()
print("ready", flush=True)
"""


def test_a_hung_run_is_reported_with_every_threads_stack_and_killed(tmp_path: Path):
    log = tmp_path / "run.log"
    proc = Training([sys.executable, "-c", STUCK], log)
    try:
        wait_for(lambda: "ready" in log.read_text(), 120, "its start", proc)
        time.sleep(0.5)
        error = hung(proc, log, 1.0)
        message = str(error)
        assert "the run did not end in 1s" in message
        assert "in wait_in_a_collective" in message, message  # the stuck thread's frame, by name
        assert proc.wait(10) is not None
    finally:
        proc.kill_all()
