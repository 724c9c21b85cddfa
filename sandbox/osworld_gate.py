"""The trust gate for OSWorld task files: before a task trains or evaluates anything, show that the box sets
it up as OSWorld's VM would and that doing nothing earns nothing.

    python -m sandbox.osworld gate EXAMPLES_DIR --assets DIR [--parallel N] [--json OUT]

For every task `check` counts runnable, a fresh box of the task's row (sandbox/osworld.py `row`) resets it,
the gate reads the box's window list and scores the episode without a single action. A task is reported
when its set-up fails, when the application it opens is not on screen (no window at all, or none titled with
what an `open` or `activate_window` step of its set-up names), or when its no-op scores above 0: a policy would
be paid for nothing there.
The exit status is 1 when any task is reported, 2 for bad arguments, 0 otherwise. Boxes are removed
whatever happens, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sandbox.base import SandboxSpec
from sandbox.errors import SandboxError
from sandbox.osworld import OSWorldTaskError, TaskCheck, check_folder, reset_source, row, summary
from sandbox.pool import SandboxPool

DEFAULT_PARALLEL = 2  # two desktops at once keep 2 cores busy without thrashing (tests/sandbox/conftest.py)
WINDOW_WAIT_S = 10.0  # a `launch`ed application maps its window a moment after the set-up returns
BOX_TIMEOUT_S = 300.0  # waiting for a free box while the others run their set-ups


class GateArgumentError(ValueError):
    """A gate input that cannot be used (the message names the argument and the path)."""


@dataclass
class GateResult:
    file: str  # relative to the examples folder
    task_id: str
    domain: str
    problems: list[str]  # empty: the task passes the gate
    noop_score: float | None = None  # None: never scored (its set-up failed)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    windows: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passes(self) -> bool:
        return not self.problems


def expected_titles(task: dict[str, Any]) -> list[str]:
    """Names a visible window's title must hold once set-up is done: each file or program an `open` step
    opened (the set-up waits for a window titled with its name, as OSWorld's does) and each window an
    `activate_window` step brings forward by name (OSWorld's terminal idiom: Ctrl+Alt+T, then "Terminal";
    a missing window passes that step quietly), unless a later `close_window` step closed it."""
    names: list[str] = []
    for step in task.get("config") or []:
        params = step.get("parameters") or {}
        if step.get("type") == "open":
            names.append(PurePosixPath(str(params.get("path", ""))).name)
        elif step.get("type") == "activate_window" and not params.get("by_class"):
            names.append(str(params.get("window_name", "")))
        elif step.get("type") == "close_window":
            closed = str(params.get("window_name", "")).lower()
            names = [n for n in names if n.lower() not in closed and closed not in n.lower()]
    return [n for n in names if n]


def screen_problems(task: dict[str, Any], titles: list[str]) -> list[str]:
    """What is missing from the screen after set-up ([] when the task's application is there)."""
    if not titles:
        return ["nothing on screen after set-up (no visible window)"]
    return [
        f"no window titled with {name!r} after set-up (windows: {titles})"
        for name in expected_titles(task)
        if not any(name.lower() in t.lower() for t in titles)
    ]


async def windows_after_setup(sb: Any, task: dict[str, Any]) -> list[str]:
    """The box's window titles once the task's application is up, or after WINDOW_WAIT_S."""
    deadline = time.monotonic() + WINDOW_WAIT_S
    while True:
        titles = list((await sb.oracle()).get("windows") or [])
        if not screen_problems(task, titles) or time.monotonic() > deadline:
            return titles
        await asyncio.sleep(0.5)


async def gate_task(
    pool: SandboxPool, folder: Path, assets: Path, check: TaskCheck, image: str | None = None
) -> GateResult:
    """One task through the gate, in a box of its own (the pool removes it after: boxes of the osworld
    family serve one episode)."""
    start = time.monotonic()
    file = folder / check.file
    result = GateResult(check.file, check.task_id, check.domain, [])
    try:
        source = reset_source({"file": str(file), "assets": str(assets)})
        task = source["task"]
        the_row = row(file, assets, folder, "test", 1, *([image] if image else []))
        spec = SandboxSpec.from_dict(the_row["sandbox"], base=pool.spec)
        async with pool.sandbox(spec, timeout=BOX_TIMEOUT_S) as sb:
            try:
                await sb.reset(the_row["task_id"], 0, source)
            except SandboxError as e:
                result.problems.append(f"set-up fails: {e}")
                return result
            result.windows = await windows_after_setup(sb, task)
            result.problems += screen_problems(task, result.windows)
            try:
                out = await sb.evaluate()
            except SandboxError as e:
                result.problems.append(f"scoring fails: {e}")
                return result
            result.noop_score, result.metrics = float(out["reward"]), out.get("info", {}).get("metrics", [])
            if result.noop_score > 0:
                result.problems.append(f"scores {result.noop_score:g} without any action ({result.metrics})")
    except (OSWorldTaskError, OSError) as e:  # its files changed or became unreadable since `check`
        result.problems.append(f"set-up fails: {type(e).__name__}: {e}")
    except SandboxError as e:  # no box, or one that broke: the task was not gated
        result.problems.append(f"the box failed: {e}")
    finally:
        result.seconds = round(time.monotonic() - start, 1)
    return result


def runnable(folder: Path, assets: Path) -> tuple[list[TaskCheck], list[TaskCheck]]:
    """(the tasks the gate plays, every task checked); GateArgumentError for unusable inputs."""
    if not folder.is_dir():
        raise GateArgumentError(f"EXAMPLES_DIR {folder}: not a folder")
    if not assets.is_dir():
        raise GateArgumentError(f"--assets {assets}: not a folder")
    checks = check_folder(folder, assets)
    if not checks:
        raise GateArgumentError(f"EXAMPLES_DIR {folder}: no OSWorld task files under it")
    runs = [c for c in checks if c.runs]
    if not runs:
        raise GateArgumentError(
            f"none of the {len(checks)} task files under {folder} runs with the assets in {assets}:\n"
            + summary(checks)
        )
    return runs, checks


async def gate(
    pool: SandboxPool,
    folder: Path,
    assets: Path,
    checks: list[TaskCheck],
    parallel: int = DEFAULT_PARALLEL,
    progress: Callable[[GateResult, int, int], None] | None = None,
    image: str | None = None,
) -> list[GateResult]:
    """Every task of `checks` through the gate, `parallel` boxes at a time, in `checks`' order."""
    sem = asyncio.Semaphore(parallel)
    done = 0

    async def one(c: TaskCheck) -> GateResult:
        nonlocal done
        async with sem:
            r = await gate_task(pool, folder, assets, c, image)
        done += 1
        if progress is not None:
            progress(r, done, len(checks))
        return r

    return list(await asyncio.gather(*(one(c) for c in checks)))


def print_progress(r: GateResult, done: int, total: int) -> None:
    verdict = "passes  " if r.passes else "REPORTED"
    score = "-" if r.noop_score is None else f"{r.noop_score:g}"
    print(f"[{done}/{total}] {verdict} {r.file} (no-op scores {score}, {r.seconds} s)", flush=True)
    for p in r.problems:
        print(f"      {p}", flush=True)


def report(results: list[GateResult], checks: list[TaskCheck]) -> dict[str, Any]:
    return {
        "tasks": len(checks),
        "gated": len(results),
        "passed": sum(r.passes for r in results),
        "reported": [asdict(r) for r in results if not r.passes],
        "results": [asdict(r) | {"passes": r.passes} for r in results],
    }


async def _own_boxes(
    folder: Path, assets: Path, runs: list[TaskCheck], parallel: int, image: str | None
) -> list[GateResult]:
    from sandbox.backends import make_backend

    backend = make_backend("docker", run_id=f"osworld-gate-{os.getpid()}-{int(time.time())}")
    # The pool removes its boxes on close, at exit and on SIGTERM; Ctrl-C cancels this coroutine
    # (asyncio.run), so the close below runs then too.
    pool = SandboxPool(backend, SandboxSpec(), max_size=parallel, warm=0)
    try:
        await pool.start()
        return await gate(pool, folder, assets, runs, parallel, print_progress, image)
    finally:
        await pool.close()
        backend.close()  # type: ignore[attr-defined]


def _inputs(folder: Path, assets: Path, parallel: int) -> tuple[list[TaskCheck], list[TaskCheck]]:
    if parallel < 1:
        raise GateArgumentError(f"--parallel {parallel}: must be at least 1")
    runs, checks = runnable(folder, assets)
    print(f"gating {len(runs)} of {len(checks)} task files ({len(checks) - len(runs)} refused: see `check`)")
    return runs, checks


def _verdict(results: list[GateResult], checks: list[TaskCheck], json_out: Path | None) -> int:
    reported = [r for r in results if not r.passes]
    print(f"{len(results) - len(reported)} of {len(results)} tasks pass the gate; {len(reported)} reported")
    for r in reported:
        print(f"  {r.file}: {'; '.join(r.problems)}")
    if json_out is not None:
        json_out.write_text(json.dumps(report(results, checks), indent=1) + "\n")
        print(f"report: {json_out}")
    return 1 if reported else 0


def run_gate(
    folder: Path,
    assets: Path,
    parallel: int = DEFAULT_PARALLEL,
    json_out: Path | None = None,
    image: str | None = None,
) -> int:
    """The `gate` command, in docker boxes of its own: 0 when every runnable task passes, 1 when any is
    reported, 2 for unusable inputs, 130 when interrupted."""
    try:
        runs, checks = _inputs(folder, assets, parallel)
    except GateArgumentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(_own_boxes(folder, assets, runs, parallel, image))
    except KeyboardInterrupt:
        print("interrupted: the gate's boxes are removed")
        return 130
    return _verdict(results, checks, json_out)


async def gate_with(
    pool: SandboxPool,
    folder: Path,
    assets: Path,
    parallel: int = DEFAULT_PARALLEL,
    json_out: Path | None = None,
    image: str | None = None,
) -> int:
    """The same in a caller's pool (the tests share theirs), on the caller's event loop."""
    try:
        runs, checks = _inputs(folder, assets, parallel)
    except GateArgumentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = await gate(pool, folder, assets, runs, parallel, print_progress, image)
    return _verdict(results, checks, json_out)
