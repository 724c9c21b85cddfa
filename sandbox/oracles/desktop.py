"""Oracles of the desktop-app tasks (`desktop/<name>`).

They read the oracle state of sandbox/server/runtimes/desktop.py (its `OracleState`): the target `path` and
`text` of the task, the titles of the visible `windows` (e.g. to wait for the file chooser) and the
`screen` size [width, height].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.oracles import Ctx, OracleError, Solver, register

SOLVERS: dict[str, Solver] = {}


def desktop(*names: str) -> Callable[[Solver], Solver]:
    return register(SOLVERS, *names)


def _center(c: Ctx) -> dict[str, Any]:
    w, h = c.state["screen"]
    return {"type": "click", "x": w // 2, "y": h // 2}


@desktop("editor-save")
async def _editor_save(c: Ctx) -> None:
    await c.act(_center(c))
    await c.type(c.state["text"])
    await c.key("ctrl+s")


@desktop("editor-save-as")
async def _editor_save_as(c: Ctx) -> None:
    await c.act(_center(c))
    await c.type(c.state["text"])
    # The file chooser maps its window before its name field takes input: wait for the screen to settle.
    await c.act({"type": "key", "keys": "ctrl+s", "wait_change_s": 3})
    await c.wait_for(lambda: any("save" in t.lower() for t in c.state["windows"]), timeout=10)
    await c.act({"type": "wait", "seconds": 0, "wait_change_s": 0.5})
    # The chooser opens in the editor's folder (the task's folder): the file name is enough, and a
    # typed full path would pop up GTK's location completion, which swallows the Return.
    await c.key("ctrl+a")
    await c.act({"type": "type", "text": c.state["path"].rsplit("/", 1)[1], "wait_change_s": 2})
    # Like a person: press Enter, and again if the dialog is still open (GTK may still be busy with the
    # typed name when the first one arrives).
    for _ in range(5):
        await c.act({"type": "key", "keys": "Return", "wait_change_s": 1})
        try:
            await c.wait_for(lambda: not any(t == "Save As" for t in c.state["windows"]), timeout=1)
            return
        except OracleError:
            continue


@desktop("terminal-file")
async def _terminal_file(c: Ctx) -> None:
    path = c.state["path"]
    await c.act(_center(c))
    await c.type(f"mkdir -p '{path.rsplit('/', 1)[0]}' && echo {c.state['text']} > '{path}'")
    await c.key("Return")
