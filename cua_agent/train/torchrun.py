"""torchrun, with the time a graceful stop needs: the trainer's entry point on one node (the compose stack's,
and the rehearsals' of tests/rehearsal).

    python -m cua_agent.train.torchrun [torchrun options] train_areal.py --config CONFIG [key=value ...]

On SIGTERM or SIGINT torchrun forwards the signal to its workers, then kills them (SIGKILL) 30 s later: fixed
in torch 2.10 (the GPU image's), `--shutdown-timeout` from 2.11 on. A stopping trainer finishes its step's
update and writes its checkpoint first (`checkpoint.stop_timeout_s`), which for a 7B-32B model takes minutes:
killed at 30 s, the stop-time checkpoint was lost. This runs torchrun itself with that grace raised to the
config's `checkpoint.stop_timeout_s` plus `LAUNCHER_MARGIN_S` (the ranks' own deadline ends them first). A container
that runs it needs a stop grace period above that again (docker-compose.areal.yml, docker_train_areal.sh).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from cua_agent.train.cli import LAUNCHER_MARGIN_S, stop_timeout_s


def shutdown_grace_s(train_argv: list[str]) -> float:
    """How long torchrun waits for its workers after forwarding a stop signal: the training config's
    `checkpoint.stop_timeout_s` + `LAUNCHER_MARGIN_S`."""
    return stop_timeout_s(train_argv) + LAUNCHER_MARGIN_S


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(torchrun's options, the training script and its arguments)."""
    for i, arg in enumerate(argv):
        if arg.endswith(".py"):
            return argv[:i], argv[i:]
    raise SystemExit(
        "usage: python -m cua_agent.train.torchrun [torchrun options] train_areal.py --config CONFIG [...]"
    )


def allow_grace(grace_s: float) -> None:
    """A shutdown after a stop signal waits at least `grace_s` before it kills the workers. One after a
    worker failed keeps torchrun's own 30 s: the others cannot finish a step without it, only clean up."""
    from torch.distributed.elastic.multiprocessing import api

    signalled = threading.Event()
    terminate = api._terminate_process_handler  # PContext.start installs it for SIGTERM, SIGINT, ...

    def remember(signum: int, frame: Any) -> None:
        signalled.set()
        terminate(signum, frame)

    close = api.PContext.close

    def close_after_grace(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        close(self, death_sig, max(int(timeout), int(grace_s)) if signalled.is_set() else timeout)

    api._terminate_process_handler = remember
    api.PContext.close = close_after_grace  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    options, script = split(argv)
    allow_grace(shutdown_grace_s(script[1:]))
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun([*options, *script])
    except SignalException as stop:
        # the workers have stopped (or the grace ran out): exit as train_areal.py does
        raise SystemExit(128 + int(stop.sigval)) from None


if __name__ == "__main__":
    main(sys.argv[1:])
