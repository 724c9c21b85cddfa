"""The gbox backend through the real gbox-sdk against the local GBox server (sandbox/testing/gbox_server/),
which stands in for the GBox cloud (unreachable here) and drives a real local desktop per box: real
screenshots, real MiniWoB++ pages in chromium, real task rewards."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from pathlib import Path

import pytest
from PIL import Image

from sandbox.backends.gbox import GboxBackend
from sandbox.base import SandboxSpec
from sandbox.errors import SandboxError, SandboxRequestError, SandboxStartError
from sandbox.oracles import Ctx, solve
from sandbox.pool import SandboxPool
from tests.sandbox.gbox_fake import FakeGbox, start_fake_gbox
from tests.sandbox.owner_process import spawn_owner

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


# -- against the local GBox server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def gbox(tmp_path_factory, sandbox_setup) -> FakeGbox:
    fake = start_fake_gbox(tmp_path_factory.mktemp("gbox"))
    yield fake
    fake.stop()
    assert not list(fake.state_dir.glob("*/home")), "the local GBox server left desktops behind"


def backend_of(gbox: FakeGbox, run_id: str, **kw) -> GboxBackend:
    return GboxBackend(run_id=run_id, api_key=gbox.api_key, base_url=gbox.url, **kw)


async def test_oracle_solves_tasks_on_gbox_and_a_wrong_click_scores_zero(gbox):
    backend = backend_of(gbox, f"pytest-gbox-{os.getpid()}")
    sb = await backend.start(SandboxSpec())
    try:
        assert (await sb.health())["ok"]
        png = await sb.screenshot()
        assert Image.open(io.BytesIO(png)).size == sb.meta["screen"]
        assert Image.open(io.BytesIO(await sb.screenshot(640, 400))).size == (640, 400)
        labels = next(b["labels"] for b in backend.list_boxes(run_id=backend.run_id) if b["id"] == sb.id)
        assert labels["cua.owner_pid"] == str(os.getpid()) and labels["cua.sandbox"] == "1"

        await sb.reset("miniwob/click-test", 7)
        await solve(sb)
        assert (await sb.evaluate(wait_s=1.0))["reward"] == 1.0

        await sb.reset("desktop/editor-save", 2)  # a desktop app, and wait_change_s by screenshots
        await solve(sb)
        assert (await sb.evaluate(wait_s=1.0))["reward"] == 1.0

        await sb.reset("miniwob/click-button", 3)
        c = Ctx(sb, await sb.oracle())
        wrong = next(
            b for b in c.find_all(tag="BUTTON") if (b.get("text") or "").strip() != c.fields["target"]
        )
        result, shot = await sb.step(
            {"type": "click", "x": round(wrong["x"] + 3), "y": round(wrong["y"] + 3)}
        )
        assert result["task_done"] is True and shot.startswith(b"\x89PNG")
        assert (await sb.evaluate(wait_s=1.0))["reward"] == 0.0

        with pytest.raises(SandboxRequestError, match="outside"):  # refused here, never sent
            await sb.act({"type": "click", "x": 99999, "y": 5})
        sent = len(gbox.actions(sb.id))
        await sb.act({"type": "key", "keys": "ctrl+a"})
        assert gbox.actions(sb.id)[sent:][0]["body"]["keys"] == ["control", "a"]
    finally:
        await sb.close()
    assert sb.id not in gbox.running()


async def test_an_action_answered_5xx_is_not_sent_again(gbox):
    backend = backend_of(gbox, f"pytest-gbox-5xx-{os.getpid()}")
    sb = await backend.start(SandboxSpec())
    try:
        before = len(gbox.actions(sb.id))
        gbox.faults(action_error_after=1)
        with pytest.raises(SandboxError) as err:
            await sb.act({"type": "click", "x": 10, "y": 10})
        assert not isinstance(err.value, SandboxRequestError)  # infrastructure, not the policy's fault
        clicks = [a for a in gbox.actions(sb.id)[before:] if a["name"] == "click"]
        assert len(clicks) == 1, clicks
    finally:
        await sb.close()


async def test_a_create_that_times_out_leaves_no_box(gbox):
    backend = backend_of(gbox, f"pytest-gbox-slow-{os.getpid()}", create_timeout_s=1)
    gbox.faults(create_delay_s=3)
    try:
        with pytest.raises(SandboxStartError, match="408"):
            await backend.start(SandboxSpec())
    finally:
        gbox.faults(create_delay_s=0)
    await asyncio.sleep(3)  # the server's own start, had it gone on, would be over
    assert backend.list_boxes(run_id=backend.run_id) == []


async def test_the_setup_command_runs_first_and_a_box_without_a_display_is_refused(gbox):
    backend = backend_of(gbox, f"pytest-gbox-setup-{os.getpid()}", setup_command="unset DISPLAY")
    with pytest.raises(SandboxStartError, match="the box has no DISPLAY for its commands"):
        await backend.start(SandboxSpec())
    assert backend.list_boxes(run_id=backend.run_id) == []  # the failed box was terminated


async def test_a_box_that_dies_mid_episode_is_an_infrastructure_failure(gbox):
    """Through the agent's episode loop: the box dies while the model thinks; the episode ends as
    infra_error with no reward (dropped, never scored 0), the typed error says why, the box is replaced."""
    from cua_agent.episode.actions import Click
    from cua_agent.episode.coordinates import CoordinateMapping
    from cua_agent.episode.loop import EpisodeConfig, run_episode
    from cua_agent.episode.tool_calls import format_tool_call
    from cua_agent.inference.model_call import ModelCall

    mapping = CoordinateMapping.identity(1280, 800)

    class KillsTheBoxThenClicks:
        def __init__(self, box_id: str) -> None:
            self.box_id = box_id

        async def chat(self, messages, images) -> ModelCall:
            await asyncio.to_thread(gbox.kill, self.box_id)
            return ModelCall(format_tool_call(Click(5, 5), mapping))

    backend = backend_of(gbox, f"pytest-gbox-kill-{os.getpid()}")
    pool = SandboxPool(backend, SandboxSpec(), max_size=1, install_handlers=False, reap_orphans=False)
    await pool.start()
    try:
        sb = await pool.acquire()
        task = {"task_id": "miniwob/click-test", "seed": 1}
        cfg = EpisodeConfig(max_turns=2, episode_timeout_s=60)
        ep = await run_episode(sb, KillsTheBoxThenClicks(sb.id), task, cfg, mapping)
        await pool.release(sb, broken=True)
        assert ep.status == "infra_error" and ep.task_reward is None and not ep.ok, ep
        assert "SandboxError" in ep.error and "unreachable" in ep.error, ep.error
    finally:
        await pool.close()
    assert backend.list_boxes(run_id=backend.run_id) == []


async def test_eight_starts_in_flight_never_stall_the_event_loop(gbox):
    backend = backend_of(gbox, f"pytest-gbox-loop-{os.getpid()}")
    stalls: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            stalls.append(now - last - 0.01)
            last = now

    tick = asyncio.create_task(ticker())
    t0 = time.monotonic()
    boxes = await asyncio.gather(*(backend.start(SandboxSpec()) for _ in range(8)), return_exceptions=True)
    try:
        shots = await asyncio.gather(*(sb.screenshot() for sb in boxes if not isinstance(sb, BaseException)))
    finally:
        done.set()
        await tick
        await asyncio.gather(*(sb.close() for sb in boxes if not isinstance(sb, BaseException)))
    failed = [b for b in boxes if isinstance(b, BaseException)]
    assert not failed, failed
    assert len(shots) == 8
    worst, second, wall = *sorted(stalls)[-1:-3:-1], time.monotonic() - t0
    print(
        f"\n8 gbox starts in {wall:.1f}s; longest event-loop stalls {worst * 1000:.0f}, {second * 1000:.0f} ms"
    )
    # A start that blocks the loop stalls it for that start's whole duration, about wall / 8 or more, once
    # per box; the bound scales with the run's own speed, and one stall past it is allowed, so that a
    # loaded machine's scheduling (one 0.37 s stall in a full suite run) does not fail it.
    bound = max(0.25, wall / 16)
    assert second < bound, (
        f"the event loop stalled {second:.2f}s twice (bound {bound:.2f}s) while boxes started"
    )
    assert backend.list_boxes(run_id=backend.run_id) == []


async def test_a_sigkilled_owners_boxes_are_reaped_by_label(gbox):
    run_id = f"pytest-gbox-orphan-{os.getpid()}"
    proc, (box_id,) = await asyncio.to_thread(spawn_owner, "gbox", run_id, env=gbox.env)
    probe = backend_of(gbox, "pytest-probe")
    assert [b["id"] for b in probe.list_boxes(run_id=run_id)] == [box_id]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [b["id"] for b in probe.list_boxes(run_id=run_id)] == [box_id]  # GBox keeps it: an orphan
    pool = SandboxPool(backend_of(gbox, "pytest-reaper"), install_handlers=False)
    await pool.start()
    await pool.close()
    assert probe.list_boxes(run_id=run_id) == []
    assert box_id not in gbox.running()


async def test_a_run_on_local_desktops_puts_the_rows_that_say_gbox_on_gbox(gbox, monkeypatch):
    from cua_agent.config import SandboxConfig
    from cua_agent.rollout.sandboxes import RolloutSandboxes

    for key, value in gbox.env.items():
        monkeypatch.setenv(key, value)
    sandboxes = RolloutSandboxes(SandboxConfig(backend="local", max_concurrency=2))
    pool = await sandboxes.pool()
    try:
        rows = [
            {"task_id": "miniwob/click-test"},
            {"task_id": "miniwob/click-test", "sandbox": {"backend": "gbox"}},
        ]
        boxes = [await pool.acquire(sandboxes.spec_for(row)) for row in rows]
        assert [sb.backend.name for sb in boxes] == ["local", "gbox"]
        assert boxes[1].id in gbox.running()
        for sb in boxes:
            await sb.reset("miniwob/click-test", 11)
            await solve(sb)
            assert (await sb.evaluate(wait_s=1.0))["reward"] == 1.0
            await pool.release(sb)
    finally:
        await sandboxes.close()
    assert gbox.running() == []


async def test_an_osworld_row_with_a_large_file_plays_on_gbox(gbox, tmp_path):
    """An OSWorld task's files come with its reset; over a command line's 128 KiB limit the body reaches
    the box as a file (the text editor and the pyautogui stand-in are on the desktop GBox drives here)."""
    from sandbox.osworld import main, reset_source
    from sandbox.tasks import load_tasks
    from tests.sandbox.osworld_files import HF, text_task, write, write_asset

    task_id = "22222222-3333-4444-8555-666666666666"
    write(tmp_path, "os", text_task(task_id))
    filler = "".join(f"filler line {i}\n" for i in range(12000))  # ~200 KB: more than one argument may hold
    write_asset(tmp_path, f"{HF}/os/{task_id}/notes.txt", f"first line\n{filler}".encode())
    write_asset(tmp_path, f"{HF}/os/{task_id}/notes_gold.txt", f"hello box\nfirst line\n{filler}".encode())
    rows = tmp_path / "rows.jsonl"
    assert (
        main(["rows", str(tmp_path / "examples"), "--assets", str(tmp_path / "assets"), "--out", str(rows)])
        == 0
    )
    row = load_tasks(rows)[0].to_dict()
    backend = backend_of(gbox, f"pytest-gbox-osworld-{os.getpid()}")
    sb = await backend.start(SandboxSpec())
    try:
        info = await sb.reset(row["task_id"], 0, reset_source(row["osworld"]))
        assert "notes.txt" in info["instruction"]
        await sb.act({"type": "wait", "seconds": 0.5})
        await sb.act({"type": "key", "keys": "ctrl+Home"})
        await sb.act({"type": "type", "text": "hello box"})
        await sb.act({"type": "key", "keys": "Return"})
        out = await sb.evaluate()
        assert out["reward"] == 1.0, out
    finally:
        await sb.close()
