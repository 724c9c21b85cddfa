"""OSWorld's getters (`evaluator.result`, `evaluator.expected`), by OSWorld's names: `fn(env, spec)`.

In the box a VM file needs no copy: `vm_file` returns its path (None when absent, as OSWorld's). Files
behind URLs (`cloud_file`) are the host's local copies (TaskEnv.assets).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.server.osworld.env import MissingAsset, TaskEnv, TaskSetupError
from sandbox.server.osworld.steps import execute

# A file the agent's application may still be writing is read once it has not changed for FILE_QUIET_S
# (waiting at most FILE_SETTLE_MAX_S): l3afpad saves with fopen("w") and writes the text at fclose (about 1 ms
# later, measured in a box), and a file scored in between is empty. OSWorld's runners sleep 5-20 s before
# they evaluate; a file saved long ago costs nothing here.
FILE_QUIET_S = 0.3
FILE_SETTLE_MAX_S = 3.0


def _settled(path: Path) -> Path:
    deadline = time.monotonic() + FILE_SETTLE_MAX_S
    while True:
        try:
            age = time.time() - path.stat().st_mtime
        except OSError:
            return path
        left = deadline - time.monotonic()
        if age >= FILE_QUIET_S or left <= 0:
            return path
        time.sleep(min(FILE_QUIET_S - age, left))


def _multi(spec: dict[str, Any], one: Callable[[str, str], Any]) -> Any:
    """`one(path, dest)` for the spec's path, or for each of its paths (`multi`), of which `gives` chooses."""
    if not spec.get("multi"):
        return one(spec["path"], spec.get("dest") or "")
    dests = spec.get("dest") or [""] * len(spec["path"])
    paths = [one(p, d) for p, d in zip(spec["path"], dests, strict=False)]
    gives = spec.get("gives", [0])
    return paths[gives[0]] if len(gives) == 1 else [paths[i] for i in gives]


def vm_file(env: TaskEnv, spec: dict[str, Any]) -> Any:
    def one(p: str, dest: str) -> str | None:
        path = _settled(env.path(p))
        return str(path) if path.is_file() else None

    return _multi(spec, one)


def cloud_file(env: TaskEnv, spec: dict[str, Any]) -> Any:
    """The URL's file under its `dest` name in the task's cache, as OSWorld's (sheet_print finds a gold
    workbook's CSV beside it by name)."""

    def one(url: str, dest: str) -> str | None:
        try:
            src = env.assets(url)
        except MissingAsset:
            return None
        if not dest:
            return str(src)
        path = env.cache() / Path(dest).name
        shutil.copyfile(src, path)
        return str(path)

    return _multi(spec, one)


def rule(env: TaskEnv, spec: dict[str, Any]) -> Any:
    return spec["rules"]


def _command(env: TaskEnv, spec: dict[str, Any], stream: str) -> str | None:
    """The command's output or error stream; None when its program is not there (OSWorld's server answers
    500 for a command it cannot start, and its getter returns None)."""
    try:
        return execute(env, spec["command"], shell=spec.get("shell", False))[stream]
    except TaskSetupError:
        return None


def vm_command_line(env: TaskEnv, spec: dict[str, Any]) -> str | None:
    return _command(env, spec, "output")


def vm_command_error(env: TaskEnv, spec: dict[str, Any]) -> str | None:
    return _command(env, spec, "error")


def list_directory(env: TaskEnv, spec: dict[str, Any]) -> dict[str, Any]:
    """The folder's tree. Deliberate difference: children by name, where OSWorld's VM lists them in the
    order its file system returns them (not reproducible here)."""

    def tree(path: str) -> dict[str, Any]:
        node: dict[str, Any] = {"name": os.path.basename(path), "type": "directory", "children": []}
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                node["children"].append(tree(entry.path))
            else:
                node["children"].append({"name": entry.name, "type": "file"})
        return node

    return tree(str(env.path(spec["path"])))


def vm_screen_size(env: TaskEnv, spec: dict[str, Any]) -> dict[str, int]:
    return {"width": env.display.width, "height": env.display.height}


GETTERS: dict[str, Callable[[TaskEnv, dict[str, Any]], Any]] = {
    "vm_file": vm_file,
    "cloud_file": cloud_file,
    "rule": rule,
    "vm_command_line": vm_command_line,
    "vm_command_error": vm_command_error,
    "list_directory": list_directory,
    "vm_screen_size": vm_screen_size,
}
