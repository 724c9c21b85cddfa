"""Ray backend (`sandbox.backend: ray`): boxes on the machines of the run's Ray cluster that offer sandbox
slots, placed by Ray; the trainer never lists hosts.

A machine offers boxes by joining the cluster with a custom resource, and runs a Docker engine (podman or
Docker) of its own, as for the docker backend:

    ray start --address HEAD:6379 --resources '{"sandbox_slots": 16}'

Each box is a Ray actor (`BoxKeeper`) that holds one slot: Ray puts it on a machine with a free slot, or
the start waits for one, so no machine runs more boxes than it offers. The actor starts the box on its own
machine's engine with the docker backend, so the box keeps its isolation unchanged (no network, its
unix-socket control channel, answers signed with a key that stays on that machine), and it relays the
trainer's requests. The actor escapes the trainer's placement group (AReaL's Ray launcher makes trainers
capture their children's placement), needs no CPU of Ray's, and is never restarted.

Failures keep their meaning across the hop: the sandbox errors raised in the actor reach the trainer as
the same types; an actor that is gone (its machine lost, or killed) is SandboxDied with no state, an
infrastructure failure. Leaks: a box's owner labels are its actor's process. When the actor dies (with
the trainer that owns it: Ray ends an owner's actors), a reaper on that machine (`HostReaper`, one per
machine, detached, no resources) removes the box within REAP_EVERY_S, and ends itself once the machine
has had no box of ours for REAPER_IDLE_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

from sandbox.base import Backend, BoxState, Sandbox, SandboxSpec, owner_labels
from sandbox.errors import SandboxDied, SandboxError, SandboxStartError

SLOT = "sandbox_slots"  # the custom resource a sandbox machine offers, one unit per box
NAMESPACE = "cua-sandboxes"  # the reapers' names live here, whatever job started them
REAP_EVERY_S = 2.0
REAPER_IDLE_S = 60.0
CALL_TIMEOUT_S = 600.0  # a relayed request: the box's own client cuts it much earlier
STOP_TIMEOUT_S = 60.0


def _ray():
    import ray  # only where this backend is used: the trainer's environment has it, box images do not

    return ray


class BoxKeeper:
    """One box on the machine this actor runs on (a Ray actor: `ray.remote(BoxKeeper)`)."""

    def __init__(self, run_id: str) -> None:
        from sandbox.backends.docker import DockerBackend

        self.backend = DockerBackend(run_id=run_id)  # this machine's engine (DOCKER_HOST or podman's)
        self.sb: Sandbox | None = None
        HostReaper.ensure_on_this_node()

    async def start(self, spec: SandboxSpec) -> tuple[str, str]:
        self.sb = await self.backend.start(spec)
        return self.sb.id, socket.gethostname()

    async def call(self, method: str, args: tuple[Any, ...]) -> Any:
        if self.sb is None:
            raise SandboxDied("the box was stopped")
        return await getattr(self.sb.client, method)(*args)

    def state(self) -> BoxState | None:
        return None if self.sb is None else self.backend.state(self.sb.id)

    async def stop(self) -> None:
        sb, self.sb = self.sb, None
        if sb is not None:
            await self.backend.stop(sb)


class HostReaper:
    """Removes the boxes of this machine's engine whose owner process is gone, every REAP_EVERY_S; ends
    itself when the engine has had none of our boxes for REAPER_IDLE_S (a Ray actor, one per machine)."""

    def __init__(self) -> None:
        from sandbox.backends.docker import DockerBackend

        self.backend = DockerBackend(run_id="reaper")
        self.running = False

    @staticmethod
    def ensure_on_this_node() -> None:
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ray.get_runtime_context().get_node_id()
        reaper = (
            ray.remote(HostReaper)
            .options(
                name=f"reaper-{node}",
                namespace=NAMESPACE,
                lifetime="detached",  # outlives the trainer whose boxes it reaps
                get_if_exists=True,
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            )
            .remote()
        )
        reaper.run.remote()

    async def run(self) -> None:
        if self.running:
            return
        self.running = True
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < REAPER_IDLE_S:
            with contextlib.suppress(Exception):  # an engine hiccup: try again next round
                await asyncio.to_thread(self.backend.reap)
                if await asyncio.to_thread(self.backend.list_boxes):
                    idle_since = time.monotonic()
            await asyncio.sleep(REAP_EVERY_S)
        _ray().actor.exit_actor()


class RayBoxClient:
    """A box's control client through its actor (sandbox.client.ControlClient)."""

    def __init__(self, actor: Any, box_id: str, host: str) -> None:
        self.actor = actor
        self.where = f"{box_id} on {host} (ray)"

    async def _call(self, method: str, *args: Any) -> Any:
        ray = _ray()
        try:
            return await asyncio.wait_for(self.actor.call.remote(method, args), CALL_TIMEOUT_S)
        except ray.exceptions.RayActorError as exc:  # its machine or its actor is gone
            raise SandboxDied(f"{self.where}: its actor is gone ({type(exc).__name__})") from None

    async def health(self, timeout: float = 5.0) -> dict[str, Any]:
        return await self._call("health", timeout)

    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        return await self._call("screenshot", max_width, max_height)

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self._call("act", action)

    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]:
        return await self._call("step", action, max_width, max_height)

    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._call("reset", task_id, seed, source)

    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]:
        return await self._call("evaluate", wait_s, gave_up)

    async def oracle(self) -> dict[str, Any]:
        return await self._call("oracle")

    async def aclose(self) -> None:
        return None  # the actor's own client closes with the box


class RayBackend(Backend):
    name = "ray"

    def __init__(self, run_id: str | None = None, address: str | None = None) -> None:
        super().__init__(run_id)
        ray = _ray()
        if not ray.is_initialized():  # a trainer under the Ray launcher is connected already
            try:
                ray.init(address=address or "auto", logging_level="WARNING", log_to_driver=False)
            except ConnectionError as exc:
                raise SandboxError(
                    f"sandbox.backend=ray: no Ray cluster at {address or 'RAY_ADDRESS or this machine'} ({exc}); "
                    "start one and let sandbox machines join it (docs/multinode.md, Sandboxes on Ray)"
                ) from None
        self._actors: dict[str, Any] = {}

    def slots(self) -> dict[str, float]:
        """Sandbox slots per live machine (its node id): what the cluster offers."""
        return {
            n["NodeID"]: n["Resources"][SLOT]
            for n in _ray().nodes()
            if n["Alive"] and n["Resources"].get(SLOT)
        }

    async def start(self, spec: SandboxSpec) -> Sandbox:
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not self.slots():
            raise SandboxStartError(
                f"sandbox.backend=ray: no machine of the Ray cluster offers {SLOT} "
                f"(ray start ... --resources '{{\"{SLOT}\": N}}' on each sandbox machine)"
            )
        actor = (
            ray.remote(BoxKeeper)
            .options(
                resources={SLOT: 1},
                num_cpus=0,
                max_restarts=0,
                # out of the trainer's placement group (AReaL's launcher captures children): Ray places the box
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),
            )
            .remote(self.run_id)
        )
        try:
            box_id, host = await actor.start.remote(spec)
        except BaseException as exc:
            ray.kill(actor)
            if isinstance(exc, ray.exceptions.RayActorError):
                raise SandboxStartError(f"a box's actor died while it started the box ({exc})") from None
            raise
        self._actors[box_id] = actor
        sb = Sandbox(id=box_id, backend=self, client=RayBoxClient(actor, box_id, host), spec=spec)
        sb.meta["host"] = host
        return sb

    async def stop(self, sb: Sandbox) -> None:
        await asyncio.to_thread(self.remove_sync, sb.id)

    def remove_sync(self, box_id: str) -> None:
        ray = _ray()
        actor = self._actors.pop(box_id, None)
        if actor is None:
            return
        try:
            with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                ray.get(actor.stop.remote(), timeout=STOP_TIMEOUT_S)
        finally:
            ray.kill(actor)  # a box its actor could not remove is its machine's reaper's

    def state(self, box_id: str) -> BoxState | None:
        ray = _ray()
        actor = self._actors.get(box_id)
        if actor is None:
            return None
        try:
            return ray.get(actor.state.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return None  # its machine is gone or cannot say: not the policy's doing

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """This process's boxes (its actors'); other processes' are their machines' reapers' business."""
        if run_id not in (None, self.run_id):
            return []
        labels = {**owner_labels(self.run_id), "cua.backend": "ray"}
        return [{"id": box_id, "labels": labels, "status": "running"} for box_id in self._actors]

    def reap(self, all_boxes: bool = False) -> list[str]:
        """Orphans are removed on their own machines (HostReaper); `all_boxes` removes this process's."""
        if not all_boxes:
            return []
        ids = list(self._actors)
        for box_id in ids:
            self.remove_sync(box_id)
        return ids
