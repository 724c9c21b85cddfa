"""Desktop-app tasks: a real text editor and a real terminal; verified from the file system.

Oracle state (`GET /task/oracle`, `OracleState` below): the file the task wants and its text, the visible
windows' titles and the screen size. sandbox/oracles/desktop.py reads it on the host to solve the tasks; a
policy never sees it.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, TypedDict

from sandbox.server.display import Display
from sandbox.server.runtimes.base import Runtime, TaskError, kill_groups
from sandbox.server.words import WORDS

EDITOR = "l3afpad"
TERMINAL = "xterm"


class OracleState(TypedDict):
    """The contract with sandbox/oracles/desktop.py: change both sides together."""

    task: str  # "desktop/<name>"
    path: str  # the file the task must leave behind (absolute)
    text: str  # its expected content
    windows: list[str]  # titles of the visible windows (e.g. "Save As" while the file chooser is open)
    screen: list[int]  # [width, height]


def task_home() -> Path:
    """Where tasks put their files: the box user's home, or a per-sandbox folder (local backend)."""
    return Path(os.environ.get("CUA_TASK_HOME") or Path.home())


class DesktopRuntime(Runtime):
    prefix = "desktop"
    TASKS = ("editor-save", "editor-save-as", "terminal-file")

    def __init__(self, display: Display) -> None:
        super().__init__(display)
        self.apps: list[subprocess.Popen] = []
        self.task: str | None = None
        self.spec: dict[str, Any] = {}

    def tasks(self) -> list[str]:
        return list(self.TASKS)

    def _launch(self, argv: list[str], wm_class: str, cwd: Path) -> None:
        if shutil.which(argv[0]) is None:
            raise RuntimeError(f"{argv[0]} is not installed in this sandbox")
        proc = subprocess.Popen(
            argv,
            env={**self.display.env(), "HOME": str(task_home())},
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )  # own group (killed as one), same session as the box
        self.apps.append(proc)
        # Confirm the window is mapped instead of sleeping a fixed time.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode} at start")
            try:
                self.display.xdotool("search", "--onlyvisible", "--classname", wm_class, timeout=5)
                return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError(f"{argv[0]} window did not appear")

    def _kill_apps(self) -> None:
        kill_groups(self.apps)

    def reset(self, name: str, seed: int) -> dict[str, Any]:
        if name not in self.TASKS:
            raise TaskError(f"unknown desktop task {name!r}; known: {', '.join(self.TASKS)}")
        self._kill_apps()
        rng = random.Random(f"{name}:{seed}")
        home = task_home()
        work = home / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        text = " ".join(rng.sample(WORDS, 3)) + f" {rng.randint(10, 99)}"
        if name == "editor-save":
            path = work / f"{rng.choice(WORDS)}.txt"
            path.write_text("")
            self._launch([EDITOR, str(path)], EDITOR, work)
            instruction = (
                f'The text editor has the file {path} open. Type exactly "{text}" into it and save the file.'
            )
        elif name == "editor-save-as":
            path = work / f"{rng.choice(WORDS)}-{rng.randint(1, 9)}.txt"
            self._launch([EDITOR], EDITOR, work)
            instruction = f'Write exactly "{text}" in the text editor and save it as {path}.'
        else:
            path = work / rng.choice(WORDS) / f"{rng.choice(WORDS)}.txt"
            text = rng.choice(WORDS)
            self._launch(
                [TERMINAL, "-fa", "DejaVu Sans Mono", "-fs", "12", "-e", "bash", "--norc"], TERMINAL, work
            )
            instruction = (
                f"Using the terminal, create the file {path} (and its directory) containing "
                f"the single word {text}."
            )
        self.task, self.spec = name, {"path": str(path), "text": text}
        return {"instruction": instruction}

    def evaluate(self, wait_s: float) -> dict[str, Any]:
        if self.task is None:
            raise TaskError("no task has been reset")
        path, want = Path(self.spec["path"]), self.spec["text"]
        deadline = time.monotonic() + wait_s
        while True:
            got = path.read_text(errors="replace") if path.is_file() else None
            ok = got is not None and got.strip() == want
            if ok or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return {
            "reward": 1.0 if ok else 0.0,
            "done": ok,
            "info": {
                "path": str(path),
                "exists": got is not None,
                "content": None if got is None else got[:200],
            },
        }

    def oracle(self) -> OracleState:
        if self.task is None:
            raise TaskError("no task has been reset")
        try:
            names = self.display.xdotool("search", "--onlyvisible", "--name", ".", timeout=5).split()
            titles = [self.display.xdotool("getwindowname", w).strip() for w in names]
        except Exception:
            titles = []
        return {
            "task": f"desktop/{self.task}",
            "path": self.spec["path"],
            "text": self.spec["text"],
            "windows": titles,
            "screen": [self.display.width, self.display.height],
        }

    def close(self) -> None:
        self._kill_apps()
        self.task = None
