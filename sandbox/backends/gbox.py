"""GBox backend: each box is a GBox Linux desktop in the cloud, driven through the official async SDK.

- **Screen**: actions and screenshots go through GBox's own action API (click, drag, move, type,
  press-key, scroll, screenshot). Every wire action (sandbox/server/protocol.py) is validated here by the
  same code the control server uses, so an action is accepted or refused alike on every backend.
- **Tasks**: GBox has no task API. At start the box receives the task harness (`sandbox/__init__.py` and
  `sandbox/server/`, the files the docker image ships) through the file API, and the harness's control
  server is started in the box, on the box's own display, through the command API. Reset, evaluate, the
  oracle and the task's end are then one command each, `python3 -m sandbox.server.call` (sandbox/server/
  call.py), so a task is set up, scored and torn down exactly as in a docker box.
- **Nothing blocks the event loop**: `AsyncGboxClient` only. The synchronous client serves `remove_sync`
  and `list_boxes` (signal/atexit handlers and the reaper script, where no loop runs).
- **No duplicate effects**: the SDK's retries are off (`max_retries=0`): it re-sends POSTs with no
  idempotency key, so a click answered 5xx would be clicked twice and a timed-out create would leave up to
  three boxes. Only reads (get, screenshot, display) are retried here. A create that fails is followed by a
  search for its unique `cua.create_id` label, and whatever it left is terminated.
- **Labels**: every box carries the run's owner labels (sandbox.base.owner_labels), so the pool's reaper
  and scripts/reap_sandboxes.py find it; `expiresIn` is the backstop if every process that could reap it
  is gone.
- **Errors**: GBox's typed errors become the sandbox layer's: an unknown or terminated box is
  SandboxDied; timeouts SandboxTimeout; every other API failure SandboxError (infrastructure: the
  episode is dropped, the box replaced); an action the protocol refuses is SandboxRequestError (the
  policy's fault), before anything is sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import secrets
import shlex
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import gbox_sdk  # imported with this module, not in the event loop: it takes ~0.5 s
from PIL import Image

import sandbox
from sandbox.base import Backend, Sandbox, SandboxSpec, new_token, owner_labels
from sandbox.client import server_error
from sandbox.errors import (
    SandboxDied,
    SandboxError,
    SandboxRequestError,
    SandboxStartError,
    SandboxTimeout,
)
from sandbox.server.display import png_within
from sandbox.server.protocol import ActionError, check_wait_change, normalize_keys
from sandbox.server.xdotool import to_xdotool

SCROLL_PX = 100  # GBox scrolls in pixels; one wheel click of the wire protocol is this many
ARG_BYTES = 64 << 10  # a request body larger than this reaches the box as a file (an OSWorld task's files)
HARNESS_DIR = ".cua"  # in the box's working directory: the harness, its socket and its log
CONTROL_SOCKET = f"{HARNESS_DIR}/control.sock"
READ_RETRIES = 2  # for idempotent reads only
NO_DISPLAY = "the box has no DISPLAY for its commands: export it in sandbox.gbox_setup_command"

# X keysyms of the wire protocol (normalize_keys' output) -> GBox's press-key names.
_GBOX_KEYS: dict[str, str] = {
    "ctrl": "control",
    "alt": "alt",
    "shift": "shift",
    "super": "meta",
    "Return": "enter",
    "KP_Enter": "numpadEnter",
    "Escape": "escape",
    "Tab": "tab",
    "BackSpace": "backspace",
    "Delete": "delete",
    "Insert": "insert",
    "space": "space",
    "Up": "arrowUp",
    "Down": "arrowDown",
    "Left": "arrowLeft",
    "Right": "arrowRight",
    "Home": "home",
    "End": "end",
    "Prior": "pageUp",
    "Next": "pageDown",
    "Caps_Lock": "capsLock",
    "Num_Lock": "numLock",
    "Scroll_Lock": "scrollLock",
    "Pause": "pause",
    "Print": "printScreen",
    "semicolon": ";",
    "equal": "=",
    "comma": ",",
    "minus": "-",
    "period": ".",
    "slash": "/",
    "grave": "`",
    "bracketleft": "[",
    "backslash": "\\",
    "bracketright": "]",
    "apostrophe": "'",
    **{f"F{i}": f"f{i}" for i in range(1, 13)},
    **{f"KP_{i}": f"numpad{i}" for i in range(10)},
}


def gbox_keys(keys: Any) -> list[str]:
    """A wire `keys` value as GBox press-key names; a key GBox cannot press is the policy's error."""
    out = []
    for sym in normalize_keys(keys).split("+"):
        if len(sym) == 1 and sym.isascii() and sym.isalnum():
            # GBox names lower-case letters only: a capital is shift and its letter.
            out += ["shift", sym.lower()] if sym.isupper() and "shift" not in out else [sym.lower()]
        elif sym in _GBOX_KEYS:
            out.append(_GBOX_KEYS[sym])
        else:
            raise ActionError(f"key {sym!r} has no GBox press-key name")
    return out


def harness_tarball() -> bytes:
    """The task harness as a gzipped tar: the files the docker image ships (scripts/build_sandbox_image.sh)."""
    root = Path(sandbox.__file__).resolve().parent
    files = [root / "__init__.py", *sorted((root / "server").rglob("*.py"))]
    buf = io.BytesIO()
    # gzip's own header holds a time too: 0, so two builds of the same files are the same bytes
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for f in files:
            info = tar.gettarinfo(str(f), arcname=str(f.relative_to(root.parent)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with f.open("rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def sandbox_error(exc: Exception, what: str) -> SandboxError:
    """A GBox SDK error as the sandbox layer's infrastructure error."""
    if isinstance(exc, gbox_sdk.APITimeoutError):
        return SandboxTimeout(f"{what}: GBox did not answer in time")
    if isinstance(exc, gbox_sdk.NotFoundError):
        return SandboxDied(f"{what}: the box is gone ({exc})")
    if isinstance(exc, gbox_sdk.APIConnectionError):
        return SandboxDied(f"{what}: GBox unreachable: {exc}")
    if isinstance(exc, gbox_sdk.AuthenticationError | gbox_sdk.PermissionDeniedError):
        return SandboxError(f"{what}: GBox refused the API key (GBOX_API_KEY): {exc}")
    if isinstance(exc, gbox_sdk.APIStatusError):
        return SandboxError(f"{what}: GBox answered {exc.status_code}: {exc}")
    return SandboxError(f"{what}: {type(exc).__name__}: {exc}")


class GboxBoxClient:
    """A box's ControlClient (sandbox/client.py) over GBox's API."""

    def __init__(self, backend: GboxBackend, box_id: str, token: str, screen: tuple[int, int]) -> None:
        self.backend, self.box_id, self.token, self.screen = backend, box_id, token, screen
        self.where = f"gbox box {box_id}"

    @property
    def _api(self):
        return self.backend.aclient().v1.boxes

    async def _read(self, what: str, call):
        """An idempotent request, retried on server errors and lost connections."""
        for attempt in range(READ_RETRIES + 1):
            try:
                return await call()
            except (
                gbox_sdk.InternalServerError,
                gbox_sdk.APIConnectionError,
                gbox_sdk.RateLimitError,
            ) as exc:
                if attempt == READ_RETRIES:
                    raise sandbox_error(exc, what) from exc
                await asyncio.sleep(0.5 * 2**attempt)
            except gbox_sdk.GboxClientError as exc:
                raise sandbox_error(exc, what) from exc
        raise AssertionError("unreachable")

    async def _once(self, what: str, call):
        """A request with an effect: sent once, never retried."""
        try:
            return await call()
        except gbox_sdk.GboxClientError as exc:
            raise sandbox_error(exc, what) from exc

    async def call(self, method: str, path: str, body: Any = None, timeout: float = 120.0) -> dict[str, Any]:
        """A request to the harness's control server, through one command in the box."""
        cmd = f"python3 -m sandbox.server.call {method} {path}"
        if body is not None:
            data = json.dumps(body)
            if len(data) > ARG_BYTES:  # Linux caps one argument at 128 KiB: a large body goes as a file
                name = f"{HARNESS_DIR}/body-{uuid.uuid4().hex}.json"
                await self._once(
                    f"{self.where}: upload {path} body",
                    lambda: self._api.fs.write(self.box_id, path=name, content=data),
                )
                cmd += " " + shlex.quote(f"@{name}")
            else:
                cmd += " " + shlex.quote(data)
        out = await self._once(
            f"{self.where}: {method} {path}",
            lambda: self._api.execute_commands(
                self.box_id,
                command=cmd,
                envs=self.backend.harness_env(self.token, timeout),
                api_timeout=_duration(timeout + 5),
                timeout=timeout + 30,
            ),
        )
        try:
            answer = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if not isinstance(answer, dict) or "status" not in answer:
            raise SandboxError(
                f"{self.where}: {method} {path}: no answer from the harness (exit {out.exit_code}): "
                f"{(out.stderr or out.stdout)[-1500:]}"
            )
        status, reply = answer["status"], answer.get("body")
        if status is None:
            raise SandboxDied(f"{self.where}: {answer.get('error', 'control server unreachable')}")
        if status >= 400:
            msg = reply.get("error", reply) if isinstance(reply, dict) else reply
            raise server_error(status, str(msg), f"{self.where}: {method} {path}")
        return reply

    # -- the Sandbox interface -------------------------------------------------------------------
    async def health(self, timeout: float = 5.0) -> dict[str, Any]:
        box = await self._read(f"{self.where}: get", lambda: self._api.retrieve(self.box_id, timeout=timeout))
        if box.status != "running":
            raise SandboxDied(f"{self.where} is {box.status}" + (f" ({box.reason})" if box.reason else ""))
        return await self.call("GET", "/health", timeout=max(timeout, 10.0))

    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        shot = await self._read(
            f"{self.where}: screenshot",
            lambda: self._api.actions.screenshot(self.box_id, output_format="base64"),
        )
        head, _, data = shot.uri.partition(",")
        if not head.startswith("data:image/") or not data:
            raise SandboxError(f"{self.where}: screenshot is not a data URI ({shot.uri[:60]!r})")

        def decode_and_fit() -> bytes:  # 20-50 ms of CPU for a full screen: not in the event loop
            img = Image.open(io.BytesIO(base64.b64decode(data)))
            return png_within(img.convert("RGB"), max_width, max_height)

        return await asyncio.to_thread(decode_and_fit)

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        try:  # validated as the control server validates it: refused alike on every backend
            cmd = to_xdotool(action, *self.screen)
            wait_change = check_wait_change(action)
            keys = gbox_keys(action.get("keys")) if cmd.type == "key" else []
        except ActionError as exc:
            raise SandboxRequestError(400, str(exc)) from None
        t0 = time.monotonic()
        before = await self._digest() if wait_change else b""
        await self._send(cmd.type, action, keys, cmd.wait_s)
        result: dict[str, Any] = {"ok": True, "type": cmd.type}
        if wait_change:
            result["changed"] = await self._wait_for_change(before, wait_change)
        result["elapsed_ms"] = round((time.monotonic() - t0) * 1000, 1)
        return result

    async def _send(self, kind: str, a: dict[str, Any], keys: list[str], wait_s: float) -> None:
        acts = self._api.actions
        xy = {"x": round(a.get("x", 0)), "y": round(a.get("y", 0))}
        if kind in ("click", "double_click", "right_click"):
            button = a.get("button", "right" if kind == "right_click" else "left")
            send, kw = acts.click, {**xy, "button": button, "double": kind == "double_click"}
        elif kind == "move":
            send, kw = acts.move, xy
        elif kind == "drag":
            send, kw = acts.drag, {"start": xy, "end": {"x": round(a["to_x"]), "y": round(a["to_y"])}}
        elif kind == "scroll":
            dx, dy = round(a.get("dx", 0)), round(a.get("dy", 0))
            send, kw = acts.scroll, {**xy, "scroll_x": dx * SCROLL_PX, "scroll_y": dy * SCROLL_PX}
        elif kind == "type":
            send, kw = acts.type, {"text": a["text"]}
        elif kind == "key":
            send, kw = acts.press_key, {"keys": keys, "combination": True}
        else:  # wait: GBox has no such action; the box just runs on
            await asyncio.sleep(wait_s)
            return
        await self._once(f"{self.where}: {kind}", lambda: send(self.box_id, **kw))

    async def _digest(self) -> bytes:
        return hashlib.blake2b(await self.screenshot(), digest_size=16).digest()

    async def _wait_for_change(self, before: bytes, timeout: float) -> bool:
        """The screen changed within `timeout` (by screenshots: GBox has no change notification)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self._digest() != before:
                return True
            await asyncio.sleep(0.1)
        return False

    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]:
        result = await self.act(action)
        status, png = await asyncio.gather(
            self.call("GET", "/task/status", timeout=30.0), self.screenshot(max_width, max_height)
        )
        result["task_done"] = bool(status.get("task_done"))
        return result, png

    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body = {"task_id": task_id, "seed": seed, **({"osworld": source} if source is not None else {})}
        return await self.call("POST", "/task/reset", body, timeout=90.0)

    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]:
        body = {"wait_s": wait_s, **({"gave_up": True} if gave_up else {})}
        return await self.call("POST", "/task/evaluate", body, timeout=60.0)

    async def oracle(self) -> dict[str, Any]:
        return await self.call("GET", "/task/oracle", timeout=60.0)

    async def aclose(self) -> None:
        pass  # the HTTP client is the backend's, shared by its boxes


class GboxBackend(Backend):
    """Boxes on GBox. `api_key`/`base_url`: default GBOX_API_KEY / GBOX_CLIENT_BASE_URL (the SDK's own)."""

    name = "gbox"

    def __init__(
        self,
        run_id: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        expires_in_s: float = 3600.0,
        create_timeout_s: float = 120.0,
        start_timeout_s: float = 90.0,
        setup_command: str = "",
    ) -> None:
        super().__init__(run_id)
        self.api_key = api_key or os.environ.get("GBOX_API_KEY") or ""
        self.base_url = base_url or os.environ.get("GBOX_CLIENT_BASE_URL") or None
        if not self.api_key:
            raise SandboxStartError("the gbox backend needs an API key: set GBOX_API_KEY (env or .env)")
        self.expires_in_s, self.create_timeout_s = expires_in_s, create_timeout_s
        self.start_timeout_s = start_timeout_s
        # Run in each new box before the harness starts (e.g. installing chromium, xdotool and
        # requirements/sandbox.txt where the box's image lacks them).
        self.setup_command = setup_command
        self._aclients: dict[int, Any] = {}
        self._harness: bytes | None = None

    # -- clients ----------------------------------------------------------------------------------
    def aclient(self):
        """The async client of the running event loop (an httpx client belongs to one loop)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(id(loop))
        if client is None:
            client = gbox_sdk.AsyncGboxClient(
                api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=60.0
            )
            self._aclients[id(loop)] = client
        return client

    def client(self):
        return gbox_sdk.GboxClient(api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=60.0)

    def harness_env(self, token: str, timeout: float = 120.0) -> dict[str, str]:
        return {
            "PYTHONPATH": f"{HARNESS_DIR}/harness",
            "CUA_CONTROL_SOCKET": CONTROL_SOCKET,
            "CUA_SANDBOX_TOKEN": token,
            "CUA_CALL_TIMEOUT": str(timeout),
        }

    # -- start and stop ---------------------------------------------------------------------------
    async def start(self, spec: SandboxSpec) -> Sandbox:
        boxes = self.aclient().v1.boxes
        create_id = secrets.token_hex(8)
        labels = {**owner_labels(self.run_id), "cua.backend": "gbox", "cua.create_id": create_id}
        try:
            with self.creating(f"gbox box {create_id}"):
                box = await boxes.create_linux(
                    config={"expiresIn": _duration(self.expires_in_s), "labels": labels},
                    api_timeout=_duration(self.create_timeout_s),
                    wait=True,
                    timeout=self.create_timeout_s + 30,
                )
        except gbox_sdk.GboxClientError as exc:
            # The create may have made a box anyway (a lost answer): find it by its label, end it.
            await self._terminate_created(create_id)
            raise SandboxStartError(str(sandbox_error(exc, "gbox create"))) from exc
        try:
            if box.status != "running":
                raise SandboxStartError(f"gbox box {box.id} is {box.status} after create")
            return await self._bootstrap(box.id, spec)
        except BaseException:
            await self._terminate(box.id)
            raise

    async def _bootstrap(self, box_id: str, spec: SandboxSpec) -> Sandbox:
        """Upload the harness, start its control server on the box's display, wait for it to answer."""
        boxes = self.aclient().v1.boxes
        what = f"gbox box {box_id}"
        try:
            display = await boxes.display(box_id)
            screen = (int(display.resolution.width), int(display.resolution.height))
            if self._harness is None:
                self._harness = await asyncio.to_thread(harness_tarball)
            await boxes.fs.write(box_id, path=f"{HARNESS_DIR}/harness.tar.gz", content=self._harness)
            token = new_token()
            start = (
                f"mkdir -p {HARNESS_DIR}/harness && tar xzf {HARNESS_DIR}/harness.tar.gz -C {HARNESS_DIR}/harness"
                + (f" && {{ {self.setup_command} ; }}" if self.setup_command else "")
                # The box's own screen, which GBox's actions drive (the setup command may export it).
                + f' && : "${{DISPLAY:?{NO_DISPLAY}}}"'
                + f' && (nohup python3 -m sandbox.server --socket {CONTROL_SOCKET} --display "$DISPLAY"'
                f" --width {screen[0]} --height {screen[1]} > {HARNESS_DIR}/server.log 2>&1 &)"
            )
            out = await boxes.execute_commands(
                box_id,
                command=start,
                # the server signs its answers with this key; the harness's caller runs in the box too, so
                # GBox answers are not checked (docker and local boxes are: sandbox/client.py)
                envs={**self.harness_env(token), "CUA_SANDBOX_PROOF": new_token()},
                api_timeout=_duration(self.start_timeout_s),
                timeout=self.start_timeout_s + 30,
            )
        except gbox_sdk.GboxClientError as exc:
            raise SandboxStartError(str(sandbox_error(exc, f"{what}: harness"))) from exc
        if out.exit_code != 0:
            raise SandboxStartError(
                f"{what}: harness did not install (exit {out.exit_code}): {out.stderr[-1500:]}"
            )
        client = GboxBoxClient(self, box_id, token, screen)
        sb = Sandbox(id=box_id, backend=self, client=client, spec=spec, meta={"screen": screen})
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                await client.call("GET", "/health", timeout=10.0)
                return sb
            except SandboxDied:  # not listening yet
                if time.monotonic() > deadline:
                    log = await boxes.execute_commands(
                        box_id, command=f"tail -c 2000 {HARNESS_DIR}/server.log"
                    )
                    raise SandboxStartError(
                        f"{what}: the harness's server did not start in {self.start_timeout_s:.0f} s:\n{log.stdout}"
                    ) from None
                await asyncio.sleep(0.3)

    async def stop(self, sb: Sandbox) -> None:
        await self._terminate(sb.id)

    async def _terminate(self, box_id: str) -> None:
        with contextlib.suppress(gbox_sdk.NotFoundError):  # already gone
            await self.aclient().v1.boxes.terminate(box_id, wait=False)

    async def _terminate_created(self, create_id: str) -> None:
        try:
            found = await self.aclient().v1.boxes.list(
                labels={"cua.create_id": create_id}, status=["running", "pending"]
            )
        except gbox_sdk.GboxClientError:
            return  # GBox unreachable: expiresIn ends the box, and the reaper finds it by its run label
        for box in found.data:
            await self._terminate(box.id)

    # -- reaping (no event loop here) -------------------------------------------------------------
    def remove_sync(self, box_id: str) -> None:
        with contextlib.suppress(gbox_sdk.NotFoundError):  # already gone
            self.client().v1.boxes.terminate(box_id, wait=False)

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        labels = {"cua.backend": "gbox", **({"cua.run_id": run_id} if run_id else {})}
        api = self.client().v1.boxes
        out, page = [], 1
        while True:
            resp = api.list(labels=labels, status=["running", "pending"], page=page, page_size=100)
            for box in resp.data:
                out.append({"id": box.id, "labels": dict(box.config.labels or {}), "status": box.status})
            if page * resp.page_size >= resp.total or not resp.data:
                return out
            page += 1
