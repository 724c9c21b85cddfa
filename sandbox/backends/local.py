"""Local backend: Xvfb + the same control server as host processes, one display per sandbox.

For machines without a container engine. There is no isolation beyond a separate display, session and
home folder: use it for development and tests, not for untrusted policies. Each box is its own process
session; stopping or reaping kills the whole session (server, Xvfb, chromium, apps). Boxes also die with
their owner: the server watches the owner pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sandbox
from sandbox.base import (
    MAX_SOCKET_PATH,
    SECRETS_FILE,
    Backend,
    BoxSecrets,
    Sandbox,
    SandboxSpec,
    cua_home,
    owner_labels,
)
from sandbox.errors import SandboxStartError


def host_python() -> str:
    """The interpreter with the server's dependencies (built by scripts/setup_sandbox.sh)."""
    if os.environ.get("CUA_SANDBOX_PYTHON"):
        return os.environ["CUA_SANDBOX_PYTHON"]
    pointer = cua_home() / "sandbox" / "host-python"
    if pointer.is_file():
        path = pointer.read_text().strip()
        if os.path.exists(path):
            return path
    try:
        import mss  # noqa: F401
        import selenium  # noqa: F401

        return sys.executable
    except ImportError:
        raise SandboxStartError(
            "no interpreter for the local sandbox server: run scripts/setup_sandbox.sh "
            "or set CUA_SANDBOX_PYTHON"
        ) from None


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # field 6 of stat: the session id; field 3, "Z": exited, waiting to be reaped by its parent
            # (the session leader is our child until stop() waits for it: it is not alive)
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def kill_session(sid: int, grace: float = 3.0) -> None:
    for sig in (signal.SIGKILL,) if grace <= 0 else (signal.SIGTERM, signal.SIGKILL):
        pids = _session_pids(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _session_pids(sid):
            time.sleep(0.05)


CONTROL_SOCKET = "control.sock"  # in the box's folder


def _box_name() -> str:
    return f"cua-lb-{uuid.uuid4().hex[:12]}"


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self, run_id: str | None = None, start_timeout: float = 60.0, state_dir: Path | None = None
    ) -> None:
        super().__init__(run_id)
        self.start_timeout = start_timeout
        self.state_dir = state_dir or cua_home() / "sandbox" / "local"
        socket_path = len(os.fsencode(self.state_dir / _box_name() / CONTROL_SOCKET))
        if socket_path > MAX_SOCKET_PATH:
            raise ValueError(
                f"sandbox state folder {self.state_dir} is too long: its boxes' control sockets would have"
                f" {socket_path}-byte paths, and a unix socket's is at most {MAX_SOCKET_PATH} bytes"
            )
        self.procs: dict[str, subprocess.Popen] = {}

    def _start_sync(self, spec: SandboxSpec) -> tuple[str, str, BoxSecrets]:
        name = _box_name()
        box = self.state_dir / name
        (box / "home").mkdir(parents=True)
        keys = BoxSecrets.new()
        keys.write(box)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISPLAY", "CUA_SANDBOX_"))}
        env.update(
            CUA_SANDBOX_SECRETS=str(box / SECRETS_FILE),
            CUA_TASK_HOME=str(box / "home"),
            PYTHONPATH=str(Path(sandbox.__file__).resolve().parent.parent),
            PYTHONUNBUFFERED="1",
        )
        sock, ready = box / CONTROL_SOCKET, box / "ready.json"
        with self.creating(name):  # the box exists once its meta.json lists it
            log = open(box / "server.log", "wb")  # noqa: SIM115 - owned by the child
            proc = subprocess.Popen(
                [
                    host_python(),
                    "-m",
                    "sandbox.server",
                    "--socket",
                    str(sock),
                    "--ready-file",
                    str(ready),
                    "--owner-pid",
                    str(os.getpid()),
                    "--width",
                    str(spec.screen[0]),
                    "--height",
                    str(spec.screen[1]),
                ],
                env=env,
                cwd=box / "home",
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            self.procs[name] = proc
            (box / "meta.json").write_text(
                json.dumps({"labels": {**owner_labels(self.run_id), "cua.backend": "local"}, "sid": proc.pid})
            )
        deadline = time.monotonic() + self.start_timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (box / "server.log").read_text(errors="replace")[-2000:]
                self.remove_sync(name)
                raise SandboxStartError(f"{name}: local server did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(0.05)
        return name, str(sock), keys

    async def start(self, spec: SandboxSpec) -> Sandbox:
        name, sock, keys = await asyncio.to_thread(self._start_sync, spec)
        return await self._attach(name, sock, keys, spec)

    def remove_sync(self, box_id: str) -> None:
        box = self.state_dir / box_id
        try:
            sid = json.loads((box / "meta.json").read_text())["sid"]
        except (OSError, ValueError, KeyError):
            sid = None
        proc = self.procs.pop(box_id, None)
        if sid is not None:
            kill_session(sid)
        if proc is not None:
            proc.wait(timeout=10)
        shutil.rmtree(box, ignore_errors=True)

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        out = []
        if not self.state_dir.is_dir():
            return out
        for box in self.state_dir.iterdir():
            try:
                labels = json.loads((box / "meta.json").read_text())["labels"]
            except (OSError, ValueError, KeyError):
                # A half-created box (owner killed during start): an orphan unless very young.
                if time.time() - box.stat().st_mtime > 120:
                    labels = {}
                else:
                    continue
            if run_id is None or labels.get("cua.run_id") == run_id:
                out.append({"id": box.name, "labels": labels, "status": "running"})
        return out

    def close(self) -> None:
        pass
