"""Scripted oracle agents: each reads its task's solution from the task's private state (`GET /task/oracle`:
MiniWoB's DOM, the desktop task's target file) but acts only through the public action API, exactly as a
policy would. Used by scripts/smoke_sandbox.py and the tests; also a random agent for the "random scores
below 1" check.

One module per task family, next to what it reads: `sandbox/oracles/<family>.py` solves the tasks of
`sandbox/server/runtimes/<family>.py` from the oracle state that runtime defines (its `OracleState`).
Here: the core (Ctx, solve, random_actions, the registry). Oracles run on the host and are not in the
sandbox image, which ships only `sandbox/__init__.py` and `sandbox/server/` (scripts/build_sandbox_image.sh).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.base import Sandbox
from sandbox.server.task_families import TASK_FAMILIES, load

Solver = Callable[["Ctx"], Awaitable[None]]


def register(table: dict[str, Solver], *names: str) -> Callable[[Solver], Solver]:
    """Decorator: the solver of the tasks `names` in a family's `table`."""

    def deco(fn: Solver) -> Solver:
        for n in names:
            table[n] = fn
        return fn

    return deco


def solvers(family: str) -> dict[str, Solver]:
    """The solvers of a family by task name ({} for a family without oracles)."""
    if family not in TASK_FAMILIES or TASK_FAMILIES[family].oracles is None:
        return {}
    # Imported here, not at the top: the family modules import Ctx and register from this one.
    return load(TASK_FAMILIES[family].oracles).SOLVERS


def supported_tasks() -> list[str]:
    return [f"{family}/{n}" for family in TASK_FAMILIES for n in sorted(solvers(family))]


class OracleError(RuntimeError):
    pass


class Fields(dict[str, str]):
    """The utterance's fields; a missing one is an OracleError that shows the utterance (a KeyError
    named only the key)."""

    def __init__(self, fields: dict[str, str], utterance: str) -> None:
        super().__init__(fields)
        self.utterance = utterance

    def __missing__(self, key: str) -> str:
        raise OracleError(f"no field {key!r} in {dict(self)} extracted from {self.utterance!r}")


def center_of(el: dict[str, Any]) -> dict[str, int]:
    return {"x": round(el["x"] + el["w"] / 2), "y": round(el["y"] + el["h"] / 2)}


class Ctx:
    def __init__(self, sb: Sandbox, state: dict[str, Any]) -> None:
        self.sb, self.state = sb, state
        self.actions: list[dict[str, Any]] = []

    @property
    def fields(self) -> Fields:
        return Fields(self.state.get("fields", {}), self.state.get("utterance", ""))

    @property
    def elements(self) -> list[dict[str, Any]]:
        return self.state.get("elements", [])

    async def refresh(self) -> None:
        self.state = await self.sb.oracle()

    def find_all(
        self, tag: str | None = None, text: str | None = None, id: str | None = None, cls: str | None = None
    ) -> list[dict[str, Any]]:
        out = []
        for e in self.elements:
            if tag is not None and e["tag"] != tag:
                continue
            if text is not None and (e.get("text") or "").strip() != text:
                continue
            if id is not None and e.get("id") != id:
                continue
            if cls is not None and cls not in (e.get("classes") or "").split():
                continue
            out.append(e)
        return out

    def find(self, **kw: Any) -> dict[str, Any]:
        found = self.find_all(**kw)
        if not found:
            raise OracleError(f"{self.state.get('task')}: no element {kw}")
        return found[0]

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        self.actions.append(action)
        return await self.sb.act(action)

    async def click(self, el: dict[str, Any], dx: float | None = None) -> None:
        if dx is None:
            await self.act({"type": "click", **center_of(el)})
            return
        x = el["x"] + (dx if dx is not None else el["w"] / 2)
        await self.act({"type": "click", "x": round(x), "y": round(el["y"] + el["h"] / 2)})

    async def type(self, text: str) -> None:
        await self.act({"type": "type", "text": text})

    async def key(self, keys: str) -> None:
        await self.act({"type": "key", "keys": keys})

    async def fill(self, el: dict[str, Any], text: str) -> None:
        await self.click(el)
        await self.type(text)

    async def submit(self, label: str = "Submit") -> None:
        await self.click(self.find(tag="BUTTON", text=label))

    async def wait_for(self, pred: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Polls the task state until pred() holds (e.g. an animation finished)."""
        deadline = time.monotonic() + timeout
        while True:
            await self.refresh()
            try:
                val = pred()
            except OracleError:
                val = None
            if val:
                return val
            if time.monotonic() > deadline:
                raise OracleError(f"{self.state.get('task')}: condition not met in {timeout} s")
            await asyncio.sleep(0.05)


async def solve(sb: Sandbox) -> Ctx:
    """Solves the task that was last reset in `sb`; returns the context (its actions)."""
    state = await sb.oracle()
    family, name = state["task"].split("/", 1)
    table = solvers(family)
    if name not in table:
        raise OracleError(f"no oracle for {state['task']}")
    ctx = Ctx(sb, state)
    await table[name](ctx)
    return ctx


async def random_actions(
    sb: Sandbox, n: int, rng: random.Random, width: int = 1280, height: int = 800
) -> None:
    """A random policy over the public action space (clicks, typing, keys, scrolls)."""
    for _ in range(n):
        kind = rng.choice(["click", "click", "double_click", "type", "key", "scroll"])
        x, y = rng.randrange(width), rng.randrange(height)
        if kind in ("click", "double_click"):
            act: dict[str, Any] = {"type": kind, "x": x, "y": y}
        elif kind == "type":
            act = {
                "type": "type",
                "text": "".join(rng.choice("abcxyz 123") for _ in range(rng.randint(1, 8))),
            }
        elif kind == "key":
            act = {"type": "key", "keys": rng.choice(["Return", "Tab", "BackSpace", "ctrl+a", "Escape"])}
        else:
            act = {"type": "scroll", "x": x, "y": y, "dy": rng.choice([-3, 3])}
        await sb.act(act)
