"""The backend-independent sandbox API: a spec, a handle, and what a backend implements."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.client import ControlClient, SandboxClient
from sandbox.errors import BoxBroken, SandboxDied, SandboxError, SandboxStartError
from sandbox.server.task_families import family_of

MAX_SOCKET_PATH = 107  # bytes in a unix socket's path (sun_path, less its NUL): box control sockets must fit
LABEL = "cua.sandbox"  # every box carries cua.sandbox=1 plus the owner labels below


def cua_home() -> Path:
    return Path(os.environ.get("CUA_HOME") or Path.home() / ".cache" / "cua-areal")


def private_dirs(top: Path, path: Path) -> Path:
    """`path` (at or under `top`), its missing folders made owner-only (0700); every folder from `top` down
    must be this user's (unless it runs as root) and closed to others' writes, never a link. On a shared
    host, a folder another user owns or can write lets them queue commands into boxes, or swap a box's
    folder for a link to a host path that the engine then mounts into a box."""
    top.mkdir(mode=0o700, parents=True, exist_ok=True)
    chain = [top]
    for part in path.relative_to(top).parts:
        chain.append(chain[-1] / part)
    uid = os.geteuid()
    for d in chain:
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
        st = d.lstat()
        if d != top and st.st_uid == uid and stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077:
            d.chmod(0o700)  # ours, made by an earlier version with the umask's mode: others keep out
            st = d.lstat()
        foreign = st.st_uid != uid and uid != 0  # root (a trainer container) runs in its launcher's folder
        if stat.S_ISLNK(st.st_mode) or foreign or st.st_mode & 0o022:
            raise SandboxError(
                f"{d} must be a folder of yours that no one else can write (uid {st.st_uid}, mode "
                f"{stat.filemode(st.st_mode)}): the boxes' control folders live under it; set CUA_HOME (or "
                "CUA_RUN_HOME) to a private folder"
            )
    return path


def process_start_ticks(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot): with the pid it identifies a process uniquely."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_labels(run_id: str) -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL: "1",
        "cua.run_id": run_id,
        "cua.owner_pid": str(pid),
        "cua.owner_start": str(process_start_ticks(pid) or 0),
        "cua.owner_host": socket.gethostname(),
        "cua.created": f"{time.time():.0f}",
    }


def made_by_this_process(labels: dict[str, str]) -> bool:
    """Whether a box's owner labels are this process's: its pid alone is not enough, since trainers in two
    containers on one engine can have the same pid (each container has its own pid namespace)."""
    mine = owner_labels("")
    return all(labels.get(k) == mine[k] for k in ("cua.owner_pid", "cua.owner_start", "cua.owner_host"))


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the process that created a box still runs. Boxes of other hosts count as alive."""
    host = labels.get("cua.owner_host")
    if host and host != socket.gethostname():
        return True
    try:
        pid = int(labels.get("cua.owner_pid", ""))
    except ValueError:
        return False
    ticks = process_start_ticks(pid)
    return ticks is not None and str(ticks) == labels.get("cua.owner_start", str(ticks))


READY_POLL_S = 0.05  # a starting box's ready file, on this host: cheap to look at
ENGINE_POLL_S = 0.5  # whether it is still running, asked of the engine: 100 boxes starting at once on one
# engine asked it 2000 times a second at the ready file's pace


def start_polls() -> Iterator[bool]:
    """Paces a wait for a starting box: yields every READY_POLL_S (after the first, at once), True when it is
    time to ask the engine too (the first time and then every ENGINE_POLL_S)."""
    next_ask = 0.0
    while True:
        now = time.monotonic()
        ask = now >= next_ask
        if ask:
            next_ask = now + ENGINE_POLL_S
        yield ask
        time.sleep(READY_POLL_S)


def new_token() -> str:
    return secrets.token_urlsafe(24)


SECRETS_FILE = "secrets.json"  # in a box's control folder: read, then deleted, by its server at start


@dataclass(frozen=True)
class BoxSecrets:
    """The two keys between the host and a box's control server, handed over in a file the server deletes
    before anything else runs in the box (never in its environment, which every process there can read)."""

    token: str  # the host's key to the server, sent with every request
    proof: str  # the server's key to sign its answers; never sent, so whatever takes its place cannot sign

    @classmethod
    def new(cls) -> BoxSecrets:
        return cls(new_token(), new_token())

    def write(self, folder: Path) -> None:
        new_file = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW  # never through what is there
        fd = os.open(folder / SECRETS_FILE, new_file, 0o644)  # 0644: the box's user reads it
        with os.fdopen(fd, "w") as f:
            json.dump({"token": self.token, "proof": self.proof}, f)


@dataclass(frozen=True)
class SandboxSpec:
    """How to start a box: its image and resources, and where it runs when a task says so (`backend`;
    None: the run's `sandbox.backend`). Boxes of several specs, on several backends, share one pool."""

    image: str = "cua-sandbox:latest"
    memory_mb: int = 1536
    cpus: float = 1.0
    pids: int = 512
    screen: tuple[int, int] = (1280, 800)
    backend: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, base: SandboxSpec | None = None) -> SandboxSpec:
        """A task's `sandbox` block, {backend, image, resources: {memory_mb, cpus, pids, screen}}, over `base`
        (the run's defaults; none: this class's): what the block names wins, the rest comes from `base`."""
        base = base or cls()
        d = d or {}
        res = d.get("resources") or {}
        # Validation with file and line is sandbox.tasks'; this only refuses to drop a field silently.
        unknown = sorted(set(d) - {"backend", "image", "resources"}) + sorted(
            f"resources.{k}" for k in set(res) - {"memory_mb", "cpus", "pids", "screen"}
        )
        if unknown:
            raise ValueError(f"sandbox.{unknown[0]}: not a field of a sandbox spec")
        screen = res.get("screen", base.screen)
        if isinstance(screen, str):
            w, h = screen.lower().split("x")
            screen = (int(w), int(h))
        return cls(
            image=d.get("image", base.image),
            memory_mb=int(res.get("memory_mb", base.memory_mb)),
            cpus=float(res.get("cpus", base.cpus)),
            pids=int(res.get("pids", base.pids)),
            screen=(int(screen[0]), int(screen[1])),
            backend=d.get("backend", base.backend),
        )


@dataclass
class Sandbox:
    """A running box. Talk to it through the methods below; `backend.stop` ends it."""

    id: str
    backend: Backend
    client: ControlClient
    spec: SandboxSpec
    created: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    episodes: int = 0
    reusable: bool = True  # until it plays a task of a family that is not `reusable` (task_families.py)

    async def health(self, timeout: float = 5.0) -> dict[str, Any]:
        return await self.client.health(timeout)

    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        return await self.client.screenshot(max_width, max_height)

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self.client.act(action)

    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]:
        """One agent turn on the hot path: the action, then the screenshot, in one round trip."""
        return await self.client.step(action, max_width, max_height)

    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """`source`: the task itself, for families whose rows carry it (an OSWorld file: sandbox/osworld.py)."""
        family = family_of(task_id)  # an unknown family: an error before the box is touched
        self.episodes += 1
        self.reusable &= family.reusable
        return await self.client.reset(task_id, seed, source)

    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]:
        """The task's verdict. `gave_up`: the agent's last action declared the task impossible (OSWorld's
        FAIL: 1 on its infeasible tasks, 0 on the others; other families ignore it)."""
        return await self.client.evaluate(wait_s, gave_up)

    async def oracle(self) -> dict[str, Any]:
        return await self.client.oracle()

    async def close(self) -> None:
        await self.backend.stop(self)


@dataclass(frozen=True)
class BoxState:
    running: bool
    how: str  # "running", "exited with code 137, out of memory"
    killed_through_engine: bool = False  # by an operator or a reaper, not by what ran in the box
    expired: bool = False  # its server stopped itself, nobody having talked to it for its idle time


class Backend:
    """Starts and stops boxes. All boxes carry the owner labels so a reaper can find orphans."""

    name = ""

    CREATE_WAIT_S = 30.0  # what `stop_creating` waits for the engine calls under way (each takes ~1 s)

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id or f"{os.getpid()}-{secrets.token_hex(4)}"
        self._creates = 0  # engine calls making a box, under way
        self._creates_done = threading.Condition()
        self.creating_stopped = False

    @contextlib.contextmanager
    def creating(self, name: str) -> Iterator[None]:
        """Around the engine call that makes box `name`: refused after `stop_creating`, and counted while
        it runs, so `stop_creating` can wait for it (the engine lists a box only once that call returns)."""
        with self._creates_done:
            if self.creating_stopped:
                raise SandboxStartError(f"{name}: not started, the run is removing its boxes")
            self._creates += 1
        try:
            yield
        finally:
            with self._creates_done:
                self._creates -= 1
                self._creates_done.notify_all()

    def stop_creating(self, timeout_s: float = CREATE_WAIT_S) -> bool:
        """Refuse new boxes from now on, and wait at most `timeout_s` for those being created: after it, the
        engine's list holds every box this backend made, so removing the listed boxes leaves none (a run's
        last resort at a forced exit, while its episodes still start boxes). False on the timeout."""
        with self._creates_done:
            self.creating_stopped = True
            done = self._creates_done.wait_for(lambda: self._creates == 0, timeout_s)
        return all([b.stop_creating(timeout_s) for b in self.made_backends()]) and done

    def made_backends(self) -> list[Backend]:
        """The backends this one starts its boxes through (a router's, made on first use): `stop_creating`
        reaches them too, and one made after it must be stopped as it is made (`creating_stopped`)."""
        return []

    async def start(self, spec: SandboxSpec) -> Sandbox:
        raise NotImplementedError

    async def stop(self, sb: Sandbox) -> None:
        """Close the control connection, then remove the box (whatever the close did)."""
        try:
            await sb.client.aclose()
        finally:
            await asyncio.to_thread(self.remove_sync, sb.id)

    async def _attach(self, box_id: str, socket_path: str, keys: BoxSecrets, spec: SandboxSpec) -> Sandbox:
        """The started box once its control server answers; one that never answers is stopped again."""
        client = SandboxClient(keys.token, socket_path=socket_path, proof_key=keys.proof)
        sb = Sandbox(id=box_id, backend=self, client=client, spec=spec, meta={"socket": socket_path})
        try:
            await sb.health(timeout=10)
        except Exception:
            await self.stop(sb)
            raise
        return sb

    def state(self, box_id: str) -> BoxState | None:
        """How the box stands in its engine; None when the engine no longer has it, or cannot say."""
        return None

    def remove_sync(self, box_id: str) -> None:
        """Blocking removal, usable from signal and atexit handlers (no event loop)."""
        raise NotImplementedError

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Boxes of this backend on this host: [{'id', 'labels', 'status'}], optionally of one run."""
        raise NotImplementedError

    def reap(self, all_boxes: bool = False) -> list[str]:
        """Removes boxes whose owner process is gone (or every box with all_boxes); returns their ids."""
        removed = []
        for box in self.list_boxes():
            if all_boxes or not owner_alive(box["labels"]):
                self.remove_sync(box["id"])
                removed.append(box["id"])
        return removed


async def broken_from_inside(backend: Backend, box_id: str, exc: SandboxError) -> BoxBroken | None:
    """`exc` (a box that died or stopped answering) as the doing of what ran in the box: its processes
    ended (the engine logged no kill of it), or it runs with its control loop silent. None when the engine
    killed it for a client (an operator, a reaper), no longer has it, or cannot be asked: an
    infrastructure failure. A BoxBroken (e.g. a disk quota the box went over) already says so."""
    if isinstance(exc, BoxBroken):
        return exc
    try:
        state = await asyncio.to_thread(backend.state, box_id)
        if state is not None and state.running and isinstance(exc, SandboxDied):
            await asyncio.sleep(1.0)  # its server just went: the engine may not have seen the box end yet
            state = await asyncio.to_thread(backend.state, box_id)
    except Exception:
        return None
    if state is None or state.killed_through_engine or state.expired:
        return None
    how = "it runs, with its control loop silent" if state.running else state.how
    return BoxBroken(f"{box_id} broke ({how}) after {exc}")
