"""Boxes on the machines of a Ray cluster (`sandbox.backend: ray`), the way users run it: a head node for the
trainer that offers no sandbox slots, and a sandbox-only machine (no GPU, no trainer) that joins with
`--resources '{"sandbox_slots": 2}'` and owns a podman engine of its own (the second engine here; the head's
is the primary). Every box must land on the sandbox machine's engine, a trainer's placement group
notwithstanding; a third box waits for a slot; errors keep their type across the hop; a box whose actor or
owner dies is an infrastructure failure, and its machine's reaper removes it within seconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from sandbox.backends.docker import DockerBackend, default_docker_host
from sandbox.backends.ray_hosts import SLOT, RayBackend
from sandbox.base import SandboxSpec, broken_from_inside
from sandbox.errors import SandboxDied, SandboxRequestError
from tests.deploy.ray_cluster import LocalRayCluster

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SPEC = SandboxSpec()
SLOTS = 2


@pytest.fixture(scope="module")
def cluster(second_engine: str):
    import ray

    c = LocalRayCluster()
    try:
        c.start_node("trainer", cpus=2, gpus=0, env={"DOCKER_HOST": default_docker_host()})
        c.start_node("sandboxes", cpus=0, gpus=0, resources={SLOT: SLOTS}, env={"DOCKER_HOST": second_engine})
        ray.init(address=c.address, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        left = c.stop()
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


async def test_a_box_waits_for_a_free_slot_and_errors_keep_their_type(cluster, engines):
    backend = RayBackend(run_id="ray-slots")
    boxes = [await backend.start(SPEC) for _ in range(SLOTS)]
    try:
        third = asyncio.ensure_future(backend.start(SPEC))
        await asyncio.sleep(5)
        assert not third.done() and on(engines, "ray-slots") == {"trainer": 0, "sandboxes": SLOTS}
        await backend.stop(boxes.pop())
        boxes.append(await asyncio.wait_for(third, 60))
        assert on(engines, "ray-slots") == {"trainer": 0, "sandboxes": SLOTS}
        with pytest.raises(SandboxRequestError) as bad:  # the server's 4xx, raised on the sandbox machine
            await boxes[0].reset("miniwob/no-such-task", 0)
        assert 400 <= bad.value.status < 500
    finally:
        for sb in boxes:
            await backend.stop(sb)
    assert on(engines, "ray-slots") == {"trainer": 0, "sandboxes": 0}


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
