"""What a task runtime provides to the control server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from sandbox.server.display import Display


def kill_groups(procs: list[subprocess.Popen]) -> None:
    """Kills each started program with its whole process group (each was started in a group of its own),
    reaps it, and empties the list."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    procs.clear()


class TaskError(ValueError):
    """A task request the runtime cannot satisfy (unknown task, bad seed): answered with a 4xx."""


class Runtime:
    """One family of tasks (MiniWoB++ pages, desktop apps) living on one display."""

    prefix = ""
    # True: evaluate(wait_s, gave_up) also takes whether the agent's last action declared the task
    # impossible (OSWorld's FAIL).
    scores_giving_up = False

    def __init__(self, display: Display) -> None:
        self.display = display

    def tasks(self) -> list[str]:
        raise NotImplementedError

    def reset(self, name: str, seed: int) -> dict[str, Any]:
        """Sets up task `name` with `seed`; returns at least {'instruction': str}. A family whose rows carry
        their task (`task_in_row`, sandbox/server/task_families.py) takes it as a third argument."""
        raise NotImplementedError

    def evaluate(self, wait_s: float) -> dict[str, Any]:
        """Reward from the task's own verifier: {'reward': float, 'done': bool, 'info': {...}}."""
        raise NotImplementedError

    def finished(self) -> bool:
        """Whether the task has ended its episode by itself (MiniWoB does at its first decisive input);
        the agent's episode then ends too. Tasks that wait for the agent's `done` say False."""
        return False

    def oracle(self) -> Mapping[str, Any]:
        """Privileged task state for scripted oracles and debugging (never shown to a policy). Each runtime
        defines its state as an `OracleState` in its module, read by sandbox/oracles/<prefix>.py."""
        raise NotImplementedError

    def close(self) -> None:
        pass
