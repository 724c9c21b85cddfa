"""One run per trial (cua_agent/train/job.py _lock_trial): a second run of a trial that is running must not
start, because start-up removes what a killed run left (partial saves, weight copies, name_resolve
records), and that would be the live run's save in progress and its weight sync. The live run is stood
for by this test holding the trial's lock, with a save in progress and a weight copy on disk."""

from __future__ import annotations

import fcntl
import getpass
import sys
from pathlib import Path

import pytest

from tests.training.harness import Training, left_behind

pytestmark = pytest.mark.slow


def test_a_second_run_of_a_running_trial_stops_at_once_and_touches_nothing(tmp_path: Path):
    exp = tmp_path / "exp"
    trial = exp / "checkpoints" / getpass.getuser() / "cua-local" / "trial0"
    staging = trial / "recover" / ".staging-globalstep7"
    weights = trial / "default" / "weight_update_v7"
    for d in (staging, weights):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"being written")
    with open(trial / "run.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242 on the-live-run\n")
        held.flush()
        cmd = [sys.executable, "train_areal.py", "--config", "configs/local_cpu.yaml", f"cluster.fileroot={exp}",
               "inference.launch_local=false", 'inference.addresses=["127.0.0.1:9"]']  # fmt: skip
        second = Training(cmd, tmp_path / "second.log")
        rc = second.wait(timeout=120)
    log = (tmp_path / "second.log").read_text(errors="replace")
    assert rc != 0 and "TrialInUse" in log, log[-3000:]
    assert "trial cua-local/trial0 is running already (pid 4242 on the-live-run holds" in log
    assert (staging / "model.safetensors").is_file() and (weights / "model.safetensors").is_file()
    assert left_behind(second) == []
