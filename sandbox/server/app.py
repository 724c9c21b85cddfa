"""The in-sandbox HTTP control server (stdlib only).

Routes (all need `Authorization: Bearer <token>`):
  GET  /health                      liveness and screen geometry
  GET  /screenshot?max_width=&max_height=   PNG of the screen, optionally downscaled
  POST /action        {"type": ..., ...}    one typed OS-level action (see xdotool.py; the vocabulary is protocol.py)
  POST /step          {"action": {...}, "max_width": ..}  action then screenshot in one round trip:
                      PNG body, the action's result JSON in the X-Action-Result header
  POST /task/reset    {"task_id": "miniwob/click-test", "seed": 3} -> {"instruction": ...}
  POST /task/evaluate {"wait_s": 0.5}       reward from the task's own verifier
  GET  /task/oracle                          privileged task state (scripted oracles, debugging)
Bad requests get a 4xx JSON {"error": ...}; a failing runtime gets a 500; the server keeps serving.
It listens on a unix socket (the box has no network at all) or on a loopback TCP port.
"""

from __future__ import annotations

import hmac
import json
import os
import socketserver
import threading
import time
import traceback
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from sandbox.server import task_families
from sandbox.server.display import Display, DisplayError
from sandbox.server.protocol import NONCE_HEADER, PROOF_HEADER, check_wait_change, signature
from sandbox.server.runtimes.base import Runtime, TaskError
from sandbox.server.xdotool import ActionError, to_xdotool

MAX_BODY = 1 << 20
MAX_RESET_BODY = 64 << 20  # an OSWorld task's files come with its reset


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Controller:
    """Owns the display and the task runtimes; one request at a time touches them."""

    def __init__(self, display: Display) -> None:
        self.display = display
        self.lock = threading.Lock()
        self.last_request = time.monotonic()  # of an authenticated request (the idle exit, __main__.py)
        self.runtimes: dict[str, Runtime] = {}
        self.active: Runtime | None = None
        self.task_id: str | None = None
        self.started = time.time()

    def _runtime(self, task_id: str) -> Runtime:
        try:
            family = task_families.family_of(task_id)
        except task_families.UnknownTaskFamily as e:
            raise TaskError(str(e)) from None
        if family.name not in self.runtimes:
            self.runtimes[family.name] = task_families.load(family.runtime)(self.display)
        return self.runtimes[family.name]

    def health(self) -> dict[str, Any]:
        xvfb_ok = all(p.poll() is None for p in self.display.procs[:1])
        return {
            "ok": xvfb_ok,
            "display": self.display.name,
            "screen": [self.display.width, self.display.height],
            "task_id": self.task_id,
            "uptime_s": round(time.time() - self.started, 1),
            "pid": os.getpid(),
        }

    def screenshot(self, query: dict[str, list[str]]) -> bytes:
        def dim(name: str) -> int | None:
            if name not in query:
                return None
            try:
                val = int(query[name][0])
            except ValueError:
                raise HTTPError(400, f"'{name}' must be an integer") from None
            if not 16 <= val <= 8192:
                raise HTTPError(400, f"'{name}' must be in [16, 8192]")
            return val

        mw, mh = dim("max_width"), dim("max_height")
        with self.lock:
            return self.display.screenshot_png(mw, mh)

    def action(self, body: Any) -> dict[str, Any]:
        act = to_xdotool(body, self.display.width, self.display.height)
        wait_change = check_wait_change(body)
        t0 = time.monotonic()
        with self.lock:
            before = self.display.frame_digest() if wait_change else b""
            result: dict[str, Any] = {"ok": True, "type": act.type}
            if act.xdotool:
                result.update(self.display.run_input(act.xdotool, act.pointer))
            if act.wait_s:
                time.sleep(act.wait_s)
            if wait_change:
                result["changed"] = self.display.wait_for_change(before, wait_change)
        result["elapsed_ms"] = round((time.monotonic() - t0) * 1000, 1)
        return result

    def step(self, body: Any) -> tuple[dict[str, Any], bytes]:
        if not isinstance(body, dict) or not isinstance(body.get("action"), dict):
            raise ActionError("step body must be {'action': {...}, 'max_width'?: int, 'max_height'?: int}")
        result = self.action(body["action"])
        with self.lock:
            result["task_done"] = self.active is not None and self.active.finished()
        query = {k: [str(body[k])] for k in ("max_width", "max_height") if body.get(k) is not None}
        return result, self.screenshot(query)

    def reset(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise TaskError("body must be a JSON object")
        task_id, seed = body.get("task_id"), body.get("seed", 0)
        if not isinstance(task_id, str) or "/" not in task_id:
            raise TaskError("'task_id' must be a string like 'miniwob/click-test' or 'desktop/editor-save'")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
            raise TaskError("'seed' must be an integer in [0, 2^31)")
        name, source = task_id.split("/", 1)[1], body.get("osworld")
        with self.lock:
            runtime = self._runtime(task_id)
            family = task_families.family_of(task_id)
            if family.task_in_row != (source is not None):
                raise TaskError(
                    f"{task_id}: its row must carry the task ('osworld': {{task, assets}})"
                    if family.task_in_row
                    else f"{task_id}: the box makes {family.name} tasks from the seed; 'osworld' is not taken"
                )
            if self.active is not None and self.active is not runtime:
                self.active.close()  # one app family on screen at a time
            self.active, self.task_id = None, None
            out = runtime.reset(name, seed, source) if family.task_in_row else runtime.reset(name, seed)
            self.active, self.task_id = runtime, task_id
        return {"task_id": task_id, "seed": seed, **out}

    def evaluate(self, body: Any) -> dict[str, Any]:
        wait_s = body.get("wait_s", 0.5) if isinstance(body, dict) else 0.5
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not 0 <= wait_s <= 10:
            raise TaskError("'wait_s' must be a number in [0, 10]")
        with self.lock:
            if self.active is None:
                raise TaskError("no task has been reset")
            # The agent's own verdict that the task cannot be done (its last action, done with failure):
            # OSWorld scores it (`infeasible` tasks); other runtimes score what the task left behind.
            gave_up = isinstance(body, dict) and body.get("gave_up") is True
            if self.active.scores_giving_up:
                return {"task_id": self.task_id, **self.active.evaluate(float(wait_s), gave_up)}  # type: ignore[call-arg]
            return {"task_id": self.task_id, **self.active.evaluate(float(wait_s))}

    def status(self) -> dict[str, Any]:
        """Whether the task ended its episode: what /step reports as task_done, for a client whose
        actions reach the screen another way (the gbox backend acts through GBox's own action API)."""
        with self.lock:
            return {"task_id": self.task_id, "task_done": self.active is not None and self.active.finished()}

    def oracle(self) -> Mapping[str, Any]:
        with self.lock:
            if self.active is None:
                raise TaskError("no task has been reset")
            return self.active.oracle()

    def close(self) -> None:
        for rt in self.runtimes.values():
            rt.close()
        self.display.close()


def make_handler(ctl: Controller, token: str, proof: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client, no reconnect per step
        server_version = "cua-sandbox/1"

        def address_string(self) -> str:  # unix sockets have no peer address
            return "local"

        def log_message(self, format: str, *args: Any) -> None:
            if os.environ.get("CUA_SANDBOX_LOG"):
                super().log_message(format, *args)

        def _send(
            self,
            status: int,
            body: bytes,
            ctype: str = "application/json",
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            nonce = self.headers.get(NONCE_HEADER, "")
            result = (headers or {}).get("X-Action-Result", "")
            self.send_header(PROOF_HEADER, signature(proof, nonce, result, body))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode())

        def _body(self) -> Any:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise HTTPError(400, "bad Content-Length") from None
            limit = MAX_RESET_BODY if urlparse(self.path).path == "/task/reset" else MAX_BODY
            if length > limit:
                self.close_connection = True
                raise HTTPError(413, f"body larger than {limit} bytes")
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            try:
                return json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise HTTPError(400, f"body is not valid JSON: {exc}") from None

        def _dispatch(self, method: str) -> None:
            url = urlparse(self.path)
            try:
                # Read the body before anything can fail so the connection stays in sync.
                body = self._body() if method == "POST" else None
                auth = self.headers.get("Authorization", "")
                if not hmac.compare_digest(auth.encode(), f"Bearer {token}".encode()):
                    raise HTTPError(401, "missing or wrong sandbox token")
                ctl.last_request = time.monotonic()  # only the host's requests keep the box alive
                routes = {
                    ("GET", "/health"): lambda: ctl.health(),
                    ("POST", "/action"): lambda: ctl.action(body),
                    ("POST", "/task/reset"): lambda: ctl.reset(body),
                    ("POST", "/task/evaluate"): lambda: ctl.evaluate(body),
                    ("GET", "/task/oracle"): lambda: ctl.oracle(),
                    ("GET", "/task/status"): lambda: ctl.status(),
                }
                if (method, url.path) == ("POST", "/step"):
                    result, png = ctl.step(body)
                    self._send(200, png, "image/png", {"X-Action-Result": json.dumps(result)})
                    return
                if (method, url.path) == ("GET", "/screenshot"):
                    png = ctl.screenshot(parse_qs(url.query))
                    self._send(200, png, "image/png")
                    return
                fn = routes.get((method, url.path))
                if fn is None:
                    known = {p for _, p in routes} | {"/screenshot", "/step"}
                    raise HTTPError(405 if url.path in known else 404, f"no route {method} {url.path}")
                self._json(200, fn())
            except HTTPError as exc:
                self._json(exc.status, {"error": str(exc)})
            except (ActionError, TaskError) as exc:
                self._json(400, {"error": str(exc)})
            except DisplayError as exc:
                self._json(500, {"error": f"input failed: {exc}"})
            except Exception as exc:
                traceback.print_exc()
                self._json(500, {"error": f"{type(exc).__name__}: {exc}"[:2000]})

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

    return Handler


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):  # type: ignore[override]
        conn, _ = super().get_request()
        return conn, ("local", 0)


def make_server(ctl: Controller, token: str, proof: str, socket_path: str | None, port: int | None):
    handler = make_handler(ctl, token, proof)
    if socket_path:
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        srv = UnixHTTPServer(socket_path, handler)
        os.chmod(socket_path, 0o666)  # the token, not the file mode, is the access check
        return srv
    ThreadingHTTPServer.daemon_threads = True
    return ThreadingHTTPServer(("127.0.0.1", port or 0), handler)
