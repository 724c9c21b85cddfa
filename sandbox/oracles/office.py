"""Oracles of the office suite (`office/<name>`, sandbox/server/office_suite/), and a plausible wrong attempt
at each: both act through the public action API (keys and typing) in the real application, and save.

They read the oracle state of sandbox/server/runtimes/office.py (its `OracleState`): the edited file's
`path` and `mtime` (a save changes it), and the task's `solution`, which names the right edit and a wrong
one in each application's terms (cells, paragraphs, a slide's title, lines, shell commands, a bookmark).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.oracles import Ctx, Solver, register
from sandbox.server.office_suite import TASKS

SOLVERS: dict[str, Solver] = {}
WRONG: dict[str, Solver] = {}  # a plausible attempt that scores 0: the verifier must tell it apart


def _app(
    prefix: str, edit: Callable[[Ctx, dict[str, Any], bool], Awaitable[None]], save: bool = True
) -> None:
    """Registers the right and the wrong attempt at every task of one application."""
    names = [n for n in TASKS if n.startswith(f"{prefix}-")]

    async def right(c: Ctx) -> None:
        await edit(c, c.state["solution"], False)
        if save:
            await _save(c)

    async def wrong(c: Ctx) -> None:
        await edit(c, c.state["solution"], True)
        if save:
            await _save(c)

    register(SOLVERS, *names)(right)
    register(WRONG, *names)(wrong)


async def _pause(c: Ctx, seconds: float) -> None:
    await c.act({"type": "wait", "seconds": seconds})


async def _save(c: Ctx) -> None:
    """Ctrl+S (the file keeps its format: the profile does not ask), then until the file is written."""
    before = c.state["mtime"]
    await c.act({"type": "key", "keys": "ctrl+s", "wait_change_s": 2})
    await c.wait_for(lambda: c.state["mtime"] != before, timeout=20)


async def _cells(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    """Each cell by arrow keys from A1 (no mouse: the grid's geometry is the application's)."""
    await _pause(c, 0.5)  # the sheet takes keys once it is drawn
    for coord, text in s["wrong_cells" if wrong else "cells"].items():
        col, row = re.fullmatch(r"([A-Z])(\d+)", coord).groups()  # type: ignore[union-attr]
        await c.key("ctrl+Home")
        for _ in range(int(row) - 1):
            await c.key("Down")
        for _ in range(ord(col) - ord("A")):
            await c.key("Right")
        if text:
            await c.type(text)
            await c.key("Return")
        else:
            await c.key("Delete")  # empties the cell


async def _retype(c: Ctx, blocks: list[str]) -> None:
    """The whole document replaced by `blocks`, one typed paragraph (or line) each."""
    await _pause(c, 0.5)
    await c.key("ctrl+a")
    for i, block in enumerate(blocks):
        if i:
            await c.key("Return")
        await c.type(block)


async def _paragraphs(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    await _retype(c, s["wrong_paragraphs" if wrong else "paragraphs"])


async def _lines(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    await _retype(c, s["wrong_lines" if wrong else "lines"])


async def _slide_title(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    """Page Down to the slide, Tab selects its first object (the title), Return edits its text. Impress
    drops keys while it switches slides: a pause after each."""
    await _pause(c, 1)
    for _ in range(s["wrong_slide" if wrong else "slide"]):
        await c.key("Next")
        await _pause(c, 1)
    for key in ("Tab", "Return", "ctrl+a"):
        await c.key(key)
        await _pause(c, 0.3)
    await c.type(s["wrong_title" if wrong else "title"])
    await c.key("Escape")
    await _pause(c, 0.3)


async def _commands(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    await c.wait_for(lambda: "Terminal" in c.state["windows"], timeout=20)
    w, h = c.state["screen"]
    await c.act({"type": "click", "x": w // 2, "y": h // 2})
    for command in s["wrong_commands" if wrong else "commands"]:
        await c.type(command)
        await c.key("Return")
    await _pause(c, 1)  # the shell runs it


async def _bookmark(c: Ctx, s: dict[str, Any], wrong: bool) -> None:
    """Ctrl+D bookmarks the page (its bubble's name field has the focus, its text selected), Return
    closes the bubble; chromium writes its Bookmarks file a moment later."""
    await c.wait_for(lambda: any(s["title"] in t for t in c.state["windows"]), timeout=30)
    url, name = (s["wrong_url"], s["wrong_name"]) if wrong else (s["url"], s["name"])
    if url:
        await c.key("ctrl+l")
        await c.type(url)
        await c.act({"type": "key", "keys": "Return", "wait_change_s": 3})
        await _pause(c, 1)
    before = c.state["mtime"]
    await c.act({"type": "key", "keys": "ctrl+d", "wait_change_s": 3})
    await _pause(c, 0.5)
    if name:
        await c.type(name)
    await c.key("Return")
    await c.wait_for(lambda: c.state["mtime"] != before, timeout=20)


_app("calc", _cells)
_app("writer", _paragraphs)
_app("impress", _slide_title)
_app("editor", _lines)
_app("terminal", _commands, save=False)
_app("browser", _bookmark, save=False)
