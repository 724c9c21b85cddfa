"""The office suite in real boxes (cua-sandbox-office: LibreOffice Calc, Writer, Impress, the text editor,
the terminal, chromium): every task's oracle scores 1 and its plausible wrong attempt scores 0, from what the
application saved (a file, the browser's profile) or left on disk. Each task also passes the trust gate that
`python -m sandbox.osworld gate` applies to OSWorld task files: its application is on screen after set-up and
doing nothing scores 0 (checked at the start of the oracle's episode, before it acts)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox.base import Sandbox, SandboxSpec
from sandbox.errors import SandboxStartError
from sandbox.oracles import Ctx, solve
from sandbox.oracles.office import WRONG
from sandbox.osworld_gate import screen_problems, windows_after_setup
from sandbox.pool import SandboxPool
from sandbox.server.office_suite import TASKS as GENERATORS
from sandbox.tasks import load_tasks
from tests.sandbox.conftest import office_spec
from tests.security.box_shell import box_shell

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

REPO = Path(__file__).resolve().parents[2]
ROWS = load_tasks(REPO / "tasks" / "office.jsonl")
TASKS = list(dict.fromkeys(t.task_id for t in ROWS))
BOXES = 4  # an office box mostly waits (LibreOffice starting, files saved): 4 at a time on 2 cores


@pytest.fixture(scope="module")
async def office_boxes(sandbox_setup: None, office_image: str) -> AsyncIterator[SandboxPool]:
    """This module's 60-odd office episodes, BOXES at a time, on a backend of their own (closing a pool
    removes every box of its backend's run, and the session's pools stay up)."""
    from sandbox.backends.docker import DockerBackend

    backend = DockerBackend(run_id=f"pytest-{os.getpid()}-office")
    pool = SandboxPool(backend, office_spec(office_image), max_size=BOXES, warm=BOXES, install_handlers=False)
    await pool.start()
    yield pool
    await pool.close()
    assert backend.list_boxes(run_id=backend.run_id) == []
    backend.close()


async def _play(pool: SandboxPool, task_id: str, seed: int, attempt: str) -> dict[str, tuple[float, dict]]:
    """{attempt: (reward, info)}; the oracle's episode first passes the gate ("noop": what doing nothing
    scores, its info naming what is missing on screen after set-up)."""
    async with pool.sandbox(timeout=120) as sb:
        await sb.reset(task_id, seed)
        out = {}
        if attempt == "oracle":
            out["noop"] = await _gate(sb, task_id, seed)
            await solve(sb)
        else:
            ctx = Ctx(sb, await sb.oracle())
            await WRONG[task_id.split("/", 1)[1]](ctx)
        verdict = await sb.evaluate()
        info = verdict["info"]
        if attempt == "oracle" and verdict["reward"] != 1.0:  # what was scored, for the failure to show
            path = (await sb.oracle())["path"]
            shell = box_shell(pool.backend, sb.id)  # type: ignore[arg-type]
            info = {**info, "saved": shell(f"cat '{path}'")[:2000]}
        return {**out, attempt: (verdict["reward"], info)}


async def _gate(sb: Sandbox, task_id: str, seed: int) -> tuple[float, dict]:
    """The gate, in the episode just reset: the task's application on screen, its no-op scored. The office
    tasks have no `postconfig`, so scoring changes nothing the oracle then acts on."""
    task = GENERATORS[task_id.split("/", 1)[1]](seed).osworld
    titles = await windows_after_setup(sb, task)
    noop = await sb.evaluate()
    return noop["reward"], {**noop["info"], "screen": screen_problems(task, titles)}


async def test_every_office_task_is_solved_by_its_oracle_and_not_by_a_wrong_attempt(office_boxes):
    apps = {t.split("/")[1].split("-")[0] for t in TASKS}
    assert len(TASKS) >= 30 and apps == {"calc", "writer", "impress", "editor", "terminal", "browser"}
    assert set(WRONG) == {t.split("/", 1)[1] for t in TASKS}
    sem = asyncio.Semaphore(office_boxes.max_size)
    results: dict[tuple[str, str], tuple[float, dict]] = {}

    async def one(task_id: str, attempt: str) -> None:
        async with sem:
            for played, r in (await _play(office_boxes, task_id, 100003, attempt)).items():
                results[task_id, played] = r

    await asyncio.gather(*(one(t, a) for t in TASKS for a in ("oracle", "wrong")))
    unsolved = {t: r for (t, a), r in results.items() if a == "oracle" and r[0] != 1.0}
    fooled = {t: r for (t, a), r in results.items() if a == "wrong" and r[0] != 0.0}
    assert not unsolved, f"oracle below 1: {unsolved}"
    assert not fooled, f"a wrong attempt scored: {fooled}"
    noops = {t: r for (t, a), r in results.items() if a == "noop"}
    assert set(noops) == set(TASKS)
    not_shown = {t: info["screen"] for t, (_, info) in noops.items() if info["screen"]}
    free = {t: r for t, r in noops.items() if r[0] != 0.0}
    assert not not_shown, f"the application is not on screen after set-up: {not_shown}"
    assert not free, f"doing nothing scored: {free}"


async def test_an_office_box_serves_one_episode(office_boxes):
    """LibreOffice runs macros and shell commands: a box that served an office episode is not reused."""
    async with office_boxes.sandbox(timeout=120) as sb:
        await sb.reset(TASKS[0], 1)
        first = sb.id
    async with office_boxes.sandbox(timeout=120) as sb:
        assert sb.id != first


async def test_a_row_naming_an_image_that_is_not_built_fails_with_the_command_that_builds_it(docker_backend):
    with pytest.raises(
        SandboxStartError, match=r"'cua-sandbox-nosuch:latest' is not built .*setup_sandbox.sh"
    ):
        await docker_backend.start(SandboxSpec(image="cua-sandbox-nosuch:latest"))
