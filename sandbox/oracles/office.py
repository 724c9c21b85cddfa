"""Oracles of the office suite (`office/<name>`, sandbox/server/office_suite.py), and a plausible wrong attempt
at each: both act through the public action API (keys and typing) in the real LibreOffice, and save.

They read the oracle state of sandbox/server/runtimes/office.py (its `OracleState`): the edited file's
`path` and `mtime` (a save changes it), and the task's `solution`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sandbox.oracles import Ctx, Solver, register

SOLVERS: dict[str, Solver] = {}
WRONG: dict[str, Solver] = {}  # a plausible attempt that scores 0: the verifier must tell it apart


def office(*names: str) -> Callable[[Solver], Solver]:
    return register(SOLVERS, *names)


def wrong(*names: str) -> Callable[[Solver], Solver]:
    return register(WRONG, *names)


async def _save(c: Ctx) -> None:
    """Ctrl+S (the file keeps its format: the profile does not ask), then until the file is written."""
    before = c.state["mtime"]
    await c.act({"type": "key", "keys": "ctrl+s", "wait_change_s": 2})
    await c.wait_for(lambda: c.state["mtime"] != before, timeout=20)


async def _enter_cells(c: Ctx, cells: dict[str, str]) -> None:
    """Each cell by arrow keys from A1 (no mouse: the grid's geometry is the application's)."""
    await c.act({"type": "wait", "seconds": 0.5})  # the sheet takes keys once it is drawn
    for coord, text in cells.items():
        col, row = re.fullmatch(r"([A-Z])(\d+)", coord).groups()  # type: ignore[union-attr]
        await c.key("ctrl+Home")
        for _ in range(int(row) - 1):
            await c.key("Down")
        for _ in range(ord(col) - ord("A")):
            await c.key("Right")
        await c.type(text)
        await c.key("Return")


@office("calc-total", "calc-fix-value", "calc-add-row")
async def _calc(c: Ctx) -> None:
    await _enter_cells(c, c.state["solution"]["cells"])
    await _save(c)


@wrong("calc-total", "calc-fix-value", "calc-add-row")
async def _calc_off_by_one(c: Ctx) -> None:
    """The right cells, but the last one is off: a sum that stops a row short, a number one too high."""
    cells = dict(c.state["solution"]["cells"])
    coord, text = list(cells.items())[-1]
    if text.startswith("=SUM("):
        start, end = re.fullmatch(r"=SUM\((B\d+):B(\d+)\)", text).groups()  # type: ignore[union-attr]
        cells[coord] = f"=SUM({start}:B{int(end) - 1})"
    else:
        cells[coord] = str(int(text) + 1)
    await _enter_cells(c, cells)
    await _save(c)


async def _retype(c: Ctx, paragraphs: list[str]) -> None:
    """Replaces the whole document with `paragraphs`, one typed paragraph each."""
    await c.act({"type": "wait", "seconds": 0.5})
    await c.key("ctrl+a")
    for i, p in enumerate(paragraphs):
        if i:
            await c.key("Return")
        await c.type(p)


@office("writer-append")
async def _writer_append(c: Ctx) -> None:
    await c.act({"type": "wait", "seconds": 0.5})
    await c.key("ctrl+End")
    await c.key("Return")
    await c.type(c.state["solution"]["append"])
    await _save(c)


@wrong("writer-append")
async def _writer_append_first(c: Ctx) -> None:
    """The paragraph added, but at the top."""
    await c.act({"type": "wait", "seconds": 0.5})
    await c.key("ctrl+Home")
    await c.type(c.state["solution"]["append"])
    await c.key("Return")
    await _save(c)


@office("writer-title")
async def _writer_title(c: Ctx) -> None:
    await c.act({"type": "wait", "seconds": 0.5})
    await c.key("ctrl+Home")
    await c.type(c.state["solution"]["prepend"])
    await c.key("Return")
    await _save(c)


@wrong("writer-title")
async def _writer_title_last(c: Ctx) -> None:
    """The title added, but as the last paragraph."""
    await c.act({"type": "wait", "seconds": 0.5})
    await c.key("ctrl+End")
    await c.key("Return")
    await c.type(c.state["solution"]["prepend"])
    await _save(c)


@office("writer-replace-word")
async def _writer_replace(c: Ctx) -> None:
    await _retype(c, c.state["solution"]["paragraphs"])
    await _save(c)


@wrong("writer-replace-word")
async def _writer_replace_first(c: Ctx) -> None:
    """Only the first paragraph's word replaced."""
    s = c.state["solution"]
    gold = s["paragraphs"]
    await _retype(c, [gold[0], *(p.replace(s["new"], s["old"]) for p in gold[1:])])
    await _save(c)


async def _edit_title(c: Ctx, keys_before_typing: list[str], text: str) -> None:
    """The first slide's title: Tab selects its first object, Return edits its text."""
    await c.act({"type": "wait", "seconds": 1})
    await c.key("Tab")
    await c.key("Return")
    for k in keys_before_typing:
        await c.key(k)
    await c.type(text)
    await c.key("Escape")


@office("impress-title")
async def _impress_title(c: Ctx) -> None:
    await _edit_title(c, ["ctrl+a"], c.state["solution"]["title"])
    await _save(c)


@wrong("impress-title")
async def _impress_title_appended(c: Ctx) -> None:
    """The new title typed after the old one instead of over it."""
    await _edit_title(c, ["End"], " " + c.state["solution"]["title"])
    await _save(c)
