"""Real sandboxes: podman through docker-py, Xvfb + chromium + apps, OS-level input, MiniWoB's own rewards."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

from sandbox.base import SandboxSpec
from sandbox.client import SandboxClient
from sandbox.errors import SandboxDied, SandboxError, SandboxRequestError
from sandbox.oracles import Ctx, random_actions, solve
from sandbox.pool import SandboxPool
from sandbox.tasks import load_tasks
from tests.sandbox.owner_process import spawn_owner
from tests.security.box_shell import box_shell

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

REPO = Path(__file__).resolve().parents[2]
ALL_TASKS = list(
    dict.fromkeys(
        t.task_id for f in ("miniwob.jsonl", "desktop.jsonl") for t in load_tasks(REPO / "tasks" / f)
    )
)
RANDOM_SUBSET = [
    "miniwob/click-test-2",
    "miniwob/click-button",
    "miniwob/enter-text",
    "miniwob/login-user",
    "miniwob/click-checkboxes",
    "miniwob/simple-arithmetic",
    "desktop/editor-save",
    "desktop/terminal-file",
]


# evaluate() answers as soon as the task has ended: a long wait costs nothing when the oracle solved it. At 1 s,
# CI's loaded 2 cores once read an oracle's click-button-sequence as 0 (with no more said: whether its clicks
# arrived late or never is what a failure now shows).
ORACLE_WAIT_S = 5.0


async def run_all(pool: SandboxPool, task_ids: list[str], agent: str, seed: int) -> dict[str, dict]:
    """Each task's evaluation (reward, done, info) and the agent's actions (the oracle's; none recorded for
    the random agent)."""
    results: dict[str, dict] = {}
    sem = asyncio.Semaphore(pool.max_size)

    async def one(tid: str) -> None:
        async with sem, pool.sandbox(timeout=120) as sb:
            await sb.reset(tid, seed)
            if agent == "oracle":
                actions = (await solve(sb)).actions
                result = await sb.evaluate(wait_s=ORACLE_WAIT_S)
            else:
                await random_actions(sb, 6, random.Random(f"{tid}:{seed}"))
                actions, result = [], await sb.evaluate(wait_s=0.2)
            results[tid] = {k: result.get(k) for k in ("reward", "done", "info")} | {"actions": actions}

    await asyncio.gather(*(one(t) for t in task_ids))
    return results


def unsolved(results: dict[str, dict]) -> dict[str, dict]:
    return {t: r for t, r in results.items() if r["reward"] != 1.0}


def _assert_all_solved(results: dict[str, dict]) -> None:
    assert not (failed := unsolved(results)), f"oracle did not get reward 1 on {failed}"
    assert sum(t.startswith("miniwob/") for t in results) >= 20
    assert sum(t.startswith("desktop/") for t in results) >= 3


async def test_oracle_solves_every_task_through_docker(docker_pool):
    _assert_all_solved(await run_all(docker_pool, ALL_TASKS, "oracle", seed=7))


async def test_oracle_solves_every_task_through_local(local_pool):
    _assert_all_solved(await run_all(local_pool, ALL_TASKS, "oracle", seed=11))


async def test_oracle_solves_click_tasks_on_a_screen_that_fits_them(sandbox_setup):
    """A row may give MiniWoB a 400x300 screen (the task and its panel, nothing else). chromium keeps its
    window at least 500 px wide, so outerWidth - innerWidth read as 100 px of browser chrome, which a kiosk
    window has none of: every element the oracle reported was 100 px right of where the screen shows it,
    and its clicks missed."""
    from sandbox.backends.docker import DockerBackend

    backend = DockerBackend(run_id=f"pytest-small-screen-{os.getpid()}")
    pool = SandboxPool(backend, SandboxSpec(screen=(400, 300)), max_size=1, install_handlers=False)
    await pool.start()
    try:
        results = await run_all(pool, ["miniwob/click-test", "miniwob/click-button"], "oracle", seed=5)
    finally:
        await pool.close()
        backend.close()
    assert not (failed := unsolved(results)), f"oracle did not get reward 1 at 400x300 on {failed}"


async def test_random_actions_score_below_one(docker_pool):
    rewards = {
        t: r["reward"] for t, r in (await run_all(docker_pool, RANDOM_SUBSET, "random", seed=3)).items()
    }
    assert len(rewards) == len(RANDOM_SUBSET)
    assert sum(rewards.values()) / len(rewards) < 1.0, rewards
    assert sum(r == 1.0 for r in rewards.values()) <= 1, rewards


async def test_screenshot_is_png_of_the_screen_and_downscales(docker_pool):
    import io

    from PIL import Image

    async with docker_pool.sandbox() as sb:
        full = Image.open(io.BytesIO(await sb.screenshot()))
        small = Image.open(io.BytesIO(await sb.screenshot(max_width=640)))
        assert full.format == "PNG" and full.size == (1280, 800) and small.size == (640, 400)


async def test_malformed_payloads_get_4xx_and_the_server_keeps_serving(docker_pool):
    async with docker_pool.sandbox() as sb:
        c = sb.client
        cases = [
            ("POST", "/action", b"{not json", 400),
            ("POST", "/action", b"[1, 2]", 400),
            ("POST", "/action", b'{"type": "click", "x": -5, "y": 10}', 400),
            ("POST", "/action", b'{"type": "click", "x": "1; rm -rf /", "y": 10}', 400),
            ("POST", "/action", b'{"type": "key", "keys": "ctrl+`reboot`"}', 400),
            ("POST", "/action", b'{"type": "type", "text": ' + b'"' + b"a" * 3000 + b'"}', 400),
            ("POST", "/task/reset", b'{"task_id": "miniwob/no-such-task", "seed": 1}', 400),
            ("POST", "/task/reset", b'{"task_id": "miniwob/click-test", "seed": -1}', 400),
            ("GET", "/screenshot?max_width=abc", None, 400),
            ("GET", "/action", None, 405),
            ("GET", "/nope", None, 404),
            ("POST", "/action", b"x" * (2 << 20), 413),
        ]
        for method, path, body, status in cases:
            resp = await c.raw(method, path, body)
            assert resp.status_code == status, (path, body and body[:60], resp.text)
            assert resp.json()["error"], resp.text
            assert (await sb.health())["ok"]
        with pytest.raises(SandboxRequestError):
            await sb.step({"type": "click", "x": 1})
        result, png = await sb.step({"type": "move", "x": 3, "y": 4}, max_width=320)
        assert result["pointer"] == [3, 4] and png.startswith(b"\x89PNG")
        with pytest.raises(SandboxRequestError) as err:
            await sb.act({"type": "drag", "x": 1, "y": 1})
        assert err.value.status == 400 and "to_x" in err.value.message
        intruder = SandboxClient("wrong-token-wrong-token", socket_path=sb.meta["socket"])
        with pytest.raises(SandboxRequestError) as err:
            await intruder.health()
        assert err.value.status == 401
        await intruder.aclose()
        await sb.reset("miniwob/click-test", 1)  # still fully functional
        await solve(sb)
        assert (await sb.evaluate())["reward"] == 1.0


async def test_box_is_isolated_and_limited(docker_backend):
    """No network, no capabilities, no new privileges, non-root, memory and pids limits enforced."""
    sb = await docker_backend.start(SandboxSpec(memory_mb=512, pids=128))
    try:
        c = docker_backend.docker.containers.get(sb.id)
        hc = c.attrs["HostConfig"]
        assert hc["NetworkMode"] == "none" and hc["Init"] is True
        assert hc["Memory"] == 512 << 20 and hc["PidsLimit"] == 128
        labels = c.labels
        assert labels["cua.sandbox"] == "1" and labels["cua.owner_pid"] == str(os.getpid())
        assert {"cua.run_id", "cua.created", "cua.owner_start"} <= set(labels)
        probe = r"""
import os, socket, time
print("ifaces", sorted(os.listdir("/sys/class/net")))
for host in [("1.1.1.1", 53), ("151.101.0.223", 443)]:
    try:
        socket.create_connection(host, timeout=3); print("EGRESS", host)
    except OSError as e:
        print("blocked", e.errno)
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print("caps", st["CapEff"].strip(), st["CapBnd"].strip(), "nnp", st["NoNewPrivs"].strip(), "uid", os.getuid())
kids = []
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            time.sleep(3); os._exit(0)
        kids.append(pid)
except OSError:
    pass
print("forked", len(kids))
for k in kids:
    os.kill(k, 9)
"""
        out = c.exec_run(["/opt/cua/venv/bin/python", "-c", probe]).output.decode()
        assert "ifaces ['lo']" in out and "EGRESS" not in out and out.count("blocked 101") == 2, out
        assert "caps 0000000000000000 0000000000000000 nnp 1 uid 1000" in out, out
        forked = int(out.split("forked ")[1].split()[0])
        assert forked < 128, out
        hog = c.exec_run(["/opt/cua/venv/bin/python", "-c", "b = bytearray(900 << 20); print('allocated')"])
        assert hog.exit_code == 137 and b"allocated" not in hog.output  # OOM-killed inside the box
        assert (await sb.health())["ok"]  # the box itself survives
    finally:
        await sb.close()
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == [] or all(
        b["id"] != sb.id for b in docker_backend.list_boxes(run_id=docker_backend.run_id)
    )


async def test_a_task_rows_box_gets_the_rows_resources_in_one_shared_pool(sandbox_setup):
    """A desktop row's box (memory_mb 1024) is limited to 1024 MB and solves its task; a box of another
    spec and one of the run's defaults follow in the same one-box pool (the idle box is stopped for them)."""
    import io

    from PIL import Image

    from sandbox.backends.docker import DockerBackend

    # Its own run id: closing this pool removes the run's boxes, and docker_pool's must stay.
    backend = DockerBackend(run_id=f"pytest-{os.getpid()}-specs")
    row = next(t for t in load_tasks(REPO / "tasks" / "desktop.jsonl") if t.task_id == "desktop/editor-save")
    run = SandboxSpec()  # the run's defaults (1536 MB)
    small = SandboxSpec.from_dict({"resources": {"screen": "1024x768", "pids": 256}}, base=run)

    def limits(sb) -> tuple[int, int, list[str]]:
        attrs = backend.docker.containers.get(sb.id).attrs
        env = [e for e in attrs["Config"]["Env"] if e.startswith("CUA_SCREEN_")]
        return attrs["HostConfig"]["Memory"] >> 20, attrs["HostConfig"]["PidsLimit"], sorted(env)

    pool = SandboxPool(backend, run, max_size=1, reap_orphans=False, install_handlers=False)
    try:
        async with pool:
            async with pool.sandbox(row.sandbox_spec(run), timeout=120) as sb:
                mem, pids, _ = await asyncio.to_thread(limits, sb)
                print(f"\n{row.task_id} box {sb.id}: HostConfig.Memory {mem} MiB, PidsLimit {pids}")
                assert (mem, pids) == (1024, 512)
                await sb.reset(row.task_id, 5)
                await solve(sb)
                assert (await sb.evaluate(wait_s=1.0))["reward"] == 1.0
            first = sb.id
            async with pool.sandbox(small, timeout=120) as sb:
                # a desktop task's box serves no other episode (its family is not `reusable`): none to stop for this one
                assert sb.id != first and pool.stats["stopped_for_other_spec"] == 0
                env = ["CUA_SCREEN_HEIGHT=768", "CUA_SCREEN_WIDTH=1024"]
                assert await asyncio.to_thread(limits, sb) == (1536, 256, env)
                assert Image.open(io.BytesIO(await sb.screenshot())).size == (1024, 768)
                await sb.reset("miniwob/click-test", 0)  # a MiniWoB box stays in the pool, idle
            async with pool.sandbox(timeout=120) as sb:  # the pool is full: the idle box of another spec goes
                assert pool.stats["stopped_for_other_spec"] == 1
                assert (await asyncio.to_thread(limits, sb))[:2] == (1536, 512)
        assert backend.list_boxes(run_id=backend.run_id) == []
    finally:
        backend.close()


async def test_box_killed_mid_episode_raises_typed_error_quickly(docker_backend):
    pool = SandboxPool(docker_backend, SandboxSpec(), max_size=1, reap_orphans=False, install_handlers=False)
    async with pool:
        with pytest.raises(SandboxError):
            async with pool.sandbox() as sb:
                await sb.reset("miniwob/click-test", 0)
                await asyncio.to_thread(docker_backend.docker.containers.get(sb.id).kill)
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(sb.act({"type": "click", "x": 5, "y": 5}), 20)
                finally:
                    assert time.monotonic() - t0 < 10
        dead = sb.id
        # The pool dropped the dead box and hands out a healthy new one.
        async with pool.sandbox() as sb2:
            assert sb2.id != dead and (await sb2.health())["ok"]
    assert all(b["id"] != dead for b in docker_backend.list_boxes())


async def test_local_box_killed_mid_episode_raises_typed_error(local_backend):
    from sandbox.backends.local import kill_session

    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.reset("miniwob/click-test", 0)
        kill_session(local_backend.procs[sb.id].pid, grace=0)  # a crash, not a shutdown
        with pytest.raises(SandboxDied):
            await asyncio.wait_for(sb.screenshot(), 10)
    finally:
        await sb.close()


@pytest.mark.parametrize("backend_name", ["docker", "local"])
async def test_sigkilled_owner_boxes_are_reaped_by_the_next_pool(backend_name, docker_backend, local_backend):
    from sandbox.backends import make_backend

    run_id = f"pytest-orphan-{backend_name}-{os.getpid()}"
    proc, (box_id,) = await asyncio.to_thread(spawn_owner, backend_name, run_id)
    probe = make_backend(backend_name, run_id="pytest-probe")
    assert [b["id"] for b in probe.list_boxes(run_id=run_id)] == [box_id]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if backend_name == "docker":  # nothing cleaned up after the owner: the box is an orphan now
        assert [b["id"] for b in probe.list_boxes(run_id=run_id)] == [box_id]
    pool = SandboxPool(make_backend(backend_name, run_id="pytest-reaper"), install_handlers=False)
    await pool.start()
    await pool.close()
    assert probe.list_boxes(run_id=run_id) == []


async def test_sigterm_removes_the_owners_own_boxes(docker_backend):
    run_id = f"pytest-term-{os.getpid()}"
    proc, (box_id,) = await asyncio.to_thread(spawn_owner, "docker", run_id)
    assert [b["id"] for b in docker_backend.list_boxes(run_id=run_id)] == [box_id]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert docker_backend.list_boxes(run_id=run_id) == []


async def test_a_miniwob_episode_ends_at_its_first_result(docker_pool):
    """MiniWoB ends its episode at the first decisive click and shows a START cover; a click on that cover
    starts a new problem. The task's result is the first episode's: a wrong click stays a failure even when
    the policy then restarts the page and solves the next problem, and the sandbox reports the end."""
    async with docker_pool.sandbox(timeout=120) as sb:
        await sb.reset("miniwob/click-button", 3)
        c = Ctx(sb, await sb.oracle())
        wrong = next(
            b for b in c.find_all(tag="BUTTON") if (b.get("text") or "").strip() != c.fields["target"]
        )
        result, _ = await sb.step({"type": "click", "x": round(wrong["x"] + 3), "y": round(wrong["y"] + 3)})
        assert result.get("task_done") is True, result
        first = await sb.evaluate(wait_s=1.0)
        assert first["done"] and first["reward"] == 0.0 and first["info"]["raw_reward"] == -1.0, first
        # The START cover lies over the task area: clicking where the buttons were hits it.
        await sb.act({"type": "click", "x": round(wrong["x"] + 3), "y": round(wrong["y"] + 3)})
        await solve(sb)
        after = await sb.evaluate(wait_s=1.0)
        assert after["reward"] == 0.0 and after["info"]["raw_reward"] == -1.0, after


async def test_two_pools_reaping_the_same_orphans_at_once_both_start():
    """Every trainer rank's pool reaps the orphans of a killed run when it starts, all at once: a rank that
    listed a box another rank was removing got podman's 500 'does not exist' (not docker's 404) and its
    pool failed to start (seen in the 2-rank resume test). Five rounds of four orphans, two reapers."""
    from sandbox.backends import make_backend

    for round_ in range(5):
        run_id = f"pytest-race-{os.getpid()}-{round_}"
        owners = await asyncio.gather(
            *(asyncio.to_thread(spawn_owner, "docker", f"{run_id}-{i}") for i in range(4))
        )
        for proc, _ in owners:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        pools = [
            SandboxPool(make_backend("docker", run_id=f"{run_id}-r{i}"), install_handlers=False)
            for i in range(2)
        ]
        started = await asyncio.gather(*(p.start() for p in pools), return_exceptions=True)
        for p in pools:
            await p.close()
        assert not [s for s in started if isinstance(s, BaseException)], started
        probe = make_backend("docker", run_id="pytest-probe")
        assert not [b for b in probe.list_boxes() if b["labels"].get("cua.run_id", "").startswith(run_id)]


async def test_a_box_starting_while_another_rank_reaps_keeps_its_control_folder(docker_backend, monkeypatch):
    """A rank's pool reaps when it starts, while another rank's box is starting: that box's control folder
    (its keys, its socket) exists before the engine lists the box. Reaped as a folder of a box removed by
    hand, the box could not read its keys and failed to start (seen in a resumed 2-rank rehearsal)."""
    from docker.models.containers import ContainerCollection

    from sandbox.backends.docker import DockerBackend

    starter = DockerBackend(run_id=f"pytest-starting-{os.getpid()}")
    reaper = DockerBackend(run_id=f"pytest-reaping-{os.getpid()}")
    run = ContainerCollection.run

    def reaped_first(self, *args, **kwargs):  # the other rank's reap lands between folder and container
        reaper.reap()
        return run(self, *args, **kwargs)

    monkeypatch.setattr(ContainerCollection, "run", reaped_first)
    try:
        sb = await starter.start(SandboxSpec())
        try:
            await asyncio.wait_for(sb.screenshot(), 30)
        finally:
            await sb.close()
    finally:
        starter.close()
        reaper.close()


async def test_a_desktop_box_created_but_never_started_is_removed_with_its_folder(
    docker_backend, monkeypatch
):
    """A memory limit runc cannot set: the engine creates the box, then fails to start it. The created box
    and its control folder (its keys) stayed behind; repository boxes share the same start."""
    # The folder of boxes is the endpoint's, shared with every process that starts boxes on this engine
    # (the other test worker too): follow the one box this start creates, by the name it is created under.
    created = []
    creating = docker_backend.creating
    monkeypatch.setattr(docker_backend, "creating", lambda name: created.append(name) or creating(name))
    with pytest.raises(Exception, match="memory limit"):
        await docker_backend.start(SandboxSpec(memory_mb=1))
    [name] = created
    assert name not in {b["id"] for b in docker_backend.list_boxes()}
    assert not (docker_backend.run_dir / name).exists()


async def test_a_key_held_by_a_stalled_machine_types_one_character(docker_pool):
    """Under load the box can stall between a key's press and its release (xdotool sends them 4 ms apart).
    With X's autorepeat on, a stall past its delay (660 ms) typed the key again and again: an agent's
    typed text, and an oracle's, reached the application wrong (the likely cause of CI's text-editor oracles
    scoring 0). The press here is held 1 s, from inside the box."""
    async with docker_pool.sandbox(timeout=120) as sb:
        await sb.reset("desktop/editor-save", 0)
        path = (await sb.oracle())["path"]
        shell = box_shell(docker_pool.backend, sb.id)
        held = "export DISPLAY=:$(ls /tmp/.X11-unix | tr -d X); xdotool keydown q; sleep 1; xdotool keyup q"
        assert shell(f"{held} && echo held").strip() == "held"
        await sb.act({"type": "key", "keys": "ctrl+s", "wait_change_s": 2})
        await sb.act({"type": "wait", "seconds": 1})
        saved = shell(f"cat '{path}'")
    assert saved.strip() == "q", repr(saved)
