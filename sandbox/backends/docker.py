"""Docker backend (docker-py): Docker Engine, or podman's Docker API (tested against podman here).

Isolation: `network_mode="none"` (no interface but loopback: nothing to egress through), `cap_drop=ALL`,
`no-new-privileges`, a non-root user, memory/CPU/pids limits, `init=True` (reaps chromium's zombies).
Control traffic: with no network there is no port to publish, so the server listens on a unix socket in
a per-box host directory bind-mounted at /run/cua. A published port would need a bridge network (with
egress unless --internal; an internal network with a published port was not measured here), while the
unix socket works with network none and costs no port bookkeeping. One HTTP connection per box, never an
exec per step (each podman exec leaves conmon processes behind for minutes, docs/architecture.md, Containers).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox.base import (
    LABEL,
    SECRETS_FILE,
    Backend,
    BoxSecrets,
    BoxState,
    Sandbox,
    SandboxSpec,
    cua_home,
    owner_labels,
    private_dirs,
    start_polls,
)
from sandbox.errors import SandboxStartError
from sandbox.server.protocol import IDLE_EXIT_CODE

DEFAULT_PODMAN_SOCKET = "/run/cua/podman.sock"
HOST_FORMS = {"unix": "unix:///absolute/path", "tcp": "tcp://127.0.0.1:port"}
LOOPBACK = ("localhost", "127.", "[::1]", "::1")
# Why an engine must be on this machine: a box is controlled through a unix socket in a host folder that the
# engine bind-mounts, and the folder is made here; an engine elsewhere would mount a folder of its own host.
NOT_HERE = (
    "the engine must run on this machine (boxes are controlled through a unix socket in a folder made here and"
    " bind-mounted by the engine)"
)


# A box nobody talks to for an hour stops itself (sandbox.idle_exit_s): far beyond a turn, a model call or a
# training step, it only ends boxes whose trainer vanished where no reaper looks (another machine, a
# killed container).
IDLE_EXIT_S = 3600.0
EVENT_READS = 5  # reads of the engine's event log for a box's end before it counts as unknown
LOG_MAX_SIZE = "10m"  # of a box's engine log (what `podman logs` shows; the start errors quote its tail)


def default_docker_host() -> str:
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    sock = os.environ.get("CUA_PODMAN_SOCKET", DEFAULT_PODMAN_SOCKET)
    if os.path.exists(sock):
        return f"unix://{sock}"
    return "unix:///var/run/docker.sock"


def check_docker_hosts(hosts: list[str] | tuple[str, ...], name: str = "docker_hosts") -> list[str]:
    """Docker endpoint URLs as given; ValueError naming `name[i]` for a bad scheme, form or duplicate."""
    seen: dict[str, int] = {}
    for i, url in enumerate(map(str, hosts)):
        scheme, sep, rest = url.partition("://")
        if not sep:
            raise ValueError(
                f"{name}[{i}]: scheme must be one of {', '.join(HOST_FORMS.values())}; got {url!r}"
            )
        if scheme == "ssh":  # docker-py needs paramiko for it, and an ssh engine is another machine's
            raise ValueError(f"{name}[{i}]: {url!r}: ssh:// engines are not supported: {NOT_HERE}")
        if scheme not in HOST_FORMS:
            raise ValueError(
                f"{name}[{i}]: scheme must be one of {', '.join(HOST_FORMS.values())}; got {url!r}"
            )
        rest = rest if scheme == "unix" else rest.rstrip("/").lower()
        host, _, port = rest.rpartition(":")
        ok = {"unix": rest.startswith("/"), "tcp": bool(host) and port.isdigit()}[scheme]
        if not ok:
            raise ValueError(f"{name}[{i}]: expected {HOST_FORMS[scheme]}, got {url!r}")
        if scheme == "tcp" and not host.startswith(LOOPBACK):
            raise ValueError(
                f"{name}[{i}]: {url!r} is an engine on another machine: {NOT_HERE}; and tcp:// would carry its"
                " API, root on that host, unencrypted. Use its unix socket, or a loopback address."
            )
        key = f"{scheme}://{os.path.normpath(rest) if scheme == 'unix' else rest}"
        if key in seen:
            raise ValueError(f"{name}[{i}]: {url!r} is the same endpoint as {name}[{seen[key]}]")
        seen[key] = i
    return [str(u) for u in hosts]


def endpoint_dir(docker_host: str) -> str:
    """A short folder name per endpoint of this machine (unix socket paths: MAX_SOCKET_PATH bytes): the
    host's name is in it, so machines that share a home folder (NFS) never reap each other's live boxes'
    control folders, which every node's engine would otherwise have in the same place."""
    return "ep-" + hashlib.sha1(f"{socket.gethostname()} {docker_host}".encode()).hexdigest()[:8]


class DockerBackend(Backend):
    name = "docker"

    def __init__(
        self,
        run_id: str | None = None,
        docker_host: str | None = None,
        start_timeout: float = 60.0,
        run_dir: Path | None = None,
        idle_exit_s: float = IDLE_EXIT_S,
    ) -> None:
        """`idle_exit_s`: a box that gets no request for that long stops itself (0: never)."""
        super().__init__(run_id)
        self.idle_exit_s = idle_exit_s
        import docker  # the host-side dependency, only needed for this backend

        self.docker_host = docker_host or default_docker_host()
        (self.docker_host,) = check_docker_hosts(
            [self.docker_host], "docker_host" if docker_host else "DOCKER_HOST"
        )
        self.docker = docker.DockerClient(base_url=self.docker_host, timeout=60)
        self.start_timeout = start_timeout
        self._homes: dict[str, str] = {}  # image -> its HOME
        # A path the Docker daemon can bind-mount on the machine that runs this process (the control socket
        # in it is a unix socket: it does not cross machines). One folder per endpoint, so that reaping one
        # endpoint never removes the sockets of live boxes on another.
        self.run_dir = run_dir or private_dirs(
            cua_home(), cua_home() / "sandbox" / "run" / endpoint_dir(self.docker_host)
        )

    # -- start / stop ------------------------------------------------------------------------------
    def _start_sync(self, spec: SandboxSpec) -> tuple[str, str, BoxSecrets]:
        name = f"cua-sb-{uuid.uuid4().hex[:12]}"
        sock_dir = self.run_dir / name
        sock_dir.mkdir(parents=True)
        sock_dir.chmod(0o777)  # the box's non-root user creates its socket here
        keys = BoxSecrets.new()
        keys.write(sock_dir)
        with self.removed_unless_started(name):
            container = self.docker.containers.run(
                spec.image,
                name=name,
                **self.isolation(spec.memory_mb, spec.cpus, spec.pids),
                read_only=True,  # the image as built; what the box writes is in RAM, within its memory limit
                tmpfs=ram_folders(self._writable_folders(spec.image), spec.memory_mb),
                environment={
                    "CUA_SANDBOX_SECRETS": f"/run/cua/{SECRETS_FILE}",
                    "CUA_SCREEN_WIDTH": str(spec.screen[0]),
                    "CUA_SCREEN_HEIGHT": str(spec.screen[1]),
                    "CUA_SANDBOX_IDLE_EXIT_S": f"{self.idle_exit_s:g}",
                },
                volumes={str(sock_dir): {"bind": "/run/cua", "mode": "rw"}},
            )
        ready = sock_dir / "ready.json"
        deadline = time.monotonic() + self.start_timeout
        for ask_engine in start_polls():
            if ready.exists():
                break
            if time.monotonic() > deadline:
                logs = self._logs(container)
                self.remove_sync(name)
                raise SandboxStartError(f"{name}: server not ready after {self.start_timeout:.0f} s\n{logs}")
            if ask_engine:
                container.reload()
                if container.status in ("exited", "dead"):
                    logs = self._logs(container)
                    self.remove_sync(name)
                    raise SandboxStartError(f"{name} exited during start:\n{logs}")
        json.loads(ready.read_text())  # written atomically by the server once it serves
        lock_control_folder(sock_dir)
        return name, str(sock_dir / "control.sock"), keys

    def _writable_folders(self, image: str) -> list[str]:
        """Where a desktop box writes: /tmp, /var/tmp and its user's home (the image's HOME; /root when the
        image sets none), nothing else."""
        if image not in self._homes:
            import docker.errors

            try:
                env = self.docker.api.inspect_image(image)["Config"].get("Env") or []
            except docker.errors.ImageNotFound:
                raise SandboxStartError(
                    f"image {image!r} is not built on {self.docker_host}: scripts/setup_sandbox.sh builds the "
                    "project's images (`image`; `office_image` for office/... rows)"
                ) from None
            self._homes[image] = dict(e.split("=", 1) for e in env if "=" in e).get("HOME", "/root")
        return sorted({"/tmp", "/var/tmp", self._homes[image]})

    def isolation(self, memory_mb: int, cpus: float, pids: int) -> dict[str, Any]:
        """What every box of this backend runs with (docker-py `containers.run` arguments): no network,
        no capabilities, no privilege gain, memory/CPU/pids limits, an init, the owner labels, and a log
        of at most LOG_MAX_SIZE (a box writing to its own stdout filled the engine's disk)."""
        from docker.types import LogConfig

        mem = f"{memory_mb}m"
        return {
            "log_config": LogConfig(type="json-file", config={"max-size": LOG_MAX_SIZE}),
            "detach": True,
            "labels": {**owner_labels(self.run_id), "cua.backend": "docker"},
            "init": True,
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": mem,
            "memswap_limit": mem,
            "nano_cpus": int(cpus * 1e9),
            "pids_limit": pids,
        }

    def run_as_nobody_on_the_host(self, image: str, **kwargs: Any) -> None:
        """docker-py's `containers.run(image, **kwargs)` in a user namespace under podman: the box's users,
        root included, are an unprivileged range of the host's, so root in a root-owned image (R2E-Gym's)
        is nobody outside it. Docker's API takes no id mapping, so podman's own API creates the box
        (sandbox/backends/libpod.py says why not `userns=auto`). Docker Engine has no per-container mode
        (its daemon-wide `userns-remap` does this for every container): the box runs as the image says."""
        with self.removed_unless_started(kwargs["name"]):
            if not self.is_podman:
                self.docker.containers.run(image, **kwargs)
                return
            from sandbox.backends import libpod

            api = self.docker.api
            created = api._post_json(
                api.base_url + libpod.CREATE_PATH, data=libpod.create_spec(image, kwargs)
            )
            api.start(api._result(created, json=True)["Id"])

    @contextlib.contextmanager
    def removed_unless_started(self, name: str) -> Iterator[None]:
        """Around a box's create and start: a box the engine created but could not start (a limit runc
        cannot set, a hung start) is removed with its control folder; it stayed in the engine's list."""
        try:
            with self.creating(name):
                yield
        except Exception:
            with contextlib.suppress(Exception):
                self.remove_sync(name)
            raise

    @functools.cached_property
    def is_podman(self) -> bool:
        components = self.docker.api.version().get("Components") or []
        return any("podman" in str(c.get("Name", "")).lower() for c in components)

    @staticmethod
    def _logs(container: Any) -> str:
        try:
            return container.logs(tail=30).decode(errors="replace")
        except Exception as exc:
            return f"(no logs: {exc})"

    async def start(self, spec: SandboxSpec) -> Sandbox:
        name, sock, keys = await asyncio.to_thread(self._start_sync, spec)
        return await self._attach(name, sock, keys, spec)

    def is_running(self, box_id: str) -> bool:
        import docker.errors

        try:
            return self.docker.containers.get(box_id).status == "running"
        except docker.errors.NotFound:
            return False

    def layer_dir(self, box_id: str) -> Path | None:
        """The host folder of the box's own layer in the engine's storage (overlay's upper dir), where all
        it writes outside tmpfs and bind mounts lands; None if the engine does not say or this process
        cannot read it. Measured from the host, not through the engine: podman 4.3 hung for good when size
        listings (`ps --size`) met the creation of boxes with a user namespace of their own."""
        data = (self.docker.api.inspect_container(box_id).get("GraphDriver") or {}).get("Data") or {}
        upper = Path(str(data.get("UpperDir") or ""))
        return upper if upper.is_absolute() and os.access(upper, os.R_OK | os.X_OK) else None

    def state(self, box_id: str) -> BoxState | None:
        """How the box stands; None once the engine no longer has it."""
        import docker.errors

        try:
            st = self.docker.api.inspect_container(box_id)["State"]
        except docker.errors.APIError as exc:
            if _gone(exc):
                return None
            raise
        if st.get("Status") == "running":
            return BoxState(True, "running")
        if st.get("ExitCode") == IDLE_EXIT_CODE:
            return BoxState(
                False, f"stopped itself after {self.idle_exit_s:g} s without a request", expired=True
            )
        oom = ", out of memory" if st.get("OOMKilled") else ""
        how = f"{st.get('Status')} with code {st.get('ExitCode')}{oom}"
        return BoxState(False, how, self._killed_through_engine(box_id, st.get("StartedAt") or ""))

    def _killed_through_engine(self, box_id: str, started_at: str) -> bool:
        """Whether an engine client (an operator, a reaper) killed the box: the engine logs a `kill` event
        for that, none for processes that die inside it (RFC 3339 `StartedAt`, to the second). The log is
        read while other boxes' events are written, and a read can come back short: podman 4.3 answered 10
        of 40 reads with nothing while boxes came and went, when each read followed the log for a second
        past now (none of 80 ending 0.1 s past now). So only a read that holds the box's own exit (`die`)
        answers; when EVENT_READS reads all come back short, a kill is not ruled out (True: an
        infrastructure failure, never a reward)."""
        try:
            since = datetime.strptime(started_at[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
        except ValueError:
            since = time.time() - 86400
        for attempt in range(EVENT_READS):
            events = self.docker.api.events(
                since=int(since) - 1,
                until=round(time.time() + 0.1, 3),
                filters={"container": box_id},
                decode=True,
            )
            seen = {e.get("status") or e.get("Action") for e in events}
            if "die" in seen:
                return "kill" in seen
            time.sleep(0.2 * (attempt + 1))
        return True

    def logs(self, box_id: str) -> str:
        import docker.errors

        try:
            return self._logs(self.docker.containers.get(box_id))
        except docker.errors.NotFound:
            return "(the box is gone)"

    def remove_sync(self, box_id: str, settle_s: float = 10.0) -> None:
        """Remove the box; one already gone (another process's reaper got there first) is removed. An
        error's text is not taken on its word (a box's own file names can end up in an engine's message):
        the box counts as gone once the engine no longer knows it, checked for up to `settle_s` while
        another client's removal finishes; else the error is raised."""
        import docker.errors

        deadline = time.monotonic() + settle_s
        while True:
            try:
                self.docker.api.remove_container(box_id, force=True)
                break
            except docker.errors.APIError:
                # podman answers 404 for a box gone, 500 while another client removes it, and 500 (EBUSY on
                # its shm) for a box in a user namespace of its own that it removed all the same (4.3)
                if not self._known(box_id):
                    break
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        remove_control_folder(self.run_dir / box_id)

    def _known(self, box_id: str) -> bool:
        """Whether the engine still lists a box of this name."""
        listed = self.docker.api.containers(all=True, filters={"name": f"^{box_id}$"})
        return any(c["Names"][0].lstrip("/") == box_id for c in listed)

    # -- inventory ------------------------------------------------------------------------------
    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The engine's list alone: docker-py's `containers.list` inspects every container after listing
        them, and one that another process removed in between failed the whole list (podman answers 500,
        not 404), e.g. when every trainer rank's pool reaps the same orphans at start."""
        filters = [f"{LABEL}=1"] + ([f"cua.run_id={run_id}"] if run_id else [])
        found = self.docker.api.containers(all=True, filters={"label": filters})
        return [
            {"id": c["Names"][0].lstrip("/"), "labels": c.get("Labels") or {}, "status": c.get("State")}
            for c in found
        ]

    def reap(self, all_boxes: bool = False) -> list[str]:
        removed = super().reap(all_boxes)
        # Control folders of boxes that no longer exist (e.g. removed by hand). A box that another process
        # (a trainer rank) is starting has its folder before the engine lists it: young folders stay.
        live = {b["id"] for b in self.list_boxes()}
        settled = time.time() - self.start_timeout
        if self.run_dir.is_dir():
            for d in self.run_dir.iterdir():
                if d.name.startswith("cua-sb-") and d.name not in live and _mtime(d) < settled:
                    remove_control_folder(d)
        return removed

    def close(self) -> None:
        self.docker.close()


def ram_folders(paths: list[str], memory_mb: int) -> dict[str, str]:
    """docker-py `tmpfs` for a read-only box: each folder in RAM, at most half the box's memory. A flood of
    one folder ends with ENOSPC; whatever the box writes counts against its memory limit, so floods of
    several end the box (out of memory) at the latest."""
    return {p: f"size={max(memory_mb // 2, 1)}m,mode=1777" for p in paths}


def lock_control_folder(folder: Path) -> None:
    """Once a desktop box serves: its control folder keeps the socket and nothing the box can add to. The
    box's server wrote all it writes there (its socket, the ready file); the ready file goes, and the
    folder becomes read-only, so a process in the box can neither fill the host's disk through it nor put
    another socket in the server's place. (A box user with the host user's uid could undo the mode: the
    compose stack's trainer is root, and rootless engines map box users to other uids.)"""
    (folder / "ready.json").unlink()
    folder.chmod(0o555)


def remove_control_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.chmod(0o700)  # a locked folder's entries can be removed again
    shutil.rmtree(folder, ignore_errors=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # removed meanwhile
        return float("inf")


def _gone(exc: Exception) -> bool:
    """Whether a Docker API error says the container no longer exists (docker: 404; podman: 404, or 500
    while another client's removal is under way)."""
    import docker.errors

    text = str(getattr(exc, "explanation", "") or exc).lower()
    return isinstance(exc, docker.errors.NotFound) or "no such container" in text or "does not exist" in text
