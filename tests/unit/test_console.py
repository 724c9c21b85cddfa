"""`make local`'s terminal (cua_agent/train/console.py): the lines of a run's full output a person reads."""

from __future__ import annotations

import threading
import time

from cua_agent.train import console

LOG = """\
\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[37m20261127-05:50:44.101 CUAJob INFO: Fresh start; checkpoints go to /x\x1b[0m
(AReaL) 20261127-05:51:30.001 [FSDPEngine Rank 0] INFO: Microbatch #tokens (rank 0): [7468], padded to: [7680]
(AReaL) 20261127-05:51:31.001 IOStruct INFO: Memory-Usage ppo update: memory allocated (GB): 0.00
(AReaL) 20261127-05:51:32.001 StatsLogger INFO: Epoch 1/1 Step 1/3 Train step 1/3 done.
(AReaL) 20261127-05:51:33.001 StatsLogger INFO: +--------------------------+
(AReaL) 20261127-05:51:34.001 TrackedWorkflow INFO: Step 1: 6 episodes finished of 16 a step (30s)
(AReaL) 20261127-05:51:35.001 CUATrainer INFO: Step 1: success 50% of 12 scored, task reward 0.50
(AReaL) 20261127-05:51:36.001 Checkpoints INFO: Checkpoint of step 2 committed: /x (0.1s)
(AReaL) 20261127-05:51:37.001 RemoteInfEngine WARNING: server 127.0.0.1:1 slow
(AReaL) 20261127-05:51:38.001 IOStruct WARNING: Memory-Usage high
wandb: WARNING Unable to verify login in offline mode.
INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK
"""
SHOWN = [
    "  05:50:44 Fresh start; checkpoints go to /x",
    "  05:51:35 Step 1: success 50% of 12 scored, task reward 0.50",
    "  05:51:37 warning: server 127.0.0.1:1 slow",
]


def test_the_terminal_shows_the_job_the_steps_and_the_warnings_only():
    assert [s for line in LOG.splitlines() if (s := console.shown(line))] == SHOWN


def test_follow_reads_the_log_while_it_grows_and_stops_once_done(tmp_path, capsys):
    log, done = tmp_path / "console.log", tmp_path / "done"
    lines = LOG.splitlines(keepends=True)

    def write() -> None:
        for line in lines:
            with log.open("a") as f:
                f.write(line)
            time.sleep(0.01)
        done.touch()

    writer = threading.Thread(target=write)
    writer.start()
    console.follow(log, done)  # returns only after `done`, having read every line written before it
    writer.join()
    assert capsys.readouterr().out.splitlines() == SHOWN
