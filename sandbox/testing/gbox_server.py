"""A local stand-in for the GBox cloud API (the part gbox-sdk 0.1.0a41 uses for Linux boxes).

    python -m sandbox.testing.gbox_server --port 0 --api-key KEY --ready-file F [--state-dir D]

Each GBox box is one real local desktop (a LocalBackend box: Xvfb + our control server), so the real SDK
(`AsyncGboxClient(base_url="http://127.0.0.1:PORT/api/v1/")`) drives real input and real screenshots.
Routes under /api/v1 follow the SDK's request and response types (camelCase JSON); errors are
`{"statusCode", "message", "error"}`. Routes under /_fake inject faults and expose what happened, for tests.
Once listening, the server writes {"port", "pid"} to the ready file; on SIGTERM/SIGINT it terminates every
box (desktop and command sessions) before exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hmac
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
import string
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal, TypeVar

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from sandbox.backends.local import LocalBackend, host_python, kill_session
from sandbox.base import Sandbox, SandboxSpec
from sandbox.errors import SandboxDied, SandboxError, SandboxRequestError

SCROLL_PX_PER_CLICK = 100  # pixels of a GBox scroll per wheel click of our `scroll` action
MAX_SCROLL_CLICKS = 50
SCROLL_DISTANCES = {"tiny": 100, "short": 300, "medium": 600, "long": 1000}
DEFAULT_CREATE_TIMEOUT, MAX_CREATE_TIMEOUT_S = "30s", 300.0
DEFAULT_EXPIRES_IN = "60m"
DEFAULT_COMMAND_TIMEOUT = "30s"
DEFAULT_PAGE_SIZE = 10
ALL_PHASES = ("before", "after", "trace")
SPEC = SandboxSpec()

# ------------------------------------------------------------------------------------------ durations

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration (unsigned): '500ms', '30s', '1m30s', '0' -> seconds; ValueError otherwise."""
    if text == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r} (expected e.g. '500ms', '30s', '2m', '1h')")
        total += float(m[1]) * _UNIT_S[m[2]]
        pos = m.end()
    if pos == 0:
        raise ValueError("empty duration")
    return total


# ------------------------------------------------------------------------------------------ keys

# The SDK's press-key enum (action_press_key_params.KeysType) -> X keysyms our `key` action accepts.
KEYSYMS: dict[str, str] = {
    **{c: c for c in string.ascii_lowercase + string.digits},
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
    **{f"numpad{i}": f"KP_{i}" for i in range(10)},
    "control": "ctrl",
    "alt": "alt",
    "option": "alt",
    "shift": "shift",
    "meta": "super",
    "win": "super",
    "cmd": "super",
    "arrowUp": "Up",
    "arrowDown": "Down",
    "arrowLeft": "Left",
    "arrowRight": "Right",
    "home": "Home",
    "end": "End",
    "pageUp": "Prior",
    "pageDown": "Next",
    "enter": "Return",
    "space": "space",
    "tab": "Tab",
    "escape": "Escape",
    "backspace": "BackSpace",
    "delete": "Delete",
    "insert": "Insert",
    "capsLock": "Caps_Lock",
    "numLock": "Num_Lock",
    "scrollLock": "Scroll_Lock",
    "pause": "Pause",
    "printScreen": "Print",
    ";": "semicolon",
    "=": "equal",
    ",": "comma",
    "-": "minus",
    ".": "period",
    "/": "slash",
    "`": "grave",
    "[": "bracketleft",
    "\\": "backslash",
    "]": "bracketright",
    "'": "apostrophe",
    "numpadAdd": "KP_Add",
    "numpadSubtract": "KP_Subtract",
    "numpadMultiply": "KP_Multiply",
    "numpadDivide": "KP_Divide",
    "numpadDecimal": "KP_Decimal",
    "numpadEnter": "KP_Enter",
    "numpadEqual": "KP_Equal",
    "volumeUp": "XF86AudioRaiseVolume",
    "volumeDown": "XF86AudioLowerVolume",
    "volumeMute": "XF86AudioMute",
    "mediaPlayPause": "XF86AudioPlay",
    "mediaStop": "XF86AudioStop",
    "mediaNextTrack": "XF86AudioNext",
    "mediaPreviousTrack": "XF86AudioPrev",
}

# ------------------------------------------------------------------------------------------ request bodies


class _Body(BaseModel):
    # The SDK also sends fields the fake has no use for (deprecated screenshot options, ...): ignore them.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class CreateConfig(_Body):
    expires_in: str = Field(DEFAULT_EXPIRES_IN, alias="expiresIn")
    labels: dict[str, str] = {}
    envs: dict[str, str] = {}


class CreateBody(_Body):
    config: CreateConfig = CreateConfig()
    timeout: str = DEFAULT_CREATE_TIMEOUT
    wait: bool = True


class Point(_Body):
    x: float
    y: float


class ShotOptions(_Body):
    phases: list[Literal["before", "after", "trace"]] = list(ALL_PHASES)
    delay: str = "500ms"
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")


class ActionOptions(_Body):
    screenshot: bool | ShotOptions | None = None


class ActionBody(_Body):
    options: ActionOptions | None = None
    include_screenshot: bool = Field(False, alias="includeScreenshot")
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")
    screenshot_delay: str = Field("500ms", alias="screenshotDelay")


class ClickBody(ActionBody):
    x: float | None = None
    y: float | None = None
    button: Literal["left", "right", "middle"] = "left"
    double: bool = False


class MoveBody(ActionBody):
    x: float
    y: float


class DragBody(ActionBody):
    start: Point | str | None = None
    end: Point | str | None = None
    path: list[Point] | None = None


class TypeBody(ActionBody):
    text: str
    mode: Literal["append", "replace"] = "append"
    press_enter: bool = Field(False, alias="pressEnter")


class PressKeyBody(ActionBody):
    keys: list[str]
    combination: bool = False


class ScrollBody(ActionBody):
    x: float | None = None
    y: float | None = None
    scroll_x: float | None = Field(None, alias="scrollX")
    scroll_y: float | None = Field(None, alias="scrollY")
    direction: Literal["up", "down", "left", "right"] | None = None
    distance: float | Literal["tiny", "short", "medium", "long"] | None = None


class Clip(_Body):
    x: float
    y: float
    width: float
    height: float


class ScreenshotBody(_Body):
    clip: Clip | None = None
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")


class CommandBody(_Body):
    command: str
    envs: dict[str, Any] = {}
    timeout: str = DEFAULT_COMMAND_TIMEOUT
    working_dir: str | None = Field(None, alias="workingDir")


class FaultsBody(_Body):
    create_delay_s: float | None = Field(None, ge=0)
    action_error_after: int | None = Field(None, ge=0)


# ------------------------------------------------------------------------------------------ errors


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> JSONResponse:
    body = {"statusCode": status, "message": message, "error": HTTPStatus(status).phrase}
    return JSONResponse(body, status_code=status)


def _describe(exc: ValidationError | RequestValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in list(exc.errors())[:5]
    )


M = TypeVar("M", bound=BaseModel)


async def _json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise ApiError(400, "request body is not valid JSON") from None


def _parse(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, _describe(exc)) from None


def _duration(text: str, name: str, max_s: float | None = None) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ApiError(400, f"{name}: {exc}") from None
    if max_s is not None and seconds > max_s:
        raise ApiError(400, f"{name}: at most {max_s:g}s, got {text!r}")
    return seconds


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------------------ boxes


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
            "createdAt": _iso(self.created),
            "updatedAt": _iso(self.updated),
            "expiresAt": _iso(self.expires),
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
        timeout = _duration(body.timeout, "timeout", MAX_CREATE_TIMEOUT_S)
        expires_in = _duration(body.config.expires_in, "config.expiresIn")
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

    # -- commands and files
    async def run_command(self, box: FakeBox, body: CommandBody) -> dict[str, Any]:
        timeout = _duration(body.timeout, "timeout")
        assert box.home is not None
        env = {k: v for k, v in os.environ.items() if k != "DISPLAY" and not k.startswith("CUA_SANDBOX_")}
        # The sandbox interpreter first on PATH: `python3` has what a real box has preinstalled.
        path = f"{Path(host_python()).parent}{os.pathsep}{env.get('PATH', '')}"
        env.update(DISPLAY=box.display, HOME=str(box.home), PATH=path)
        env.update(box.envs)
        env.update({k: str(v) for k, v in body.envs.items()})
        cwd = box.home / body.working_dir if body.working_dir else box.home  # relative: to the home
        if not cwd.is_dir():
            raise ApiError(400, f"workingDir {str(cwd)!r} is not a directory")
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            body.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        box.sessions.add(proc.pid)  # its session id: background children die with the box
        if box.status != "running":  # terminated or killed while we spawned
            await asyncio.to_thread(kill_session, proc.pid, 0)
        out, err = bytearray(), bytearray()

        async def drain(stream: asyncio.StreamReader | None, buf: bytearray) -> None:
            assert stream is not None
            while chunk := await stream.read(1 << 16):
                buf.extend(chunk)

        # Done when both pipes reach EOF and bash has exited (a redirected background child holds neither).
        finished = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err), proc.wait())
        try:
            await asyncio.wait_for(asyncio.shield(finished), timeout)
            code = proc.returncode or 0
        except TimeoutError:
            await asyncio.to_thread(kill_session, proc.pid, 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(finished), 5.0)
            code = 124
        finally:
            if not finished.done():  # the request was cancelled: stop reading, the box's end kills it
                finished.cancel()
                finished.add_done_callback(lambda f: f.cancelled() or f.exception())
        if code < 0:  # killed by a signal: report it as a shell would
            code = 128 - code
        return {
            "exitCode": code,
            "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"),
        }

    def fs_path(self, box: FakeBox, path: str, working_dir: str | None) -> Path:
        assert box.home is not None
        base = box.home / working_dir if working_dir else box.home
        # realpath: neither '..' nor a symlink may lead out of the home folder.
        target = Path(os.path.realpath(Path(path) if path.startswith("/") else base / path))
        home = Path(os.path.realpath(box.home))
        if not target.is_relative_to(home):
            raise ApiError(403, f"the fake only allows paths inside the box's home {str(box.home)!r}")
        return target

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


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _no_storage(output_format: str) -> None:
    if output_format == "storageKey":
        raise ApiError(400, "outputFormat 'storageKey' is not supported by the fake GBox server: use base64")


# ------------------------------------------------------------------------------------------ actions


def _px(v: float) -> int:
    return round(v)


def _clicks(px: float) -> int:
    return max(-MAX_SCROLL_CLICKS, min(MAX_SCROLL_CLICKS, round(px / SCROLL_PX_PER_CLICK)))


def _click(b: ClickBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.x is None or b.y is None:
        raise ApiError(400, "x and y are required (the fake does not resolve natural-language targets)")
    kind = "double_click" if b.double else "right_click" if b.button == "right" else "click"
    return [{"type": kind, "x": _px(b.x), "y": _px(b.y), "button": b.button}]


def _move(b: MoveBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    return [{"type": "move", "x": _px(b.x), "y": _px(b.y)}]


def _drag(b: DragBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.path is not None:
        if len(b.path) < 2:
            raise ApiError(400, "path needs at least 2 points")
        start, end = b.path[0], b.path[-1]  # our drag goes straight from the first to the last point
    elif isinstance(b.start, Point) and isinstance(b.end, Point):
        start, end = b.start, b.end
    else:
        raise ApiError(400, "drag needs start and end points {x, y} or a path (no natural-language targets)")
    return [{"type": "drag", "x": _px(start.x), "y": _px(start.y), "to_x": _px(end.x), "to_y": _px(end.y)}]


def _type(b: TypeBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if b.mode == "replace":
        wire.append({"type": "key", "keys": "ctrl+a"})
        if not b.text:
            wire.append({"type": "key", "keys": "BackSpace"})
    if b.text:
        wire.append({"type": "type", "text": b.text})
    if b.press_enter:
        wire.append({"type": "key", "keys": "Return"})
    return wire


def _press_key(b: PressKeyBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if not b.keys:
        raise ApiError(400, "keys must not be empty")
    for k in b.keys:
        if k not in KEYSYMS:
            raise ApiError(400, f"keys: {k!r} is not a GBox key name")
    syms = [KEYSYMS[k] for k in b.keys]
    if b.combination:
        return [{"type": "key", "keys": "+".join(syms)}]
    return [{"type": "key", "keys": s} for s in syms]


def _scroll(b: ScrollBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.direction is not None:
        w, h = screen
        vertical = b.direction in ("up", "down")
        if b.distance is None:  # from the centre to the screen edge
            dist = (h if vertical else w) / 2
        else:
            dist = SCROLL_DISTANCES[b.distance] if isinstance(b.distance, str) else b.distance
        n = max(1, abs(_clicks(dist)))
        # The SDK's docs: 'up' moves content upward, revealing what is below (a swipe, not a wheel turn).
        dx, dy = {"up": (0, n), "down": (0, -n), "left": (n, 0), "right": (-n, 0)}[b.direction]
        return [{"type": "scroll", "x": w // 2, "y": h // 2, "dx": dx, "dy": dy}]
    if b.x is None or b.y is None or b.scroll_x is None or b.scroll_y is None:
        raise ApiError(400, "scroll needs x, y, scrollX and scrollY, or a direction")
    dx, dy = _clicks(b.scroll_x), _clicks(b.scroll_y)
    if dx == dy == 0:
        return []  # less than half a wheel click: nothing to do
    return [{"type": "scroll", "x": _px(b.x), "y": _px(b.y), "dx": dx, "dy": dy}]


Translator = Callable[[Any, tuple[int, int]], list[dict[str, Any]]]
ACTIONS: dict[str, tuple[type[ActionBody], Translator]] = {
    "click": (ClickBody, _click),
    "move": (MoveBody, _move),
    "drag": (DragBody, _drag),
    "type": (TypeBody, _type),
    "press-key": (PressKeyBody, _press_key),
    "scroll": (ScrollBody, _scroll),
}


def _shot_plan(b: ActionBody) -> tuple[list[str], float] | None:
    """Which screenshots an action asked for (phases, delay before 'after'), or None."""
    shot = b.options.screenshot if b.options else None
    if isinstance(shot, ShotOptions):
        _no_storage(shot.output_format)
        return shot.phases, _duration(shot.delay, "options.screenshot.delay", 30)
    if shot is True or (shot is None and b.include_screenshot):
        _no_storage(b.output_format)
        return list(ALL_PHASES), _duration(b.screenshot_delay, "screenshotDelay", 30)
    return None


# ------------------------------------------------------------------------------------------ the app


def make_app(api_key: str, state_dir: Path) -> FastAPI:
    gbox = FakeGbox(state_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(gbox.reap_expired())
        try:
            yield
        finally:
            reaper.cancel()
            await gbox.close()

    app = FastAPI(title="fake GBox", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.gbox = gbox
    v1 = "/api/v1"

    @app.middleware("http")
    async def auth(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            return _error(401, "Unauthorized")
        return await call_next(request)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _describe(exc))  # NestJS-style 400, never FastAPI's 422

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error(404, f"Cannot {request.method} {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    # -- boxes
    @app.post(f"{v1}/boxes/linux")
    async def create_linux(request: Request) -> dict[str, Any]:
        box = await gbox.create(_parse(CreateBody, await _json(request)))
        return box.to_json()

    @app.get(f"{v1}/boxes/{{box_id}}")
    async def get_box(box_id: str) -> dict[str, Any]:
        return gbox.get(box_id).to_json()

    @app.get(f"{v1}/boxes")
    async def list_boxes(request: Request) -> dict[str, Any]:
        labels: dict[str, str] = {}
        statuses: set[str] = set()
        types: set[str] = set()
        page, page_size = 1, DEFAULT_PAGE_SIZE
        for key, value in request.query_params.multi_items():
            if m := re.fullmatch(r"labels\[(.+)\]", key):
                labels[m[1]] = value
            elif key in ("status", "status[]"):
                statuses.update(s for s in value.split(",") if s)
            elif key in ("type", "type[]"):
                types.update(t for t in value.split(",") if t)
            elif key in ("page", "pageSize"):
                if not value.isdigit() or int(value) < 1:
                    raise ApiError(400, f"{key} must be a positive integer")
                page, page_size = (int(value), page_size) if key == "page" else (page, int(value))
        if bad := statuses - {"all", "pending", "running", "error", "terminated"}:
            raise ApiError(400, f"status: unknown value(s) {sorted(bad)}")
        if bad := types - {"all", "linux", "android"}:
            raise ApiError(400, f"type: unknown value(s) {sorted(bad)}")
        boxes = [
            b
            for b in sorted(gbox.boxes.values(), key=lambda b: b.created, reverse=True)
            if not b.deleted
            and (not statuses or "all" in statuses or b.status in statuses)
            and (not types or types & {"all", "linux"})
            and all(b.labels.get(k) == v for k, v in labels.items())
        ]
        chunk = boxes[(page - 1) * page_size : page * page_size]
        return {
            "data": [b.to_json() for b in chunk],
            "page": page,
            "pageSize": page_size,
            "total": len(boxes),
        }

    @app.post(f"{v1}/boxes/{{box_id}}/terminate")
    async def terminate(box_id: str, request: Request) -> Response:
        await _json(request)  # {wait}: the fake always waits
        await gbox.terminate(gbox.get(box_id))
        return Response(status_code=200)

    @app.get(f"{v1}/boxes/{{box_id}}/display")
    async def display(box_id: str) -> dict[str, Any]:
        box = gbox.live(box_id)
        assert box.sb is not None
        w, h = (await gbox.call(box, box.sb.health()))["screen"]
        orientation = "landscapeLeft" if w >= h else "portrait"  # the SDK has no plain "landscape"
        return {"orientation": orientation, "resolution": {"width": w, "height": h}}

    @app.post(f"{v1}/boxes/{{box_id}}/actions/screenshot")
    async def screenshot(box_id: str, request: Request) -> dict[str, Any]:
        box = gbox.live(box_id)
        body = _parse(ScreenshotBody, await _json(request))
        _no_storage(body.output_format)
        return {"uri": _data_uri(await gbox.png(box, body.clip))}

    @app.post(f"{v1}/boxes/{{box_id}}/actions/{{name}}")
    async def action(box_id: str, name: str, request: Request) -> dict[str, Any]:
        if name not in ACTIONS:
            raise ApiError(404, f"Cannot POST {request.url.path} (action not supported by the fake)")
        box = gbox.live(box_id)
        raw = await _json(request)
        model, translate = ACTIONS[name]
        body = _parse(model, raw)
        wire = translate(body, box.screen)
        plan = _shot_plan(body)
        shots: dict[str, Any] = {}
        if plan and "before" in plan[0]:
            shots["before"] = {"uri": _data_uri(await gbox.png(box))}
        assert box.sb is not None
        for act in wire:
            await gbox.call(box, box.sb.act(act))
        box.actions.append({"name": name, "body": raw})
        if gbox.faults.action_error_after > 0:  # the effect happened; only the answer is lost
            gbox.faults.action_error_after -= 1
            raise ApiError(500, "injected fault: the action was performed but the server failed")
        result: dict[str, Any] = {"actionId": str(uuid.uuid4()), "message": "success"}
        if plan:
            phases, delay = plan
            if {"after", "trace"} & set(phases):
                await asyncio.sleep(delay)
                after = {"uri": _data_uri(await gbox.png(box))}
                shots.update({p: after for p in ("after", "trace") if p in phases})  # trace: no overlay
            result["screenshot"] = shots
        return result

    # -- commands and files
    @app.post(f"{v1}/boxes/{{box_id}}/commands")
    async def commands(box_id: str, request: Request) -> dict[str, Any]:
        box = gbox.live(box_id)
        return await gbox.run_command(box, _parse(CommandBody, await _json(request)))

    @app.get(f"{v1}/boxes/{{box_id}}/fs/read")
    async def fs_read(
        box_id: str, path: str, working_dir: str | None = Query(None, alias="workingDir")
    ) -> dict[str, Any]:
        target = gbox.fs_path(gbox.live(box_id), path, working_dir)
        if not target.exists():
            raise ApiError(404, f"no such file: {path}")
        if not target.is_file():
            raise ApiError(400, f"not a file: {path}")
        return {"content": target.read_bytes().decode(errors="replace")}

    @app.post(f"{v1}/boxes/{{box_id}}/fs/write")
    async def fs_write(box_id: str, request: Request) -> dict[str, Any]:
        box = gbox.live(box_id)
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form()  # bytes content: the SDK sends a file part named content
            path, working_dir, content = form.get("path"), form.get("workingDir"), form.get("content")
            if not isinstance(path, str) or content is None:
                raise ApiError(400, "multipart write needs a path field and a content part")
            data = content.encode() if isinstance(content, str) else await content.read()
            working_dir = working_dir if isinstance(working_dir, str) else None
        else:
            raw = await _json(request)
            if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
                raise ApiError(400, "path: must be a string")
            if not isinstance(raw.get("content"), str):
                raise ApiError(400, "content: must be a string")
            path, working_dir, data = raw["path"], raw.get("workingDir"), raw["content"].encode()
        target = gbox.fs_path(box, path, working_dir)
        if target.is_dir():
            raise ApiError(400, f"{path} is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        st = target.stat()
        return {
            "lastModified": _iso(st.st_mtime),
            "mode": stat.filemode(st.st_mode),
            "name": target.name,
            "path": str(target),
            "size": str(st.st_size),
            "type": "file",
        }

    # -- test-only controls
    @app.post("/_fake/faults")
    async def faults(request: Request) -> dict[str, Any]:
        body = _parse(FaultsBody, await _json(request))
        if body.create_delay_s is not None:
            gbox.faults.create_delay_s = body.create_delay_s
        if body.action_error_after is not None:
            gbox.faults.action_error_after = body.action_error_after
        return vars(gbox.faults)

    @app.get("/_fake/boxes/{box_id}/actions")
    async def actions_log(box_id: str) -> dict[str, Any]:
        box = gbox.boxes.get(box_id)
        if box is None:
            raise ApiError(404, f"box {box_id} not found")
        return {"actions": box.actions}

    @app.post("/_fake/boxes/{box_id}/kill")
    async def kill(box_id: str) -> dict[str, Any]:
        box = gbox.get(box_id)
        await gbox.kill(box)
        return box.to_json()

    @app.get("/_fake/boxes")
    async def all_boxes() -> dict[str, Any]:
        return {
            "boxes": [{"id": b.id, "status": b.status, "deleted": b.deleted} for b in gbox.boxes.values()]
        }

    return app


# ------------------------------------------------------------------------------------------ main


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gbox: FakeGbox) -> None:
        super().__init__(config)
        self.gbox = gbox

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Terminate the boxes before uvicorn waits for in-flight requests: a running command then ends
        # at once instead of holding the shutdown (the lifespan's close is a no-op afterwards).
        await self.gbox.close()
        await super().shutdown(sockets=sockets)


async def _serve(server: uvicorn.Server, sock: socket.socket, ready_file: str | None) -> None:
    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        if ready_file:
            tmp = f"{ready_file}.tmp"
            Path(tmp).write_text(json.dumps({"port": sock.getsockname()[1], "pid": os.getpid()}))
            os.replace(tmp, ready_file)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (see --ready-file)")
    ap.add_argument("--api-key", required=True, help="the Bearer token clients must send")
    ap.add_argument("--ready-file", help='write {"port", "pid"} here once listening')
    ap.add_argument("--state-dir", help="where the local boxes live (default: a fresh temp dir)")
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args(argv)
    state_dir = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="gbox-fake-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    app = make_app(args.api_key, state_dir)
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
    )
    server = _Server(config, app.state.gbox)

    # uvicorn restores the handlers it found and re-raises the signal once it has shut down (boxes
    # terminated): ours only asks for an exit, so the process then ends normally with status 0.
    def request_exit(*_: object) -> None:
        server.should_exit = True

    signal.signal(signal.SIGTERM, request_exit)
    signal.signal(signal.SIGINT, request_exit)
    sock = socket.create_server((args.host, args.port))
    asyncio.run(_serve(server, sock, args.ready_file))
    if not args.state_dir:
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
