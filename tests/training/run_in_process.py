"""train_areal.py's main() in a process that lives on after it, as a Ray worker does after its trainer task
(Ray catches the task's SystemExit): then writes {"exit": code, "owned": [ids]} to OUT.json, the sandboxes
this process still owns, before the interpreter's exit hooks run.

    python tests/training/run_in_process.py OUT.json --config CONFIG [key=value ...]"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import train_areal
from tests.training.harness import boxes_of


def main(out: str, *argv: str) -> None:
    code: int | str | None = 0
    try:
        train_areal.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    owned = [b["id"] for b in boxes_of(os.getpid())]
    Path(out).write_text(json.dumps({"exit": code, "owned": owned}))


if __name__ == "__main__":
    main(*sys.argv[1:])
