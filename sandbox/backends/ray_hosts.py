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

Repository boxes (the terminal agent's, sandbox/repo/box.py) are driven through a folder of their
machine, so each has an actor too (`RepoKeeper`, one slot) that starts it with that machine's docker
backend and runs its requests there; the trainer holds a `RayRepoBox` with the surface episodes and
scoring use. Whether it is a scoring box (R2E-Gym's hidden tests kept) is read from the trainer's context
and passed on. An episode keeps its box while its tests run in a second one, so a repository run holds
twice `sandbox.max_concurrency` slots per trainer process (`slot_shortage`, the launcher's and
`train_areal.py --check`'s rule), and a repository box that finds no free slot within
`sandbox.acquire_timeout_s` fails to start rather than waiting on slots its own episodes hold.

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
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sandbox.aio import finish
from sandbox.base import Backend, BoxState, Sandbox, SandboxSpec, owner_labels
from sandbox.errors import SandboxDied, SandboxError, SandboxStartError, SandboxTimeout
from sandbox.repo.box import MAX_OUTPUT, CommandResult, RepoBox, RepoSpec, in_scoring_boxes

if TYPE_CHECKING:
    from sandbox.backends.docker import DockerBackend

SLOT = "sandbox_slots"  # the custom resource a sandbox machine offers, one unit per box
NAMESPACE = "cua-sandboxes"  # the reapers' names live here, whatever job started them
REAP_EVERY_S = 2.0
REAPER_IDLE_S = 60.0
CALL_TIMEOUT_S = 600.0  # a relayed request: the box's own client cuts it much earlier
STOP_TIMEOUT_S = 60.0
SLOT_WAIT_SAY_EVERY_S = 30.0  # a start waiting for a free slot says so this often

log = logging.getLogger(__name__)


def boxes_at_once(max_concurrency: int, rows: Iterable[Mapping[str, Any]]) -> tuple[int, str]:
    """The most boxes one trainer process holds at once, and how that is counted: up to
    `sandbox.max_concurrency` desktops for rows of the GUI agent; for repository rows (the terminal
    agent's) as many episodes' boxes and as many scoring boxes, since an episode keeps its box while its
    tests run in another (cua_agent/rollout/sandboxes.py)."""
    agents = {r.get("agent", "gui") for r in rows} or {"gui"}
    parts = []
    if agents - {"terminal"}:
        parts.append((max_concurrency, "desktops"))
    if "terminal" in agents:
        parts.append((2 * max_concurrency, "repository boxes and their scoring boxes"))
    return sum(n for n, _ in parts), " + ".join(f"{n} {what}" for n, what in parts)


def slots_needed(
    trainers: int, max_concurrency: int, rows: Iterable[Mapping[str, Any]], evaluation_concurrency: int = 0
) -> tuple[int, str]:
    """The slots a run holds at once, and how that is counted: each trainer process's boxes, and those of
    rank 0's held-out evaluation (`evaluation_concurrency` episodes; 0 when it is off), which plays while
    every trainer's pool keeps its boxes, idle ones included."""
    per, how = boxes_at_once(max_concurrency, rows)
    held_out = boxes_at_once(evaluation_concurrency, rows)[0] if evaluation_concurrency else 0
    counted = f"{trainers} trainer processes x {per} boxes"
    if held_out:
        counted += f" + {held_out} for rank 0's held-out evaluation (evaluation.concurrency)"
    return (
        trainers * per + held_out,
        f"{counted} need {trainers * per + held_out} {SLOT} (each process: {how})",
    )


def slot_shortage(
    nodes: list[dict[str, Any]],
    trainers: int,
    max_concurrency: int,
    rows: Iterable[Mapping[str, Any]],
    evaluation_concurrency: int = 0,
) -> str | None:
    """Why the live machines of `nodes` (`ray.nodes()`) cannot hold every box the run holds at once
    (`slots_needed`), naming the field; None when they can. The launcher and `train_areal.py --check` both
    ask this."""
    need, counted = slots_needed(trainers, max_concurrency, rows, evaluation_concurrency)
    slots = sum(n.get("Resources", {}).get(SLOT, 0) for n in nodes if n.get("Alive"))
    if slots >= need:
        return None
    lower = "sandbox.max_concurrency" + (" or evaluation.concurrency" if evaluation_concurrency else "")
    return (
        f"sandbox.max_concurrency: {counted}, and the Ray cluster's live nodes offer {slots:g}: let more "
        f"sandbox machines join (`ray start --address ... --resources '{{\"{SLOT}\": N}}'`) or lower {lower}"
    )


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


class RepoKeeper:
    """One repository box (sandbox/repo/box.py) on the machine this actor runs on (a Ray actor): the box's
    control is a folder of this machine, so its requests are served here."""

    def __init__(self, run_id: str) -> None:
        from sandbox.backends.docker import DockerBackend

        self.backend = DockerBackend(run_id=run_id)
        self.box: RepoBox | None = None
        HostReaper.ensure_on_this_node()

    async def start(self, spec: RepoSpec, for_scoring: bool) -> dict[str, Any]:
        self.box = await asyncio.to_thread(_start_repo_box, self.backend, spec, for_scoring)
        b = self.box
        return {
            "id": b.id,
            "start_tree": b.start_tree,
            "start_note": b.start_note,
            "for_scoring": b.for_scoring,
            "host": socket.gethostname(),
        }

    async def call(self, method: str, args: tuple[Any, ...]) -> Any:
        if self.box is None:
            raise SandboxDied("the box was stopped")
        return await getattr(self.box, method)(*args)

    def state(self) -> BoxState | None:
        return None if self.box is None else self.backend.state(self.box.id)

    async def stop(self) -> None:
        box, self.box = self.box, None
        if box is not None:
            await box.close()


def _start_repo_box(backend: DockerBackend, spec: RepoSpec, for_scoring: bool) -> RepoBox:
    from sandbox.repo.box import scoring_boxes, start_repo_box

    # the trainer's context says whether it is a scoring box: this process's does not
    with scoring_boxes() if for_scoring else contextlib.nullcontext():
        return start_repo_box(backend, spec)


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


async def _relay(
    actor: Any, where: str, method: str, args: tuple[Any, ...], timeout_s: float = CALL_TIMEOUT_S
) -> Any:
    """`method` of the box an actor keeps; the box's own errors arrive with their types (Ray raises them
    as subclasses of theirs), an actor that is gone is SandboxDied, one that does not answer within
    `timeout_s` SandboxTimeout."""
    ray = _ray()
    try:
        return await asyncio.wait_for(actor.call.remote(method, args), timeout_s)
    except ray.exceptions.RayActorError as exc:  # its machine or its actor is gone
        raise SandboxDied(f"{where}: its actor is gone ({type(exc).__name__})") from None
    except TimeoutError:
        raise SandboxTimeout(f"{where}: no answer from its actor in {timeout_s:.0f} s") from None


class RayBoxClient:
    """A box's control client through its actor (sandbox.client.ControlClient)."""

    def __init__(self, actor: Any, box_id: str, host: str) -> None:
        self.actor = actor
        self.where = f"{box_id} on {host} (ray)"

    async def _call(self, method: str, *args: Any) -> Any:
        return await _relay(self.actor, self.where, method, args)

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


class RayRepoBox:
    """A repository box through its actor, with what episodes and scoring use of a RepoBox (its spec, the
    starting tree its machine recorded, run / read_file / write_file / apply_patch, close); `backend` is
    the RayBackend, so `broken_from_inside(box.backend, box.id, ...)` asks the box's machine."""

    def __init__(self, backend: RayBackend, actor: Any, spec: RepoSpec, started: dict[str, Any]) -> None:
        self.backend, self.actor, self.spec = backend, actor, spec
        self.id: str = started["id"]
        self.start_tree: str | None = started["start_tree"]
        self.start_note: str = started["start_note"]
        self.for_scoring: bool = started["for_scoring"]
        self.host: str = started["host"]
        self.where = f"{self.id} on {self.host} (ray)"

    async def run(self, command: str, timeout_s: float = 30.0, max_bytes: int = MAX_OUTPUT) -> CommandResult:
        # the box cuts the command at timeout_s and answers soon after: the relay waits longer
        return await _relay(
            self.actor, self.where, "run", (command, timeout_s, max_bytes), timeout_s + CALL_TIMEOUT_S
        )

    async def read_file(self, path: str, max_bytes: int = MAX_OUTPUT) -> CommandResult:
        return await _relay(self.actor, self.where, "read_file", (path, max_bytes))

    async def write_file(self, path: str, content: str) -> CommandResult:
        return await _relay(self.actor, self.where, "write_file", (path, content))

    async def apply_patch(self, diff: str | bytes, exclude: tuple[str, ...] = ()) -> CommandResult:
        return await _relay(self.actor, self.where, "apply_patch", (diff, exclude))

    async def close(self) -> None:
        await asyncio.to_thread(self.backend.remove_sync, self.id)


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

    async def _keeper(self, keeper: type) -> Any:
        """An actor of class `keeper` that holds one slot, wherever Ray finds one."""
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not await asyncio.to_thread(self.slots):  # a call to Ray's control store: not on the rollout loop
            raise SandboxStartError(
                f"sandbox.backend=ray: no machine of the Ray cluster offers {SLOT} "
                f"(ray start ... --resources '{{\"{SLOT}\": N}}' on each sandbox machine)"
            )
        return (
            ray.remote(keeper)
            .options(
                resources={SLOT: 1},
                num_cpus=0,
                max_restarts=0,
                # out of the trainer's placement group (AReaL's launcher captures children): Ray places the box
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None),
            )
            .remote(self.run_id)
        )

    async def _started(self, actor: Any, started: Any) -> Any:
        """What the actor's start answered; the actor killed when the start failed or was cancelled."""
        ray = _ray()
        try:
            return await started
        except BaseException as exc:
            ray.kill(actor)
            if isinstance(exc, ray.exceptions.RayActorError):
                raise SandboxStartError(f"a box's actor died while it started the box ({exc})") from None
            raise

    async def _placed(self, actor: Any, what: str, timeout_s: float | None = None) -> None:
        """Until Ray placed `actor` on a machine with a free slot, saying so every SLOT_WAIT_SAY_EVERY_S (a run
        whose boxes all wait shows why); SandboxStartError past `timeout_s`."""
        ready = asyncio.ensure_future(actor.__ray_ready__.remote())  # an ObjectRef is awaitable
        start = time.monotonic()
        try:
            while True:
                left = None if timeout_s is None else timeout_s - (time.monotonic() - start)
                step = SLOT_WAIT_SAY_EVERY_S if left is None else max(0.0, min(left, SLOT_WAIT_SAY_EVERY_S))
                done, _ = await asyncio.wait({ready}, timeout=step)
                if done:
                    ready.result()  # raises what the placement raised (an actor that died)
                    return
                waited = time.monotonic() - start
                if timeout_s is not None and waited >= timeout_s:
                    raise SandboxStartError(
                        f"sandbox.acquire_timeout_s: no {SLOT} of the Ray cluster came free in {timeout_s:.0f} s "
                        f"for {what}"
                    )
                free = await asyncio.to_thread(lambda: _ray().available_resources().get(SLOT, 0))
                why = (
                    f"every {SLOT} is held (`ray status` lists them; `train_areal.py --check` counts what the "
                    "run needs)"
                    if free < 1
                    else f"{free:g} {SLOT} are free: Ray is still starting the box's actor process (on few "
                    "cores, many starts at once take a while)"
                )
                log.warning(f"{what} has waited {waited:.0f} s for Ray to place it: {why}")
        finally:
            ready.cancel()

    async def start(self, spec: SandboxSpec) -> Sandbox:
        actor = await self._keeper(BoxKeeper)

        async def start() -> tuple[str, str]:
            await self._placed(actor, "a desktop box")
            return await actor.start.remote(spec)

        box_id, host = await self._started(actor, start())
        self._actors[box_id] = actor
        sb = Sandbox(id=box_id, backend=self, client=RayBoxClient(actor, box_id, host), spec=spec)
        sb.meta["host"] = host
        return sb

    async def start_repo(
        self, spec: RepoSpec, for_scoring: bool, slot_timeout_s: float | None = None
    ) -> RayRepoBox:
        """A repository box on a machine with a free slot; SandboxStartError when none came free within
        `slot_timeout_s` (an episode holds its box while it waits for its scoring box's slot: with every
        slot held that way, waiting on would never end)."""
        actor = await self._keeper(RepoKeeper)

        async def start() -> dict[str, Any]:
            await self._placed(actor, "a repository box", slot_timeout_s)
            return await actor.start.remote(spec, for_scoring)

        started = await self._started(actor, start())
        self._actors[started["id"]] = actor
        return RayRepoBox(self, actor, spec, started)

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

    def close(self) -> None:
        self.reap(all_boxes=True)


@contextlib.asynccontextmanager
async def repo_box_on_ray(
    backend: RayBackend, spec: RepoSpec, slot_timeout_s: float | None = None
) -> AsyncIterator[RayRepoBox]:
    """sandbox.repo.box.repo_box on a machine of the Ray cluster: a scoring box inside `scoring_boxes()`,
    removed after whatever happens."""
    box = await backend.start_repo(spec, in_scoring_boxes(), slot_timeout_s)
    try:
        yield box
    finally:
        await finish(box.close())
