"""A rank that hangs can be asked where it waits: `kill -USR1 <pid>` prints every thread's stack to its stderr
and the rank goes on (cua_agent/train/job.py registers it with the stop signals). The test harness relies on
it: a run that misses its deadline fails with the stacks of its ranks in the message (harness.hung). Two
ranks under torchrun, as users launch several."""

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


def test_a_hung_run_is_reported_with_every_ranks_stacks_and_killed(tmp_path: Path):
    log, script = tmp_path / "run.log", tmp_path / "stuck.py"
    script.write_text(STUCK)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = Training([*torchrun, str(script)], log)
    try:
        wait_for(lambda: log.read_text().count("ready") == 2, 180, "both ranks' start", proc)
        time.sleep(0.5)
        message = str(hung(proc, 1.0))
        assert "the run did not end in 1s" in message
        # the stuck thread's frame, by name, once per rank (the two ranks' dumps may interleave in the log)
        assert message.count("wait_in_a_collective") == 2, message
        assert proc.wait(10) is not None
    finally:
        proc.kill_all()
