"""Boxes on the machines of a Ray cluster (`sandbox.backend: ray`), the way users run it: a head node for the
trainer that offers no sandbox slots, and a sandbox-only machine (no GPU, no trainer) that joins with
`--resources '{"sandbox_slots": 2}'` and owns a podman engine of its own (the second engine here; the head's
is the primary). Every box must land on the sandbox machine's engine, a trainer's placement group
notwithstanding; a third box waits for a slot; errors keep their type across the hop; a box whose actor or
owner dies is an infrastructure failure, and its machine's reaper removes it within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from sandbox.backends import ray_hosts
from sandbox.backends.docker import DockerBackend, default_docker_host
from sandbox.backends.ray_hosts import SLOT, RayBackend
from sandbox.base import SandboxSpec, broken_from_inside
from sandbox.errors import BoxBroken, SandboxDied, SandboxRequestError, SandboxStartError
from tests.deploy.ray_cluster import LocalRayCluster

pytestmark = pytest.mark.slow
T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
SPEC = SandboxSpec()
SLOTS = 2
# How often the head's GCS checks that each node's raylet answers (Ray's default: 3 s). A lost machine is
# known as lost after health_check_failure_threshold (5) failed checks in a row: ~15 s at Ray's default
# period, ~5 s at this one. A check still fails only past health_check_timeout_ms (10 s, kept), so a live
# node on a busy machine is not taken for lost.
HEALTH_CHECK_PERIOD_MS = 1000


@pytest.fixture(scope="module")
def cluster(second_engine: str):
    """One cluster for the module's tests (the last takes its sandbox machine away and brings it back)."""
    import ray

    c = LocalRayCluster()
    try:
        head_env = {
            "DOCKER_HOST": default_docker_host(),
            "RAY_health_check_period_ms": str(HEALTH_CHECK_PERIOD_MS),
        }
        c.start_node("trainer", cpus=2, gpus=0, env=head_env)
        with ThreadPoolExecutor(1) as joins:  # the driver connects while the sandbox machine joins
            joined = joins.submit(
                c.start_node,
                "sandboxes",
                cpus=0,
                gpus=0,
                resources={SLOT: SLOTS},
                env={"DOCKER_HOST": second_engine},
            )
            ray.init(
                address=c.address, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False
            )
            joined.result()
        yield c
    finally:
        ray.shutdown()
        # the workers are Ray's: nothing of theirs needs a grace (gcs_server and the raylets outlast any)
        left = c.stop(grace_s=1)
    assert left == [], left


@pytest.fixture(scope="module")
def engines(second_engine: str):
    """Each machine's engine, looked at through its own API."""
    probes = {
        "trainer": DockerBackend("probe", default_docker_host()),
        "sandboxes": DockerBackend("probe", second_engine),
    }
    yield probes
    for p in probes.values():
        p.close()


def on(engines, run_id: str) -> dict[str, int]:
    return {name: len(p.list_boxes(run_id=run_id)) for name, p in engines.items()}


async def until(check, timeout_s: float = 30.0) -> float:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout_s, "timed out"
        await asyncio.sleep(0.2)
    return time.monotonic() - began


def trainer_in_a_placement_group(run_id: str, engine: str) -> dict[str, int]:
    """What a trainer rank under AReaL's Ray launcher does (a Ray task in a placement group that captures its
    children): start a box, play a task in it, say where it ran."""

    async def play() -> dict[str, int]:
        backend = RayBackend(run_id=run_id)
        sb = await backend.start(SPEC)
        try:
            await sb.reset("miniwob/click-test", 3)
            _, png = await sb.step({"type": "wait", "seconds": 0})
            where = {
                "sandboxes": len(DockerBackend("probe", engine).list_boxes(run_id=run_id)),
                "png": len(png),
            }
            where["reward"] = int((await sb.evaluate())["reward"])
            return where
        finally:
            await backend.stop(sb)

    return asyncio.run(play())


def test_a_trainers_boxes_land_on_the_sandbox_machine_not_in_its_placement_group(
    cluster, engines, second_engine
):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")  # on the trainer's machine: it alone has CPUs
    ray.get(pg.ready(), timeout=60)
    try:
        task = ray.remote(trainer_in_a_placement_group).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
        )
        seen = ray.get(task.remote("ray-pg", second_engine), timeout=180)
    finally:
        remove_placement_group(pg)
    assert seen["sandboxes"] == 1 and seen["png"] > 1000 and seen["reward"] == 0
    assert on(engines, "ray-pg") == {"trainer": 0, "sandboxes": 0}


async def started_together(backend: RayBackend, n: int) -> list:
    """`n` boxes started at once; if any start fails, those that started are stopped."""
    got = await asyncio.gather(*(backend.start(SPEC) for _ in range(n)), return_exceptions=True)
    failed = [g for g in got if isinstance(g, BaseException)]
    if failed:
        for sb in got:
            if not isinstance(sb, BaseException):
                await backend.stop(sb)
        raise failed[0]
    return got


class Said(logging.Handler):
    """What a module's own logger says (AReaL's logging replaces the root logger, so pytest's caplog, on the
    root of the moment, misses modules whose loggers hang off an older one)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_a_box_waits_for_a_free_slot_saying_so_and_errors_keep_their_type(
    cluster, engines, monkeypatch
):
    monkeypatch.setattr(ray_hosts, "SLOT_WAIT_SAY_EVERY_S", 1.0)
    said = Said()
    monkeypatch.setattr(ray_hosts.log, "disabled", False)
    ray_hosts.log.addHandler(said)
    backend = RayBackend(run_id="ray-slots")
    boxes = await started_together(backend, SLOTS)
    try:
        said.lines.clear()  # what the third box's start says, not what the first ones' said
        third = asyncio.ensure_future(backend.start(SPEC))
        waits = f"Ray to place it: every {SLOT} is held"

        def said_it_waits() -> bool:
            return any(line.startswith("a desktop box has waited") and waits in line for line in said.lines)

        with contextlib.suppress(AssertionError):  # the assert below shows what was said instead
            await until(said_it_waits)
        assert said_it_waits(), said.lines
        assert not third.done() and on(engines, "ray-slots") == {"trainer": 0, "sandboxes": SLOTS}
        await backend.stop(boxes.pop())
        boxes.append(await asyncio.wait_for(third, 60))
        assert on(engines, "ray-slots") == {"trainer": 0, "sandboxes": SLOTS}
        with pytest.raises(SandboxRequestError) as bad:  # the server's 4xx, raised on the sandbox machine
            await boxes[0].reset("miniwob/no-such-task", 0)
        assert 400 <= bad.value.status < 500
    finally:
        ray_hosts.log.removeHandler(said)
        for sb in boxes:
            await backend.stop(sb)
    assert on(engines, "ray-slots") == {"trainer": 0, "sandboxes": 0}


async def test_placement_never_exceeds_a_machines_slots_while_boxes_come_and_go(cluster, engines):
    """Twice as many episodes as slots, each starting, using and removing boxes as fast as it can: the
    sandbox machine's engine, sampled all along (until the boxes have churned and filled every slot, then
    while the episodes finish), never runs more boxes than its slots, the trainer's none."""
    backend = RayBackend(run_id="ray-churn")
    stop = asyncio.Event()
    starts = 0

    async def episodes() -> None:
        nonlocal starts
        while not stop.is_set():
            sb = await backend.start(SPEC)
            starts += 1
            try:
                await sb.screenshot()
                # an episode's while, long enough that the slots fill up; cut short once the sampling ends
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
            finally:
                await backend.stop(sb)

    seen: list[dict[str, int]] = []

    def churned() -> bool:
        return starts >= 3 * SLOTS and max((s["sandboxes"] for s in seen), default=0) >= SLOTS

    running = [asyncio.create_task(episodes()) for _ in range(2 * SLOTS)]
    ended = asyncio.gather(*running)
    try:
        began = time.monotonic()
        while not churned() and time.monotonic() - began < 60:
            seen.append(await asyncio.to_thread(on, engines, "ray-churn"))
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        while not ended.done():  # the episodes' last boxes (those that waited for a slot) are sampled too
            seen.append(await asyncio.to_thread(on, engines, "ray-churn"))
            await asyncio.wait({ended}, timeout=0.2)
        await ended
    assert starts >= 3 * SLOTS, f"the boxes hardly churned: {starts} starts"
    assert max(s["sandboxes"] for s in seen) == SLOTS and max(s["trainer"] for s in seen) == 0, seen
    assert on(engines, "ray-churn") == {"trainer": 0, "sandboxes": 0}


async def test_a_box_whose_actor_dies_is_an_infrastructure_failure_and_is_reaped(cluster, engines):
    import ray

    backend = RayBackend(run_id="ray-lost")
    sb = await backend.start(SPEC)
    actor = sb.client.actor
    pid = await actor.__ray_call__.remote(lambda self: os.getpid())
    os.kill(pid, signal.SIGKILL)  # as when its machine's Ray node goes
    with pytest.raises(SandboxDied) as lost:
        await sb.screenshot()
    assert await broken_from_inside(backend, sb.id, lost.value) is None  # not the policy's 0
    took = await until(lambda: on(engines, "ray-lost")["sandboxes"] == 0)
    assert took < 15
    backend.remove_sync(sb.id)
    with pytest.raises(ray.exceptions.RayActorError):
        await actor.state.remote()


class Trainer:
    """A trainer that starts a box and keeps it (a Ray actor of the test)."""

    def run(self, run_id: str) -> int:
        async def start() -> None:
            self.backend = RayBackend(run_id=run_id)
            self.box = await self.backend.start(SPEC)

        asyncio.run(start())
        return os.getpid()


async def test_a_killed_trainers_boxes_are_reaped_on_the_sandbox_machine(cluster, engines):
    import ray

    trainer = ray.remote(num_cpus=1)(Trainer).remote()
    pid = await trainer.run.remote("ray-owner")
    assert on(engines, "ray-owner") == {"trainer": 0, "sandboxes": 1}
    os.kill(pid, signal.SIGKILL)  # the trainer is killed: Ray ends its actors, the reaper their boxes
    took = await until(lambda: on(engines, "ray-owner")["sandboxes"] == 0)
    assert took < 15


def sample_task(task_id: str = "repo/calc-add"):
    from sandbox.repo.tasks import SAMPLE_TASKS, load_repo_tasks

    return next(t for t in load_repo_tasks(SAMPLE_TASKS) if t.task_id == task_id)


def rollout_sandboxes():
    from cua_agent.config import SandboxConfig
    from cua_agent.rollout.sandboxes import RolloutSandboxes

    return RolloutSandboxes(SandboxConfig(backend="ray", max_concurrency=1))


async def test_a_repository_task_is_played_and_scored_on_the_sandbox_machine(cluster, engines):
    """The terminal agent's boxes, its episode's and its scoring's, as the rollouts start them: on the
    sandbox machine's engine, driven from the trainer; the rule agent's gold patch scores 1."""
    from sandbox.repo.rule_agent import solve
    from sandbox.repo.scoring import score

    task = sample_task()
    sandboxes = rollout_sandboxes()
    seen: dict[str, object] = {}
    try:
        async with sandboxes.repo_box(task.spec) as box:
            run_id = box.backend.run_id
            steps = await solve(box, task)
            seen["agent"] = on(engines, run_id)

            @contextlib.asynccontextmanager
            async def fresh():
                async with sandboxes.scoring_box(task.spec) as scoring:
                    seen["both"] = on(engines, run_id)
                    # as the boxes' machine has them: the scorer's context reached it
                    seen["for_scoring"] = (box.for_scoring, scoring.for_scoring)
                    yield scoring

            verdict = await score(box, task.tests, fresh)
    finally:
        await sandboxes.close()
    assert [s["exit_code"] for s in steps] == [0] * len(steps), steps
    assert verdict.reward == 1.0, verdict.reason
    assert seen == {
        "agent": {"trainer": 0, "sandboxes": 1},
        "both": {"trainer": 0, "sandboxes": 2},
        "for_scoring": (False, True),
    }
    assert on(engines, run_id) == {"trainer": 0, "sandboxes": 0}


async def test_a_repository_boxs_failures_keep_their_meaning_across_the_relay(cluster, engines, monkeypatch):
    from sandbox.backends import ray_hosts

    spec = sample_task().spec
    sandboxes = rollout_sandboxes()
    monkeypatch.setattr(ray_hosts, "CALL_TIMEOUT_S", 1.0)  # a relay waits this much past a command's timeout
    try:
        async with sandboxes.repo_box(spec) as box:
            assert (await box.run("sleep 2; echo done", 10)).output == "done\n"
            with pytest.raises(SandboxDied) as broke:
                await box.run("kill -9 -1", 5)  # every process of the box: its control loop too
            assert isinstance(await broken_from_inside(box.backend, box.id, broke.value), BoxBroken)
        async with sandboxes.repo_box(spec) as box:
            run_id = box.backend.run_id
            pid = await box.actor.__ray_call__.remote(lambda self: os.getpid())
            os.kill(pid, signal.SIGKILL)  # as when its machine's Ray node goes
            with pytest.raises(SandboxDied) as lost:
                await box.run("echo hi")
            assert await broken_from_inside(box.backend, box.id, lost.value) is None
            took = await until(lambda: on(engines, run_id)["sandboxes"] == 0)
    finally:
        await sandboxes.close()
    assert took < 15


def tried_twice(start: Callable[[], T]) -> T:
    """A set-up box's start, tried again once if the engine refused it (printed)."""
    try:
        return start()
    except SandboxStartError as exc:
        print(f"a set-up box's start failed once: {exc}")
        return start()


ORPHAN = """import sys
from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import RepoSpec, start_repo_box
print(start_repo_box(DockerBackend("ray-reap", sys.argv[1]), RepoSpec(sys.argv[2])).id)
"""


def test_reap_given_a_ray_cluster_removes_the_orphans_of_its_sandbox_machines(
    cluster, engines, second_engine
):
    import subprocess
    import sys

    import ray

    from sandbox.backends.ray_hosts import NAMESPACE
    from sandbox.repo.box import RepoSpec, start_repo_box
    from tests.sandbox.second_engine import REPO_IMAGE

    for node in ray.nodes():  # the machines' own reapers would get there first: the orphan is the script's
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"reaper-{node['NodeID']}", namespace=NAMESPACE))

    # Two boxes for the reap to find. Their starts are set-up, not what is tested: the second engine (podman
    # 4.3.1) once refused one ("error preparing rootfs: mount .../merged ... OCI permission denied", one
    # start in a whole-suite run whose previous run passed), so each is tried twice, as the pool tries a
    # desktop box's start again.
    def orphaned() -> str:
        made = subprocess.run(  # a box whose owner process is gone, on the sandbox machine's engine
            [sys.executable, "-c", ORPHAN, second_engine, REPO_IMAGE],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if made.returncode:
            raise SandboxStartError(made.stderr[-2000:])
        return made.stdout.split()[-1]

    orphan = tried_twice(orphaned)
    live = tried_twice(lambda: start_repo_box(engines["sandboxes"], RepoSpec(REPO_IMAGE)))  # its owner runs
    try:
        began = time.monotonic()
        reap = subprocess.run(
            [sys.executable, "scripts/reap_sandboxes.py", "--backend", "ray", "--ray", cluster.address],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=180,
        )
        took = time.monotonic() - began
        assert reap.returncode == 0, reap.stdout + reap.stderr
        ids = {b["id"] for b in engines["sandboxes"].list_boxes()}
    finally:
        engines["sandboxes"].remove_sync(live.id)
    machine, *lines = reap.stdout.strip().splitlines()[:-1]
    assert machine.startswith("ray machine ") and machine.endswith(f"{SLOTS} {SLOT}):"), reap.stdout
    assert any(orphan in line and "(gone) -> remove" in line for line in lines), reap.stdout
    assert any(live.id in line and "(alive)" in line and "remove" not in line for line in lines), reap.stdout
    assert orphan not in ids and live.id in ids
    assert took < 60


def test_the_check_compares_the_live_clusters_slots_with_what_the_config_runs_at_once(cluster, tmp_path):
    import subprocess
    import sys

    from cua_agent.inference.local_server import MODELS

    check = [
        sys.executable,
        "train_areal.py",
        "--config",
        "configs/local_cpu.yaml",
        f"cluster.fileroot={tmp_path}",
    ]
    check += [
        f"actor.path={MODELS['untied']}",
        "sandbox.backend=ray",
        f"sandbox.ray_address={cluster.address}",
    ]
    began = time.monotonic()
    done = subprocess.run(  # one trainer process of 3 desktops: 3 slots, of the 2 the cluster has
        [*check, f"sandbox.max_concurrency={SLOTS + 1}", "--check", "--gpu-memory-gib", "80"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - began
    refused = f"  - sandbox.max_concurrency: 1 trainer processes x {SLOTS + 1} boxes need {SLOTS + 1} {SLOT}"
    assert done.returncode == 1 and refused in done.stdout, done.stdout + done.stderr
    assert f"live nodes offer {SLOTS}:" in done.stdout
    assert took < 60


async def test_a_repository_box_that_finds_no_free_slot_in_time_fails_to_start(cluster, engines):
    """Episodes that hold every slot while they wait for their scoring boxes would wait for ever."""
    from sandbox.backends.ray_hosts import repo_box_on_ray
    from sandbox.errors import SandboxStartError

    spec = sample_task().spec
    backend = RayBackend(run_id="ray-repo-slots")
    async with contextlib.AsyncExitStack() as held:
        for _ in range(SLOTS):
            await held.enter_async_context(repo_box_on_ray(backend, spec))
        began = time.monotonic()
        with pytest.raises(
            SandboxStartError, match=r"^sandbox\.acquire_timeout_s: no sandbox_slots .* in 1 s"
        ):
            await held.enter_async_context(repo_box_on_ray(backend, spec, slot_timeout_s=1.0))
        assert time.monotonic() - began < 10
    assert on(engines, "ray-repo-slots") == {"trainer": 0, "sandboxes": 0}


async def test_a_lost_sandbox_machine_fails_its_episodes_as_infrastructure_and_its_boxes_go_when_it_rejoins(
    cluster, engines, second_engine
):
    """Runs last: it takes the sandbox machine away and brings it back."""
    backend = RayBackend(run_id="ray-host-lost")
    sb = await backend.start(SPEC)
    await sb.reset("miniwob/click-test", 1)
    lost_at = time.monotonic()
    cluster.kill_node("sandboxes")  # its raylet, its workers, the box's actor and its reaper; not its engine
    with pytest.raises(SandboxDied) as lost:
        await sb.step({"type": "wait", "seconds": 0})
    print(f"a lost machine's episode failed after {time.monotonic() - lost_at:.1f} s")
    assert await broken_from_inside(backend, sb.id, lost.value) is None  # never the policy's 0
    backend.remove_sync(sb.id)  # its actor is gone: nothing here can remove the box
    assert sb.id in ids(engines)
    # it comes back once the cluster knows it was gone (a box placed before that lands on the dead node and
    # fails to start: the pool starts another)
    await until(lambda: not backend.slots(), timeout_s=90)
    cluster.start_node(
        "sandboxes", cpus=0, gpus=0, resources={SLOT: SLOTS}, env={"DOCKER_HOST": second_engine}
    )
    fresh = await backend.start(SPEC)  # the machine is back: a new box lands there, and its reaper with it
    try:
        took = await until(lambda: sb.id not in ids(engines))
        print(f"the lost machine's box was reaped {took:.1f} s after the first box it got back")
    finally:
        await backend.stop(fresh)
    assert on(engines, "ray-host-lost") == {"trainer": 0, "sandboxes": 0}


def ids(engines) -> list[str]:
    return [b["id"] for b in engines["sandboxes"].list_boxes()]
