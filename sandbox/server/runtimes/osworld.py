"""OSWorld task files, as a row carries them: the task and its files arrive with the reset
(`{"osworld": {"task": {...}, "assets": {url: base64}}}`, made by sandbox/osworld.py on the host).

A URL's file is written when a step or getter first asks for it, in a private folder: a gold file that
only `evaluator.expected` names appears only when the episode is scored, so an agent cannot copy it into
place. Tasks are not seeded (the seed is ignored). There are no scripted oracles for arbitrary tasks; the
oracle state says what the task is and what is on screen.
"""

from __future__ import annotations

import base64
import binascii
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox.server.osworld.env import MissingAsset, TaskEnv
from sandbox.server.osworld.evaluate import setup, verdict
from sandbox.server.osworld.libreoffice import fresh_profile
from sandbox.server.osworld.steps import windows
from sandbox.server.osworld.support import lacks
from sandbox.server.runtimes.base import Runtime, TaskError
from sandbox.server.runtimes.desktop import task_home


class OSWorldRuntime(Runtime):
    prefix = "osworld"
    scores_giving_up = (
        True  # OSWorld: `infeasible` tasks score 1 only if the agent gave up, others 0 if it did
    )

    def __init__(self, display: Any) -> None:
        super().__init__(display)
        self.env: TaskEnv | None = None
        self.task: dict[str, Any] | None = None
        self.assets: dict[str, bytes] = {}
        self.files: Path | None = None

    def tasks(self) -> list[str]:
        return []  # any task file its row carries

    def _asset(self, url: str) -> Path:
        if url not in self.assets:
            raise MissingAsset(f"no file for {url} came with the task")
        if self.files is None:
            self.files = Path(tempfile.mkdtemp(prefix="osworld-"))
        path = self.files / f"{len(list(self.files.iterdir()))}-{url.rsplit('/', 1)[-1]}"
        path.write_bytes(self.assets[url])
        return path

    def reset(self, name: str, seed: int, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if not isinstance(source, Mapping) or not isinstance(source.get("task"), dict):
            raise TaskError("'osworld' must be {'task': {...}, 'assets': {url: base64}}")
        task, assets = source["task"], source.get("assets") or {}
        if str(task.get("id")) != name:
            raise TaskError(f"osworld/{name}: the task file's id is {task.get('id')!r}")
        try:
            decoded = {str(u): base64.b64decode(b, validate=True) for u, b in assets.items()}
        except (binascii.Error, TypeError, AttributeError) as e:
            raise TaskError(f"osworld/{name}: 'assets' must map URLs to base64 strings ({e})") from None
        missing = lacks(task, lambda url: url in decoded)
        if missing:
            raise TaskError(f"osworld/{name}: this box lacks {'; '.join(missing)}")
        self.close()
        home = task_home()
        fresh_profile(home, osworld_defaults=True)
        self.env, self.task, self.assets = TaskEnv(self.display, home, self._asset), task, decoded
        setup(self.env, task, f"osworld/{name}")
        return {"instruction": self.env.map(task["instruction"])}  # OSWorld's /home/user is this box's home

    def evaluate(self, wait_s: float, gave_up: bool = False) -> dict[str, Any]:
        if self.env is None or self.task is None:
            raise TaskError("no task has been reset")
        return verdict(self.env, self.task, f"osworld/{self.task['id']}", gave_up)

    def oracle(self) -> dict[str, Any]:
        if self.env is None or self.task is None:
            raise TaskError("no task has been reset")
        return {
            "task": f"osworld/{self.task['id']}",
            "instruction": self.task["instruction"],
            "windows": list(windows(self.env).values()),
            "screen": [self.display.width, self.display.height],
        }

    def close(self) -> None:
        if self.env is not None:
            self.env.kill_all()
        if self.files is not None:
            shutil.rmtree(self.files, ignore_errors=True)
        self.env, self.task, self.assets, self.files = None, None, {}, None
