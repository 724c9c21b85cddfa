"""The boxes: their registry, life cycle (create, start, terminate, expire, a fault's kill) and the
local desktop behind each (a LocalBackend box: Xvfb + our control server)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from sandbox.backends.local import LocalBackend, kill_session
from sandbox.base import Sandbox, SandboxSpec
from sandbox.errors import SandboxDied, SandboxError, SandboxRequestError
from sandbox.testing.gbox_server.bodies import Clip, CreateBody
from sandbox.testing.gbox_server.wire import ApiError, duration_arg, iso_time

MAX_CREATE_TIMEOUT_S = 300.0
SPEC = SandboxSpec()


@dataclass
class FakeBox:
    id: str
    created: float
    expires: float
    labels: dict[str, str]
    envs: dict[str, str]
    status: str = "pending"  # pending | running | error | terminated
    updated: float = field(default_factory=time.time)
    reason: str | None = None
    sb: Sandbox | None = None  # the local desktop, once started
    home: Path | None = None
    display: str = ""
    screen: tuple[int, int] = SPEC.screen
    sessions: set[int] = field(default_factory=set)  # process sessions of its commands
    actions: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False  # removed by a timed-out create: invisible to the API
    killed: bool = False  # its desktop was killed under it (fault injection)
    start_task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    cleaned: bool = False  # terminate has removed everything

    def set_status(self, status: str, reason: str | None = None) -> None:
        self.status, self.reason, self.updated = status, reason, time.time()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "linux",
            "status": self.status,
            "createdAt": iso_time(self.created),
            "updatedAt": iso_time(self.updated),
            "expiresAt": iso_time(self.expires),
            "config": {
                "cpu": SPEC.cpus,
                "memory": SPEC.memory_mb,
                "storage": 10,
                "os": {"version": "ubuntu-22.04"},
                # Unknown until the local box exists (its folder name is the backend's choice).
                "workingDir": str(self.home) if self.home else "",
                "envs": self.envs,
                "labels": self.labels,
            },
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass
class Faults:
    create_delay_s: float = 0.0
    action_error_after: int = 0


class FakeGbox:
    """The box registry and everything that touches the local desktops."""

    def __init__(self, state_dir: Path) -> None:
        self.backend = LocalBackend(run_id=f"gbox-fake-{os.getpid()}", state_dir=state_dir)
        self.boxes: dict[str, FakeBox] = {}
        self.faults = Faults()

    # -- lookup
    def get(self, box_id: str) -> FakeBox:
        box = self.boxes.get(box_id)
        if box is None or box.deleted:
            raise ApiError(404, f"box {box_id} not found")
        return box

    def live(self, box_id: str) -> FakeBox:
        """A box that can act. Terminated: 404 (never 409, which the SDK retries)."""
        box = self.get(box_id)
        if box.status == "terminated":
            raise ApiError(404, f"box {box_id} is terminated")
        if box.status == "error" or box.killed:
            raise ApiError(500, f"box {box_id} is unreachable ({box.reason or 'error'})")
        if box.status != "running" or box.sb is None:
            raise ApiError(400, f"box {box_id} is not running yet (status {box.status})")
        return box

    async def call(self, box: FakeBox, aw: Awaitable[Any]) -> Any:
        """A request to the local desktop, its failures as API errors."""
        try:
            return await aw
        except SandboxRequestError as exc:
            raise ApiError(400, exc.message) from exc
        except SandboxDied as exc:
            if box.status == "running":
                box.set_status("error", "box unreachable")
            raise ApiError(500, f"box {box.id} is unreachable: {exc}") from exc
        except SandboxError as exc:
            raise ApiError(500, f"box {box.id}: {exc}") from exc

    # -- life cycle
    async def create(self, body: CreateBody) -> FakeBox:
        timeout = duration_arg(body.timeout, "timeout", MAX_CREATE_TIMEOUT_S)
        expires_in = duration_arg(body.config.expires_in, "config.expiresIn")
        now = time.time()
        box = FakeBox(
            id=str(uuid.uuid4()),
            created=now,
            expires=now + expires_in,
            labels=dict(body.config.labels),
            envs=dict(body.config.envs),
        )
        self.boxes[box.id] = box
        box.start_task = asyncio.create_task(self._start(box))
        if not body.wait:
            return box
        await asyncio.wait({box.start_task}, timeout=timeout)
        if box.status == "pending":
            # GBox deletes a box that missed its create timeout; it never counts as the caller's.
            box.deleted = True
            await self.terminate(box, "create timed out")
            raise ApiError(408, f"box {box.id} was not running within {body.timeout}; it was deleted")
        if box.status == "error":
            raise ApiError(500, f"box {box.id}: {box.reason}")
        return box

    async def _start(self, box: FakeBox) -> None:
        try:
            if self.faults.create_delay_s > 0:
                await asyncio.sleep(self.faults.create_delay_s)
            start = asyncio.ensure_future(self.backend.start(SPEC))
            try:
                box.sb = await asyncio.shield(start)
            except asyncio.CancelledError:
                # The start runs in a thread that cannot be interrupted: let it finish, then remove its box.
                with contextlib.suppress(Exception):
                    await self.backend.stop(await start)
                raise
            health = await box.sb.health()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if box.sb is not None:
                with contextlib.suppress(Exception):
                    await self.backend.stop(box.sb)
                box.sb = None
            if box.status == "pending":
                box.set_status("error", f"box failed to start: {exc}")
            return
        box.display, box.screen = health["display"], (int(health["screen"][0]), int(health["screen"][1]))
        box.home = self.backend.state_dir / box.sb.id / "home"
        if box.status == "pending":
            box.set_status("running")

    async def _kill_sessions(self, box: FakeBox) -> None:
        sessions, box.sessions = list(box.sessions), set()
        for sid in sessions:
            await asyncio.to_thread(kill_session, sid, 1.0)

    async def terminate(self, box: FakeBox, reason: str | None = None) -> None:
        """Idempotent; returns once the desktop and every command session are gone."""
        if box.status != "terminated":
            box.set_status("terminated", reason)
        async with box.lock:
            if box.cleaned:
                return
            if box.start_task is not None and not box.start_task.done():
                box.start_task.cancel()
                await asyncio.gather(box.start_task, return_exceptions=True)
            await self._kill_sessions(box)
            if box.sb is not None:
                with contextlib.suppress(Exception):
                    await self.backend.stop(box.sb)
            box.cleaned = True

    async def kill(self, box: FakeBox) -> None:
        """A VM dying: the desktop and its processes vanish, the box is not terminated but unreachable."""
        async with box.lock:
            if box.sb is None or box.cleaned:
                raise ApiError(400, f"box {box.id} has no running desktop to kill")
            box.killed = True
            await self._kill_sessions(box)
            await asyncio.to_thread(self.backend.remove_sync, box.sb.id)
            if box.status != "terminated":
                box.set_status("error", "box unreachable")

    async def reap_expired(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.time()
            due = [b for b in self.boxes.values() if b.status != "terminated" and now >= b.expires]
            await asyncio.gather(*(self.terminate(b, "expired") for b in due), return_exceptions=True)

    async def close(self) -> None:
        await asyncio.gather(*(self.terminate(b) for b in list(self.boxes.values())), return_exceptions=True)

    # -- screenshots
    async def png(self, box: FakeBox, clip: Clip | None = None) -> bytes:
        assert box.sb is not None
        png = await self.call(box, box.sb.screenshot())
        if clip is None:
            return png
        img = Image.open(io.BytesIO(png))
        left, top = max(0, round(clip.x)), max(0, round(clip.y))
        right, bottom = (
            min(img.width, round(clip.x + clip.width)),
            min(img.height, round(clip.y + clip.height)),
        )
        if right <= left or bottom <= top:
            raise ApiError(400, f"clip {clip.model_dump()} is outside the {img.width}x{img.height} screen")
        buf = io.BytesIO()
        img.crop((left, top, right, bottom)).save(buf, format="PNG")
        return buf.getvalue()
