"""`make learn` stopped by a signal stops its run: bench/learn.py passes SIGTERM (a scheduler, `kill`) and
Ctrl-C on to the command it runs (train_areal.py, the evaluation), waits for that command's own graceful
stop (its boxes and its vLLM server go with it), then exits 128 + the signal. Killed at once instead, it
left the trainer, its server and four boxes running. The command here is a small stand-in with the same
contract: it stops on the first SIGTERM or SIGINT, taking a second to do so."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
def stop(signum, frame):
    log.write(f"got {signal.Signals(signum).name}\\n")
    time.sleep(1.0)  # a graceful stop takes a while: its update, its checkpoint, its boxes
    log.write("stopped\\n")
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
log.write(f"child {os.getpid()}\\n")
time.sleep(60)
"""

PARENT = """
import sys
from pathlib import Path
import bench.learn as learn
learn.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], Path(sys.argv[3]))
"""


def wait_for_line(path: Path, prefix: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.startswith(prefix):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no '{prefix}' line in {path} after {timeout_s:.0f}s")


@pytest.mark.parametrize(
    ("how", "signum"),
    [("kill", signal.SIGTERM), ("ctrl-c", signal.SIGINT)],
    ids=["SIGTERM to the script", "Ctrl-C to the terminal's process group"],
)
def test_a_signal_to_make_learn_stops_its_command_gracefully_then_exits(tmp_path, how, signum):
    events = tmp_path / "child.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(events), str(tmp_path / "command.log")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # its own process group: the terminal's, for the Ctrl-C case
    )
    try:
        child = int(wait_for_line(events, "child ").split()[1])
        if how == "kill":
            parent.send_signal(signum)
        else:
            os.killpg(parent.pid, signum)  # what Ctrl-C sends: the whole foreground group
        rc = parent.wait(timeout=30)
        outlived = psutil.pid_exists(child)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group: the script and a command it left
            os.killpg(parent.pid, signal.SIGKILL)
    lines = events.read_text().splitlines()
    assert lines[1:] == [f"got {signum.name}", "stopped"], f"the command's stop: {lines}"
    assert not outlived, "the command outlived bench/learn.py"
    assert rc == 128 + signum, f"bench/learn.py exited {rc}"
