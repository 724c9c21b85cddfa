"""Office tasks: our seeded suite (office_suite/) in real applications (LibreOffice Calc, Writer and
Impress, the text editor, the terminal, chromium), run and scored through the OSWorld task format
(sandbox/server/osworld): each task is generated from its seed as an OSWorld task, its files written, its
`config` steps run; `evaluator` scores what the application saved or left behind.

The gold files that `evaluator.expected` names are written only when the episode is scored, in a folder
the episode never saw, so an agent cannot copy one into place.

Oracle state (`GET /task/oracle`, `OracleState` below) is read by sandbox/oracles/office.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from sandbox.server import office_suite
from sandbox.server.display import Display
from sandbox.server.osworld.env import MissingAsset, TaskEnv
from sandbox.server.osworld.evaluate import setup, verdict
from sandbox.server.osworld.libreoffice import fresh_profile
from sandbox.server.osworld.steps import windows
from sandbox.server.runtimes.base import Runtime, TaskError
from sandbox.server.runtimes.desktop import task_home


class OracleState(TypedDict):
    """The contract with sandbox/oracles/office.py: change both sides together."""

    task: str  # "office/<name>"
    path: str  # the file the task edits (absolute, in the box)
    mtime: float | None  # its modification time (None: absent): a save changes it
    solution: dict[str, Any]  # what the oracle needs, per task (office_suite/)
    windows: list[str]  # titles of the visible windows
    screen: list[int]  # [width, height]


class OfficeRuntime(Runtime):
    prefix = "office"

    def __init__(self, display: Display) -> None:
        super().__init__(display)
        self.env: TaskEnv | None = None
        self.task: office_suite.Generated | None = None
        self.name: str | None = None
        self.gold_dir: Path | None = None

    def tasks(self) -> list[str]:
        return sorted(office_suite.TASKS)

    def _asset(self, url: str) -> Path:
        """Gold files, written on first use (at scoring time) outside the agent's home."""
        assert self.task is not None
        if url not in self.task.gold:
            raise MissingAsset(url)
        if self.gold_dir is None:
            self.gold_dir = Path(tempfile.mkdtemp(prefix="gold-"))
        path = self.gold_dir / url.rsplit("/", 1)[-1]
        if not path.exists():
            self.task.gold[url](path)
        return path

    def reset(self, name: str, seed: int) -> dict[str, Any]:
        make = office_suite.TASKS.get(name)
        if make is None:
            raise TaskError(f"unknown office task {name!r}; known: {', '.join(self.tasks())}")
        self.close()
        home = task_home()
        fresh_profile(home, osworld_defaults=False)  # the oracles save with Ctrl+S alone
        self.env = TaskEnv(self.display, home, self._asset)
        self.task, self.name = make(seed), name
        for rel, write in self.task.files.items():
            path = self.env.path(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
        setup(self.env, self.task.osworld, f"office/{name}")
        return {"instruction": self.env.map(self.task.osworld["instruction"])}

    def evaluate(self, wait_s: float) -> dict[str, Any]:
        if self.env is None or self.task is None:
            raise TaskError("no task has been reset")
        return verdict(self.env, self.task.osworld, f"office/{self.name}")

    def oracle(self) -> OracleState:
        if self.env is None or self.task is None:
            raise TaskError("no task has been reset")
        path = self.env.path(self.task.path)
        return {
            "task": f"office/{self.name}",
            "path": str(path),
            "mtime": path.stat().st_mtime if path.exists() else None,
            "solution": json.loads(self.env.map(json.dumps(self.task.solution))),  # the box's paths
            "windows": list(windows(self.env).values()),
            "screen": [self.display.width, self.display.height],
        }

    def close(self) -> None:
        if self.env is not None:
            self.env.kill_all()
        if self.gold_dir is not None:
            shutil.rmtree(self.gold_dir, ignore_errors=True)
        self.env = self.task = self.name = self.gold_dir = None
