"""Async client of the in-box control server, over a unix socket (default) or loopback TCP."""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from typing import Any, Protocol

import httpx

from sandbox.errors import (
    BoxBroken,
    SandboxDied,
    SandboxError,
    SandboxImpostor,
    SandboxRequestError,
    SandboxTimeout,
)
from sandbox.server.protocol import NONCE_HEADER, PROOF_HEADER, signature


def server_error(status: int, message: str, what: str) -> SandboxError:
    """The control server's error answer as a typed error: 4xx is the request's fault (a malformed action,
    an unknown task), 5xx the box's."""
    if status < 500:
        return SandboxRequestError(status, message)
    return SandboxError(f"{what} failed in the sandbox ({status}): {message}")


class ControlClient(Protocol):
    """What a Sandbox needs from its connection to a box: SandboxClient (the control server's socket) or
    the gbox backend's GboxBoxClient (GBox's API)."""

    where: str

    async def health(self, timeout: float = 5.0) -> dict[str, Any]: ...
    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes: ...
    async def act(self, action: dict[str, Any]) -> dict[str, Any]: ...
    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]: ...
    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]: ...
    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]: ...
    async def oracle(self) -> dict[str, Any]: ...
    async def aclose(self) -> None: ...


MAX_ANSWER_BYTES = 64 << 20  # a PNG of the largest screen is far less; more is not the control server's


async def _capped(resp: httpx.Response, what: str) -> bytes:
    """The answer's body, read up to MAX_ANSWER_BYTES: more is a box that broke (the server never sends
    that much), and the host's memory is not the box's to fill."""
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise BoxBroken(f"{what}: an answer of {declared} bytes (the cap is {MAX_ANSWER_BYTES})")
    chunks, size = [], 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise BoxBroken(f"{what}: an answer over {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class SandboxClient:
    def __init__(
        self,
        token: str,
        socket_path: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        proof_key: str | None = None,
    ) -> None:
        """`proof_key`: the key the box's server signs its answers with (BoxSecrets.proof); an answer not
        signed with it raises SandboxImpostor. None checks nothing (a client with only the token)."""
        self.proof_key = proof_key
        if socket_path:
            transport = httpx.AsyncHTTPTransport(uds=socket_path, retries=0)
            base_url = "http://sandbox"
        elif base_url:
            transport = httpx.AsyncHTTPTransport(retries=0)
        else:
            raise ValueError("need socket_path or base_url")
        self.where = socket_path or base_url
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            transport=transport,
            base_url=base_url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}"},
        )

    async def _request(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: dict | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        kw: dict[str, Any] = {"params": params}
        if json is not None:
            kw["json"] = json
        if timeout is not None:
            kw["timeout"] = timeout
        nonce = secrets.token_hex(16)
        request = self._http.build_request(method, path, headers={NONCE_HEADER: nonce}, **kw)
        try:  # the whole answer within the timeout: a box that trickles bytes holds no episode longer
            async with asyncio.timeout(timeout or self.timeout):
                streamed = await self._http.send(request, stream=True)
                try:
                    body = await _capped(streamed, f"{method} {path} on {self.where}")
                finally:
                    await streamed.aclose()
            headers = [
                (k, v) for k, v in streamed.headers.items() if k.lower() != "content-encoding"
            ]  # decoded
            resp = httpx.Response(streamed.status_code, headers=headers, content=body, request=request)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise SandboxTimeout(f"{method} {path} timed out on {self.where}") from exc
        except (httpx.TransportError, OSError) as exc:
            # Refused/reset/EOF: the server process (or the whole box) is gone.
            raise SandboxDied(f"{method} {path}: sandbox unreachable at {self.where}: {exc!r}") from exc
        if self.proof_key is not None:
            result = resp.headers.get("X-Action-Result", "")
            expected = signature(self.proof_key, nonce, result, resp.content)
            if not hmac.compare_digest(resp.headers.get(PROOF_HEADER, "").encode(), expected.encode()):
                raise SandboxImpostor(
                    f"{method} {path} on {self.where}: the answer is not signed by the box's control server "
                    "(a process in the box took its place)"
                )
        if resp.status_code >= 400:
            try:
                msg = resp.json().get("error", resp.text)
            except ValueError:
                msg = resp.text
            raise server_error(resp.status_code, msg, f"{method} {path}")
        return resp

    async def health(self, timeout: float = 5.0) -> dict[str, Any]:
        return (await self._request("GET", "/health", timeout=timeout)).json()

    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        params = {k: v for k, v in (("max_width", max_width), ("max_height", max_height)) if v}
        return (await self._request("GET", "/screenshot", params=params or None)).content

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        return (await self._request("POST", "/action", json=action)).json()

    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]:
        """Action then screenshot in one round trip: (action result, PNG)."""
        body = {"action": action, "max_width": max_width, "max_height": max_height}
        resp = await self._request("POST", "/step", json=body)
        return json.loads(resp.headers.get("X-Action-Result", "{}")), resp.content

    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body = {"task_id": task_id, "seed": seed, **({"osworld": source} if source is not None else {})}
        return (await self._request("POST", "/task/reset", json=body, timeout=90.0)).json()

    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]:
        body = {"wait_s": wait_s, **({"gave_up": True} if gave_up else {})}
        return (await self._request("POST", "/task/evaluate", json=body)).json()

    async def oracle(self) -> dict[str, Any]:
        return (await self._request("GET", "/task/oracle")).json()

    async def raw(self, method: str, path: str, content: bytes | None = None) -> httpx.Response:
        """Unchecked request (tests of the server's error handling)."""
        return await self._http.request(method, path, content=content)

    async def aclose(self) -> None:
        await self._http.aclose()
