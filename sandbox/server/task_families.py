"""The registry of GUI task families: the one place that names them.

A task id is `<family>/<name>`. Each family has a runtime in the box (sandbox/server/runtimes/<family>.py)
and, on the host, scripted oracles (sandbox/oracles/<family>.py). Entry points are "module:attribute"
strings, imported on first use: the in-box server loads only the runtimes its tasks need, and this module
(shipped in the image, like all of sandbox/server) imports nothing of the host side.

Repository tasks (`repo/...`, sandbox/repo) are not here: they have no in-box server or display; a
terminal agent plays them in their own boxes.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskFamily:
    name: str
    runtime: str  # "module:Class" of its Runtime subclass, in the box
    oracles: str | None  # "module" holding SOLVERS {task name: solver}, on the host (None: no oracles)
    # True: its tasks keep the agent inside one web page, so one box may serve many episodes. False: a task
    # may hand the agent a general computer (a shell, an app that runs commands), where it could leave a
    # process that reads the box's secrets or sets a later episode's reward: such a box serves one episode.
    reusable: bool
    summary: str
    # True: a row carries its task (an OSWorld task file, sent at reset); False: the box makes it from the seed.
    task_in_row: bool = False


TASK_FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (
        TaskFamily(
            "miniwob",
            runtime="sandbox.server.runtimes.miniwob:MiniWoBRuntime",
            oracles="sandbox.oracles.miniwob",
            reusable=True,
            summary="MiniWoB++ pages in chromium (selenium)",
        ),
        TaskFamily(
            "desktop",
            runtime="sandbox.server.runtimes.desktop:DesktopRuntime",
            oracles="sandbox.oracles.desktop",
            reusable=False,
            summary="desktop applications on the box's X display (an editor, a terminal)",
        ),
        TaskFamily(
            "office",
            runtime="sandbox.server.runtimes.office:OfficeRuntime",
            oracles="sandbox.oracles.office",
            reusable=False,  # LibreOffice runs macros and shell commands
            summary="LibreOffice Calc, Writer and Impress, scored as OSWorld tasks (image cua-sandbox-office)",
        ),
        TaskFamily(
            "osworld",
            runtime="sandbox.server.runtimes.osworld:OSWorldRuntime",
            oracles=None,  # any OSWorld task file: nothing scripted knows their solutions
            reusable=False,
            summary="OSWorld task files (their rows name the file: sandbox/osworld.py), image cua-sandbox-office",
            task_in_row=True,
        ),
    )
}

# The task name after the family: lower-case words joined by dashes.
TASK_ID = re.compile(rf"^({'|'.join(map(re.escape, TASK_FAMILIES))})/[a-z0-9][a-z0-9-]*$")


class UnknownTaskFamily(ValueError):
    pass


def family_of(task_id: str) -> TaskFamily:
    """The family of `task_id` ("miniwob/click-test" -> miniwob); an unknown one names the known ones."""
    name = task_id.split("/", 1)[0]
    if name not in TASK_FAMILIES:
        raise UnknownTaskFamily(
            f"unknown task family {name!r} in {task_id!r} (known: {', '.join(sorted(TASK_FAMILIES))})"
        )
    return TASK_FAMILIES[name]


def load(entry_point: str) -> Any:
    """The object an entry point names: "pkg.module:Attr", or "pkg.module" for the module itself."""
    module, _, attr = entry_point.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj
