"""What a task's steps and getters act on: the box's display and home, and the files the host provides."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.server.display import Display
from sandbox.server.runtimes.base import kill_groups

OSWORLD_HOME = "/home/user"  # the VM user's home in OSWorld's task files
SHIM = Path(__file__).parent / "shim"  # pyautogui on xdotool


class TaskSetupError(RuntimeError):
    """A set-up step failed (OSWorld aborts the task): the task cannot be played."""


class MissingAsset(FileNotFoundError):
    """A URL of the task whose file the host did not provide."""


@dataclass
class TaskEnv:
    display: Display
    home: Path
    # URL -> the local file that stands for it; raises MissingAsset.
    assets: Callable[[str], Path]
    procs: list[subprocess.Popen] = field(default_factory=list)
    _cache: Path | None = None

    def cache(self) -> Path:
        """A private folder for the files getters fetch (OSWorld's host-side cache), made on first use:
        the agent never sees one before its episode is scored."""
        if self._cache is None:
            self._cache = Path(tempfile.mkdtemp(prefix="cache-"))
        return self._cache

    def path(self, p: str) -> Path:
        """A task path in the box: OSWorld's /home/user is this box's home."""
        return Path(self.map(p))

    def map(self, text: str) -> str:
        return text.replace(OSWORLD_HOME, str(self.home))

    def placeholders(self, text: str) -> str:
        w, h = self.display.width, self.display.height
        for k, v in {
            "{SCREEN_WIDTH_HALF}": w // 2,
            "{SCREEN_HEIGHT_HALF}": h // 2,
            "{SCREEN_WIDTH}": w,
            "{SCREEN_HEIGHT}": h,
            "{CLIENT_PASSWORD}": "",  # the box user has no password and no sudo
        }.items():
            text = text.replace(k, str(v))
        return self.map(text)

    def proc_env(self) -> dict[str, str]:
        """Environment of the programs a task runs: the display, the home, python with the pyautogui shim."""
        env = {**os.environ, **self.display.env(), "HOME": str(self.home)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIM), env.get("PYTHONPATH", "")) if p)
        env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        return env

    def argv(self, command: str | list[str], shell: bool) -> list[str]:
        """A task's command as argv: `python` is the box's interpreter (it has the shim)."""
        if isinstance(command, str):
            command = self.placeholders(command)
            if shell:
                return ["bash", "-c", command]
            command = shlex.split(command)
        else:
            command = [self.placeholders(str(c)) for c in command]
            if shell:
                return ["bash", "-c", " ".join(command)]
        if command and command[0] in ("python", "python3"):
            command = [sys.executable, *command[1:]]
        return command

    def kill_all(self) -> None:
        """The task's programs, and its cache."""
        kill_groups(self.procs)
        if self._cache is not None:
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None
