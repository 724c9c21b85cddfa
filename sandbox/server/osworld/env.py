"""What a task's steps and getters act on: the box's display and home, and the files the host provides."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.server.display import Display
from sandbox.server.runtimes.base import kill_groups

OSWORLD_HOME = "/home/user"  # the VM user's home in OSWorld's task files (in the image: a link to the box's)
OSWORLD_LOCALE = "en_US.UTF-8"  # the VM's: its task files' expected listings sort as there
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
    _spawned: Path | None = None  # process groups the task's commands left running (the shim's terminal)

    def cache(self) -> Path:
        """A private folder for the files getters fetch (OSWorld's host-side cache), made on first use:
        the agent never sees one before its episode is scored."""
        if self._cache is None:
            self._cache = Path(tempfile.mkdtemp(prefix="cache-"))
        return self._cache

    def path(self, p: str) -> Path:
        """A task path in the box: OSWorld's /home/user is this box's home, and a relative path is in it (the
        VM's server saves and runs from the user's home)."""
        return self.home / self.map(p)  # an absolute path stays itself

    def home_is_osworld_home(self) -> bool:
        """Whether /home/user is this home, so that the VM's paths inside task files resolve here."""
        return Path(OSWORLD_HOME).resolve() == self.home.resolve()

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
        """Environment of the programs a task runs: the display, the home, the VM's locale, python with the
        pyautogui shim, and where the shim records what it leaves running."""
        if self._spawned is None:
            fd, name = tempfile.mkstemp(prefix="spawned-")
            os.close(fd)
            self._spawned = Path(name)
        env = {**os.environ, **self.display.env(), "HOME": str(self.home)}
        env = {k: v for k, v in env.items() if not k.startswith("LC_")}
        env.update(LANG=OSWORLD_LOCALE, CUA_OSWORLD_SPAWNED=str(self._spawned))
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
        """The task's programs (with what their commands left running), and its cache."""
        kill_groups(self.procs)
        if self._spawned is not None:
            for pid in self._spawned.read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.killpg(int(pid), signal.SIGKILL)
            self._spawned.unlink(missing_ok=True)
            self._spawned = None
        if self._cache is not None:
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None
