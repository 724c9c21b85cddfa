"""Fast checks without containers: action validation, task specs, the pool's bookkeeping."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.aio import finish, gather_all
from sandbox.base import Backend, Sandbox, SandboxSpec
from sandbox.errors import SandboxDied, SandboxError, SandboxStartError, SandboxTimeout
from sandbox.oracles import supported_tasks
from sandbox.pool import SandboxPool
from sandbox.server.xdotool import ActionError, to_xdotool
from sandbox.tasks import TaskSpecError, load_tasks, parse_task

REPO = Path(__file__).resolve().parents[2]


# -- actions ---------------------------------------------------------------------------------------
def test_click_translates_to_one_xdotool_chain_without_sleeps():
    act = to_xdotool({"type": "click", "x": 10.4, "y": 20}, 1280, 800)
    assert act.xdotool == ["mousemove", "10", "20", "click", "--repeat", "1", "--delay", "0", "1"]
    assert act.pointer == (10, 20)


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ([], "JSON object"),
        ({"type": "teleport"}, "'type' must be one of"),
        ({"type": "click", "y": 3}, "'x' is required"),
        ({"type": "click", "x": "5", "y": 3}, "'x' must be a number"),
        ({"type": "click", "x": True, "y": 3}, "'x' must be a number"),
        ({"type": "click", "x": 1280, "y": 3}, "outside"),
        ({"type": "click", "x": math.nan, "y": 3}, "outside"),
        ({"type": "click", "x": 1, "y": 3, "button": "fourth"}, "'button'"),
        ({"type": "click", "x": 1, "y": 3, "button": ["left"]}, "'button'"),  # unhashable
        ({"type": "type", "text": ""}, "'text'"),
        ({"type": "type", "text": "a" * 5000}, "longer than"),
        ({"type": "key", "keys": "ctrl+$(reboot)"}, "invalid key name"),
        ({"type": "key", "keys": []}, "'keys'"),
        ({"type": "scroll", "x": 1, "y": 1}, "non-zero"),
        ({"type": "wait", "seconds": 99}, "'seconds'"),
    ],
)
def test_malformed_actions_name_the_problem(payload, fragment):
    with pytest.raises(ActionError, match=None) as err:
        to_xdotool(payload, 1280, 800)
    assert fragment in str(err.value)


def test_key_aliases_and_text_starting_with_dash():
    assert to_xdotool({"type": "key", "keys": "Ctrl+Enter"}, 10, 10).xdotool[-1] == "ctrl+Return"
    assert to_xdotool({"type": "type", "text": "--help"}, 10, 10).xdotool[-2:] == ["--", "--help"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["click", "drag", "scroll", "type", "key", "wait", "move"])},
        optional={
            "x": json_values,
            "y": json_values,
            "to_x": json_values,
            "to_y": json_values,
            "dx": json_values,
            "dy": json_values,
            "text": json_values,
            "keys": json_values,
            "seconds": json_values,
            "button": json_values,
        },
    )
)
def test_any_payload_is_either_valid_and_in_range_or_an_action_error(payload):
    try:
        act = to_xdotool(payload, 1280, 800)
    except ActionError:
        return
    if act.pointer is not None:
        assert 0 <= act.pointer[0] < 1280 and 0 <= act.pointer[1] < 800
    assert all(isinstance(a, str) for a in act.xdotool)


def test_an_unknown_backend_name_lists_the_known_ones():
    from sandbox.backends import BACKENDS, make_backend

    with pytest.raises(ValueError, match=r"'vm' \(expected one of docker, local, gbox, ray\)"):
        make_backend("vm")
    assert BACKENDS == ("docker", "local", "gbox", "ray")


# -- task specs ------------------------------------------------------------------------------------
def test_shipped_task_files_are_valid_and_solvable():
    miniwob = load_tasks(REPO / "tasks" / "miniwob.jsonl")
    desktop = load_tasks(REPO / "tasks" / "desktop.jsonl")
    oracle = set(supported_tasks())
    assert len({t.task_id for t in miniwob}) >= 20
    assert len({t.task_id for t in desktop}) >= 3
    assert {t.task_id for t in miniwob + desktop} <= oracle
    assert {t.split for t in miniwob} == {"train", "test"}
    # make learn's rows: the same tasks on a screen that fits them, train and test seeds apart
    small = load_tasks(REPO / "tasks" / "miniwob-400x300.jsonl")
    assert {t.task_id for t in small} <= oracle and {t.split for t in small} == {"train", "test"}
    assert {t.sandbox_spec().screen for t in small} == {(400, 300)}
    # the office suite: its own image, train and test seeds apart, an oracle for every task
    office = load_tasks(REPO / "tasks" / "office.jsonl")
    assert {t.task_id for t in office} <= oracle and {t.split for t in office} == {"train", "test"}
    assert {t.sandbox_spec().image for t in office} == {"cua-sandbox-office:latest"}


def test_oracles_stay_on_the_host():
    """The image ships sandbox/__init__.py and sandbox/server/ only (scripts/build_sandbox_image.sh): the
    server must import nothing else of the package."""
    import ast

    build = (REPO / "scripts" / "build_sandbox_image.sh").read_text()
    assert "find sandbox/__init__.py sandbox/server -name" in build
    for path in (REPO / "sandbox" / "server").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith("sandbox") or name.startswith("sandbox.server"), (path, name)


def test_every_runtime_is_a_registered_family_with_its_entry_points():
    """One registry names the task families: each entry's runtime class (in the box) and oracle module (on
    the host) load, and no runtime module exists outside it."""
    from sandbox.oracles import solvers, supported_tasks
    from sandbox.server.runtimes.base import Runtime
    from sandbox.server.task_families import TASK_FAMILIES, load

    runtimes = {p.stem for p in (REPO / "sandbox" / "server" / "runtimes").glob("*.py")}
    assert runtimes - {"__init__", "base"} == set(TASK_FAMILIES)
    for name, family in TASK_FAMILIES.items():
        runtime = load(family.runtime)
        assert issubclass(runtime, Runtime) and runtime.prefix == name
        assert bool(solvers(name)) == (family.oracles is not None), name
    assert {t.split("/")[0] for t in supported_tasks()} == {n for n, f in TASK_FAMILIES.items() if f.oracles}


def test_an_unknown_task_family_is_an_error_that_lists_the_known_ones(tmp_path):
    from sandbox.server.app import Controller
    from sandbox.server.runtimes.base import TaskError
    from sandbox.server.task_families import UnknownTaskFamily, family_of

    with pytest.raises(
        UnknownTaskFamily, match=r"'vm' in 'vm/x' \(known: desktop, miniwob, office, osworld\)"
    ):
        family_of("vm/x")
    # The task file names the field and the known families.
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({**GOOD, "task_id": "vm/calc-sum"}) + "\n")
    with pytest.raises(
        TaskSpecError,
        match=r"tasks.jsonl:1: field 'task_id': .*known family \(desktop, miniwob, office, osworld\)",
    ):
        load_tasks(path)
    # The box's server answers the same way (a 4xx, not a crash), before touching its display.
    with pytest.raises(
        TaskError,
        match=r"unknown task family 'vm' in 'vm/calc-sum' \(known: desktop, miniwob, office, osworld\)",
    ):
        Controller(display=None).reset({"task_id": "vm/calc-sum", "seed": 0})  # type: ignore[arg-type]


def test_a_box_that_plays_a_family_which_may_hand_out_a_shell_serves_no_other_episode():
    """`reusable` in the registry decides, per family, whether a box may serve a later episode."""

    class Client:
        async def reset(self, task_id, seed, source=None):
            return {"instruction": "x"}

    box = Sandbox(id="b", backend=None, client=Client(), spec=None)  # type: ignore[arg-type]
    asyncio.run(box.reset("miniwob/click-test", 1))
    assert box.reusable
    asyncio.run(box.reset("desktop/terminal-file", 1))
    assert not box.reusable
    asyncio.run(box.reset("miniwob/click-test", 2))
    assert not box.reusable  # once a shell was on offer, never again


GOOD = {
    "task_id": "miniwob/click-test",
    "instruction": None,
    "sandbox": {
        "image": "cua-sandbox:latest",
        "resources": {"memory_mb": 1024, "cpus": 1, "pids": 256, "screen": "1280x800"},
    },
    "max_turns": 5,
    "seeds": [0, 10],
    "split": "train",
}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"task_id": "click-test"}, "task_id"),
        ({"max_turns": 0}, "max_turns"),
        ({"seeds": [5, 5]}, "seeds"),
        ({"split": "dev"}, "split"),
        ({"sandbox": {"backend": "vm"}}, "sandbox.backend"),
        ({"sandbox": {"resources": {"memory_mb": 10}}}, "sandbox.resources.memory_mb"),
        ({"sandbox": {"resources": {"screen": "big"}}}, "sandbox.resources.screen"),
        ({"sandbox": {"resources": {"gpus": 1}}}, "sandbox.resources.gpus"),
        ({"max_trun": 3}, "max_trun"),
    ],
)
def test_task_spec_errors_name_line_and_field(tmp_path, change, field):
    bad = {**GOOD, **change}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(TaskSpecError) as err:
        load_tasks(path)
    assert f"t.jsonl:3: field '{field}'" in str(err.value)


def test_task_spec_roundtrip_and_json_errors(tmp_path):
    spec = parse_task(GOOD)
    assert parse_task(spec.to_dict()) == spec
    assert spec.sandbox_spec().screen == (1280, 800) and spec.sandbox_spec().pids == 256
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{oops\n")
    with pytest.raises(TaskSpecError, match=r"t\.jsonl:2: not valid JSON"):
        load_tasks(path)
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(TaskSpecError, match=r"t\.jsonl:2: field 'task_id'.*line 1"):
        load_tasks(path)


def test_a_row_without_a_sandbox_block_takes_the_runs_box():
    row = {k: v for k, v in GOOD.items() if k != "sandbox"}
    run = SandboxSpec(image="cua-sandbox:abc123", memory_mb=2048)
    assert parse_task(row).sandbox_spec(run) == run


def test_a_row_may_choose_its_backend_from_the_known_ones(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{**GOOD, "sandbox": {**GOOD["sandbox"], "backend": b}} for b in ("gbox", "vm")]
    path.write_text(json.dumps(rows[0]) + "\n")
    assert load_tasks(path)[0].sandbox_spec().backend == "gbox"
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]) + "\n")
    with pytest.raises(TaskSpecError) as err:
        load_tasks(path)
    assert "t.jsonl:2: field 'sandbox.backend'" in str(err.value)
    assert "must be one of docker, local, gbox, ray (absent: the run's sandbox.backend), got 'vm'" in str(
        err.value
    )


def test_a_rows_sandbox_block_overrides_the_runs_defaults():
    run = SandboxSpec(image="cua-sandbox:abc123", memory_mb=2048, cpus=2.0)
    desktop = load_tasks(REPO / "tasks" / "desktop.jsonl")[0]
    assert desktop.sandbox_spec(run) == SandboxSpec(
        image="cua-sandbox:abc123", memory_mb=1024, cpus=1.0, pids=512, screen=(1280, 800)
    )
    own = {"image": "cua-office:1", "resources": {"screen": "1024x768"}}
    assert SandboxSpec.from_dict(own, base=run) == SandboxSpec(
        image="cua-office:1", memory_mb=2048, cpus=2.0, screen=(1024, 768)
    )
    assert SandboxSpec.from_dict(None, base=run) == run
    assert SandboxSpec.from_dict({"backend": "gbox"}, base=run) == SandboxSpec(
        image="cua-sandbox:abc123", memory_mb=2048, cpus=2.0, backend="gbox"
    )
    with pytest.raises(ValueError, match=r"sandbox\.host"):
        SandboxSpec.from_dict({"host": "docker"})
    # What a training row carries is what the task file says, so the run's image applies where it names none.
    assert parse_task(desktop.to_dict()).sandbox == {
        "resources": {"memory_mb": 1024, "cpus": 1.0, "pids": 512, "screen": "1280x800"}
    }


# -- pool bookkeeping with a fake backend -------------------------------------------------------------
class FakeClient:
    def __init__(self, box: FakeBox) -> None:
        self.box = box

    async def health(self, timeout: float = 5.0) -> dict:
        if not self.box.alive:
            raise SandboxDied("gone")
        return {"ok": True}

    async def aclose(self) -> None:
        pass


class FakeBox:
    def __init__(self) -> None:
        self.alive = True


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, fail_first: int = 0, start_delay: float = 0.0) -> None:
        super().__init__("fake-run")
        self.boxes: dict[str, FakeBox] = {}
        self.fail_first, self.start_delay, self.starts = fail_first, start_delay, 0
        self.started_with: list[SandboxSpec] = []

    async def start(self, spec: SandboxSpec) -> Sandbox:
        self.starts += 1
        self.started_with.append(spec)
        await asyncio.sleep(self.start_delay)
        if self.starts <= self.fail_first:
            raise SandboxStartError("boom")
        box_id = f"box{self.starts}"
        with self.creating(box_id):
            self.boxes[box_id] = FakeBox()
        return Sandbox(id=box_id, backend=self, client=FakeClient(self.boxes[box_id]), spec=spec)  # type: ignore[arg-type]

    async def stop(self, sb: Sandbox) -> None:
        self.boxes.pop(sb.id, None)

    def remove_sync(self, box_id: str) -> None:
        self.boxes.pop(box_id, None)

    def list_boxes(self, run_id: str | None = None) -> list[dict]:
        return [{"id": b, "labels": {}, "status": "running"} for b in self.boxes]


def _pool(backend: FakeBackend, **kw) -> SandboxPool:
    kw.setdefault("max_size", 2)
    return SandboxPool(backend, reap_orphans=False, install_handlers=False, **kw)


async def test_pool_bounds_concurrency_and_times_out():
    backend = FakeBackend()
    async with _pool(backend, warm=1) as pool:
        a, b = await pool.acquire(), await pool.acquire()
        with pytest.raises(SandboxTimeout):
            await pool.acquire(timeout=0.2)
        await pool.release(a)
        c = await pool.acquire(timeout=1)
        assert c is a and len(backend.boxes) == 2
        await pool.release(b)
        await pool.release(c)
    assert backend.boxes == {}


async def test_pool_retries_failed_starts_and_replaces_dead_boxes():
    backend = FakeBackend(fail_first=2)
    async with _pool(backend, start_retries=2) as pool:
        sb = await pool.acquire()
        assert pool.stats["start_failures"] == 2
        await pool.release(sb)
        backend.boxes[sb.id].alive = False
        sb2 = await pool.acquire()
        assert sb2.id != sb.id and pool.stats["replaced_unhealthy"] == 1
        await pool.release(sb2)
    assert backend.boxes == {}


async def test_pool_gives_up_after_retries():
    async with _pool(FakeBackend(fail_first=10), start_retries=1) as pool:
        with pytest.raises(SandboxStartError):
            await pool.acquire()
        assert pool.size["total"] == 0


async def test_cancelled_acquire_does_not_leak_the_box_it_was_starting():
    backend = FakeBackend(start_delay=0.3)
    async with _pool(backend, max_size=1) as pool:
        with pytest.raises(SandboxTimeout):
            await pool.acquire(timeout=0.05)
        sb = await pool.acquire(timeout=2)  # the late box was adopted, not orphaned
        assert backend.starts == 1
        await pool.release(sb)
    assert backend.boxes == {}


async def test_broken_box_is_destroyed_on_release():
    backend = FakeBackend()
    async with _pool(backend) as pool:
        with pytest.raises(SandboxDied):
            async with pool.sandbox() as sb:
                raise SandboxDied("box died mid-episode")
        assert sb.id not in backend.boxes and pool.size == {"idle": 0, "busy": 0, "total": 0}


DESKTOP = SandboxSpec(memory_mb=1024)
OWN_IMAGE = SandboxSpec(image="cua-office:1", screen=(1024, 768))


async def test_boxes_of_several_specs_share_one_pool():
    backend = FakeBackend()
    async with _pool(backend, max_size=2, warm=1) as pool:
        assert backend.started_with == [SandboxSpec()]  # warm boxes: the pool's spec
        warm = await pool.acquire()
        d = await pool.acquire(DESKTOP)
        assert d.spec == DESKTOP and backend.started_with[-1] == DESKTOP
        with pytest.raises(SandboxTimeout):  # one max_size for all specs
            await pool.acquire(OWN_IMAGE, timeout=0.2)
        await pool.release(d)
        assert await pool.acquire(DESKTOP) is d  # an idle box of the same spec is handed out again
        await pool.release(d)
        await pool.release(warm)
        # Full, with idle boxes of other specs only: the one idle longest (d) is stopped to make room.
        o = await pool.acquire(OWN_IMAGE)
        assert o.spec == OWN_IMAGE and d.id not in backend.boxes and warm.id in backend.boxes
        assert pool.stats["stopped_for_other_spec"] == 1 and pool.size == {"idle": 1, "busy": 1, "total": 2}
        assert await pool.acquire() is warm
        await pool.release(o)
        await pool.release(warm)
    assert backend.boxes == {}


async def test_a_waiting_acquire_of_another_spec_gets_the_slot_of_a_released_box():
    backend = FakeBackend()
    async with _pool(backend, max_size=1) as pool:
        sb = await pool.acquire()
        waiter = asyncio.ensure_future(pool.acquire(DESKTOP, timeout=2))
        await asyncio.sleep(0.05)
        await pool.release(sb)
        d = await waiter
        assert d.spec == DESKTOP and sb.id not in backend.boxes and pool.size["total"] == 1
        await pool.release(d)


async def test_acquire_refuses_a_timeout_passed_as_the_spec():
    async with _pool(FakeBackend()) as pool:
        with pytest.raises(TypeError, match="spec must be a SandboxSpec"):
            await pool.acquire(30.0)  # type: ignore[arg-type]


def test_stopping_a_session_does_not_wait_on_its_own_zombies():
    """A box's session leader is our child: once killed it is a zombie until we reap it, which is after
    kill_session returns. Counting it as alive made every local box's stop wait both grace periods (6 s)."""
    import subprocess
    import time

    from sandbox.backends.local import kill_session

    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        t0 = time.monotonic()
        kill_session(proc.pid, grace=3.0)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -15  # it ended at the SIGTERM
    assert took < 1.5, f"kill_session took {took:.1f}s"  # waiting on the zombie costs a whole grace, 3 s


async def test_one_pool_starts_each_box_on_the_backend_its_spec_names():
    from sandbox.backends.routed import RoutedBackend

    made: dict[str, FakeBackend] = {}

    def make(name: str, run_id: str) -> FakeBackend:
        made[name] = FakeBackend()
        made[name].run_id = run_id
        return made[name]

    routed = RoutedBackend("docker", make, run_id="run-1")
    assert list(made) == []  # each on first use (the default too: a worker thread makes it)
    async with _pool(routed, max_size=3) as pool:
        on_gbox = await pool.acquire(SandboxSpec(backend="gbox"))
        default = await pool.acquire(SandboxSpec())
        assert on_gbox.backend is made["gbox"] and default.backend is made["docker"]
        assert made["gbox"].run_id == made["docker"].run_id == "run-1"  # one run id: its labels cover all
        assert {(b["id"], b["backend"]) for b in routed.list_boxes()} == {
            (on_gbox.id, "gbox"),
            (default.id, "docker"),
        }
        routed.remove_sync(on_gbox.id)  # by the backend that started it (ids may repeat across backends)
        assert on_gbox.id not in made["gbox"].boxes and default.id in made["docker"].boxes
        await pool.release(default)
    assert made["docker"].boxes == {} and made["gbox"].boxes == {}


def test_a_backend_in_use_that_cannot_list_is_skipped_but_the_default_must_answer(monkeypatch):
    from sandbox.backends import routed as module
    from sandbox.backends.routed import RoutedBackend

    warned: list[str] = []
    monkeypatch.setattr(module.log, "warning", lambda msg, *args: warned.append(msg % args))

    class Down(FakeBackend):
        def list_boxes(self, run_id=None):
            raise SandboxError("unreachable")

    routed = RoutedBackend("docker", lambda name, rid: Down() if name == "gbox" else FakeBackend())
    routed.backend("gbox")
    assert routed.list_boxes() == [] and warned == ["listing the boxes on gbox failed, skipped: unreachable"]
    with pytest.raises(SandboxError):
        RoutedBackend("docker", lambda name, rid: Down()).list_boxes()


async def test_after_stop_creating_the_router_starts_no_box_on_any_backend_made_before_or_after():
    """A run's last resort (RolloutSandboxes.remove_own) stops creation before it lists its boxes: a
    backend the router makes afterwards (a row naming another backend) must refuse as well."""
    from sandbox.backends.routed import RoutedBackend

    routed = RoutedBackend("docker", lambda name, rid: FakeBackend())
    await routed.start(SandboxSpec())
    assert routed.stop_creating(timeout_s=1)
    for spec in (SandboxSpec(), SandboxSpec(backend="gbox")):
        with pytest.raises(SandboxStartError, match="the run is removing its boxes"):
            await routed.start(spec)
    assert [b["id"] for b in routed.list_boxes()] == ["box1"]


def test_reaping_through_the_router_is_each_backends_own_reap():
    """The docker backend's reap also removes stale socket folders: the router must not bypass it."""
    from sandbox.backends.routed import RoutedBackend

    class OwnReap(FakeBackend):
        reaped = 0

        def reap(self, all_boxes: bool = False) -> list[str]:
            OwnReap.reaped += 1
            return ["orphan"]

    routed = RoutedBackend("docker", lambda name, rid: OwnReap())
    routed.backend("gbox")
    assert routed.reap() == ["orphan", "orphan"] and OwnReap.reaped == 2


def test_a_release_interrupted_by_a_second_cancellation_still_finishes_before_the_episode_ends():
    """At the end of a run AReaL cancels the rollouts; an episode cancelled again while it handed its box
    back left the release running on its own (asyncio.shield), and the event loop closed under it: "Task was
    destroyed but it is pending" for SandboxPool.release, and a box the pool still counted. The episode ends
    only after its release, then re-raises the cancellation."""
    released = []

    async def release() -> None:
        await asyncio.sleep(0.2)
        released.append(True)

    async def episode() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await finish(release())

    async def go() -> None:
        task = asyncio.ensure_future(episode())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()  # during the release
        with pytest.raises(asyncio.CancelledError):
            await task
        assert released == [True], "the episode ended before its release"

    asyncio.run(go())


def test_a_group_ends_only_after_every_episode_has_handed_its_box_back():
    """Seen at the end of every run: AReaL cancels a group; `asyncio.gather` ended (cancelled) as soon as
    its first episode did, while the other still handed its box back, and the event loop closed under it."""
    released = []

    async def episode(release_s: float) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await finish(asyncio.sleep(release_s))
            released.append(release_s)

    async def go() -> None:
        group = asyncio.ensure_future(gather_all(episode(0.0), episode(0.2)))
        await asyncio.sleep(0.01)
        group.cancel()
        with pytest.raises(asyncio.CancelledError):
            await group
        assert sorted(released) == [0.0, 0.2], "the group ended before every episode did"

    asyncio.run(go())


def _host_with_its_own_stop(out: str) -> None:
    """A program with its own SIGTERM handling (the trainer's stop) starts a pool on its main thread."""
    import signal

    def own(signum, frame) -> None:
        pass

    signal.signal(signal.SIGTERM, own)

    async def go() -> bool:
        async with SandboxPool(FakeBackend(), reap_orphans=False) as pool:  # the default: hooks installed
            await pool.acquire()
            return signal.getsignal(signal.SIGTERM) is own

    Path(out).write_text(str(asyncio.run(go())))


def test_a_pool_keeps_the_signal_handling_of_a_program_that_has_its_own(tmp_path):
    """The trainer's held-out evaluation starts a pool on the main thread: its hooks replaced the trainer's
    SIGTERM handler, and a stop then removed every box of every pool at once (the episodes of the step in
    progress died) and emptied the registry the exit clean-up reads, so boxes started during the stop were
    left behind (seen in the rehearsals)."""
    import multiprocessing

    out = tmp_path / "kept"
    proc = multiprocessing.get_context("spawn").Process(target=_host_with_its_own_stop, args=(str(out),))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0 and out.read_text() == "True"


@pytest.mark.parametrize("how", ["a top others can write", "someone else's, open to all", "a link"])
def test_the_boxes_control_folders_sit_only_in_a_private_tree(tmp_path, how):
    """Box folders under a folder others can write could be swapped for links that the engine mounts; our
    own folders an earlier version left open are closed."""
    from sandbox.base import private_dirs
    from sandbox.errors import SandboxError

    home = tmp_path / "home"
    run = home / "sandbox" / "run" / "ep-1"
    (home / "sandbox").mkdir(parents=True)
    (home / "sandbox").chmod(0o777)  # ours: closed
    assert private_dirs(home, run) == run
    assert [oct(d.stat().st_mode & 0o777) for d in (home / "sandbox", run)] == ["0o700", "0o700"]
    target = home / "sandbox"
    if how == "a top others can write":
        target = home
        home.chmod(0o777)
    elif how == "someone else's, open to all":
        os.chown(target, 65534, 65534)
        target.chmod(0o777)
    else:
        for d in sorted(target.rglob("*"), reverse=True):
            d.rmdir()
        target.rmdir()
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        target.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxError, match=f"{target} must be a folder of yours that no one else can write"):
        private_dirs(home, run)


def test_a_wait_for_a_starting_box_asks_the_engine_every_half_second_and_looks_at_its_file_every_50_ms():
    import time

    from sandbox.base import ENGINE_POLL_S, READY_POLL_S, start_polls

    polls = start_polls()
    began = time.monotonic()
    asks = [next(polls) for _ in range(int(1.0 / READY_POLL_S))]
    took = time.monotonic() - began
    assert asks[0] and sum(asks) <= took / ENGINE_POLL_S + 1 and len(asks) >= 3 * sum(asks)


def test_a_local_state_folder_too_long_for_a_box_socket_is_refused_naming_it():
    """A box's control socket lives in its folder under the state folder, and a unix socket's path has at
    most 107 bytes: a longer one failed each box's start with `AF_UNIX path too long` from inside the box."""
    from sandbox.backends.local import LocalBackend

    # The check needs no folder, so both paths are built to the byte: a socket path of 107 bytes is the
    # longest that works, 108 the shortest refused (tmp_path's own length varies from run to run).
    box_and_socket = len("/cua-lb-0123456789ab/control.sock")
    fits = Path("/s") / ("d" * (107 - box_and_socket - len("/s/")))
    LocalBackend(state_dir=fits)
    too_long = Path(f"{fits}d")
    with pytest.raises(ValueError, match=rf"{too_long} is too long.*108-byte paths.*107 bytes"):
        LocalBackend(state_dir=too_long)
