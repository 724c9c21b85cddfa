"""A Ray cluster of several nodes on this machine, started with `ray start` as on real hosts.

Each node's `ray start` runs in its own session, so its daemons and workers are found by session id and
stopped without touching any other Ray process on the machine (`ray stop` kills every Ray process of the
host by name). Sessions of their own also outlive a killed test run: a watcher (this file, run as a script,
in a session of its own too) stops the cluster once the process that started it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cua_agent.inference.local_server import REPO, free_port
from sandbox.base import process_start_ticks

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 180
SESSIONS = "sessions"  # in the cluster's temp dir: a line per node, the session id of its `ray start`


@dataclass
class RayNode:
    name: str
    sid: int  # session of its `ray start`: raylet, agents, workers


@dataclass
class LocalRayCluster:
    """Head + workers on 127.0.0.1. `gpus` are logical trainer slots (AReaL's launcher asks for GPUs)."""

    temp_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cuaray-")))  # short: sockets
    port: int = field(default_factory=free_port)
    nodes: list[RayNode] = field(default_factory=list)
    watcher: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What `ray start` passes on to the workers of its node."""
        # RAY_AUTH_MODE: set, since a token in ~/.ray/auth_token (left by any `ray.init()` that started a
        # cluster of its own) turns token auth on for the head alone, and the other nodes cannot join
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
        }
        for key in ("RAY_ADDRESS", "WANDB_API_KEY"):
            env.pop(key, None)
        return env

    def start_node(
        self,
        name: str,
        *,
        cpus: int,
        gpus: int,
        resources: dict[str, float] | None = None,
        env: dict[str, str] | None = None,
    ) -> RayNode:
        """`resources`: custom ones (a sandbox machine's slots); `env`: what differs for its processes (the
        Docker engine of a sandbox machine)."""
        common = [
            f"--num-cpus={cpus}",
            f"--num-gpus={gpus}",
            *([f"--resources={json.dumps(resources)}"] if resources else []),
            "--node-ip-address=127.0.0.1",
            "--object-store-memory=100000000",
            f"--dashboard-agent-listen-port={free_port()}",
            "--disable-usage-stats",
        ]
        if not self.nodes:
            role = [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.temp_dir}",
                f"--ray-client-server-port={free_port()}",
                "--include-dashboard=false",
            ]
        else:
            role = [f"--address={self.address}"]
        log = self.temp_dir / f"ray-start-{name}.log"
        with open(log, "wb") as out:
            # cwd elsewhere than the repository: the launcher must not depend on where `ray start` ran.
            proc = subprocess.Popen(
                [RAY, "start", *role, *common],
                cwd=self.temp_dir,
                env={**self.env(), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        node = RayNode(name, proc.pid)
        self.nodes.append(node)
        self._list_sessions()
        if self.watcher is None:
            self.watcher = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    str(os.getpid()),
                    str(process_start_ticks(os.getpid())),
                    str(self.temp_dir),
                ],
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a kill of the test run's process group does not reach it
            )
        if proc.wait(START_TIMEOUT_S) != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{log.read_text(errors='replace')[-3000:]}")
        return node

    def kill_node(self, name: str) -> None:
        """SIGKILL every process of one node (its raylet, agents and workers), as when its machine is lost."""
        node = next(n for n in self.nodes if n.name == name)
        for p in self.processes([node]):
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.nodes.remove(node)
        self._list_sessions()  # its session id may go to another process of the machine later

    def _list_sessions(self) -> None:
        (self.temp_dir / SESSIONS).write_text("".join(f"{n.sid}\n" for n in self.nodes))

    def processes(self, nodes: list[RayNode] | None = None) -> list[psutil.Process]:
        return session_processes({n.sid for n in (self.nodes if nodes is None else nodes)})

    def stop(self, grace_s: float = 3) -> list[str]:
        """SIGTERM every process of the nodes' sessions, SIGKILL what remains after `grace_s` (gcs_server,
        raylet and the runtime-env agent outlast SIGTERM by more than 10 s); returns what survived."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            for p in self.processes():
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            deadline = time.monotonic() + wait_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        left = []
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                left.append(f"{p.pid}: {' '.join(p.cmdline())[:160]}")
        shutil.rmtree(self.temp_dir, ignore_errors=True)  # the watcher's sign to end
        if self.watcher is not None:
            self.watcher.wait(10)
        return left


def watch(owner_pid: int, owner_started: int, temp_dir: Path) -> None:
    """Until the cluster's temp dir goes (a stop): once its owner is gone, stops every node listed there."""
    while temp_dir.is_dir():
        if process_start_ticks(owner_pid) != owner_started:  # gone, or its pid given to another process
            sids = [int(line) for line in (temp_dir / SESSIONS).read_text().split()]
            orphans = LocalRayCluster(temp_dir=temp_dir, port=0, nodes=[RayNode(str(s), s) for s in sids])
            orphans.stop(grace_s=1)
            return
        time.sleep(1)


def session_processes(sids: set[int]) -> list[psutil.Process]:
    """The live processes of these sessions (a node's `ray start` and all it spawned)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) in sids and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


class TrainerWatch:
    """Samples the trainer processes (Ray workers titled ray::run_func): pid -> session (= node)."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["pid", "cmdline"]):
                try:
                    if (p.info["cmdline"] or [""])[0].startswith("ray::run_func"):
                        self.seen[p.pid] = os.getsid(p.pid)
                except (ProcessLookupError, PermissionError, psutil.Error):
                    pass
            self._stop.wait(0.5)

    def __enter__(self) -> TrainerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
