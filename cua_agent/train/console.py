"""What a person watching `make local` reads: the lines of a training run's full output (a log file) that
say where it stands, while the run writes it.

    python -m cua_agent.train.console LOG DONE

follows LOG from its start until the file DONE exists and LOG has been read to its end, and prints the
lines that matter: each step's progress and success line, the job's own notes (fresh start, resume, the
server), warnings and errors. Everything else (AReaL's statistics tables, vLLM's and pip's output) stays in
LOG. Colour codes and AReaL's date prefix are dropped; each line keeps its time."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# AReaL's format: "(AReaL) 20261127-05:40:40.892 CUATrainer INFO: Step 1: success ..."
_AREAL = re.compile(r"^\(AReaL\) \d{8}-(\d\d:\d\d:\d\d)\.\d+ (\[[^\]]+\]|\S+) (\w+): (.*)$")
_OURS = {"CUAJob", "CUATrainer", "Checkpoints", "StopDeadline", "LaunchRay"}
POLL_S = 0.2


def shown(line: str) -> str | None:
    """The line as printed, or None when it stays in the log."""
    line = _ANSI.sub("", line).rstrip()
    m = _AREAL.match(line)
    if m is None:
        return None
    clock, logger, level, message = m.groups()
    if level in ("WARNING", "ERROR", "CRITICAL") and "Memory-Usage" not in message:
        return f"  {clock} {level.lower()}: {message}"
    if logger in _OURS and (message.startswith("Step ") or logger == "CUAJob"):
        return f"  {clock} {message}"
    return None


def follow(log: Path, done: Path, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    pending, offset = "", 0
    while True:
        finished = done.exists()  # before reading: whatever was written before DONE is read below
        if log.exists():
            with log.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            *lines, pending = (pending + chunk.decode(errors="replace")).split("\n")
            for line in lines:
                if (text := shown(line)) is not None:
                    print(text, file=out, flush=True)
        if finished:
            return
        time.sleep(POLL_S)


if __name__ == "__main__":
    follow(Path(sys.argv[1]), Path(sys.argv[2]))
