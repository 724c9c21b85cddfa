"""The HTTP app: the Bearer check, errors in GBox's shape, the routes under /api/v1 that the SDK calls, and
the test-only routes under /_fake (faults to inject, what happened)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sandbox.testing.gbox_server import actions, files
from sandbox.testing.gbox_server.bodies import CommandBody, CreateBody, FaultsBody, ScreenshotBody
from sandbox.testing.gbox_server.boxes import FakeGbox
from sandbox.testing.gbox_server.commands import run_command
from sandbox.testing.gbox_server.wire import (
    ApiError,
    data_uri,
    describe_errors,
    error_response,
    parse_body,
    read_json,
    require_base64,
)

DEFAULT_PAGE_SIZE = 10


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
            return error_response(401, "Unauthorized")
        return await call_next(request)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, describe_errors(exc))  # NestJS-style 400, never FastAPI's 422

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(404, f"Cannot {request.method} {request.url.path}")
        return error_response(exc.status_code, str(exc.detail))

    # -- boxes
    @app.post(f"{v1}/boxes/linux")
    async def create_linux(request: Request) -> dict[str, Any]:
        box = await gbox.create(parse_body(CreateBody, await read_json(request)))
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
        await read_json(request)  # {wait}: the fake always waits
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
        body = parse_body(ScreenshotBody, await read_json(request))
        require_base64(body.output_format)
        return {"uri": data_uri(await gbox.png(box, body.clip))}

    @app.post(f"{v1}/boxes/{{box_id}}/actions/{{name}}")
    async def action(box_id: str, name: str, request: Request) -> dict[str, Any]:
        if name not in actions.ACTIONS:
            raise ApiError(404, f"Cannot POST {request.url.path} (action not supported by the fake)")
        box = gbox.live(box_id)
        return await actions.perform(gbox, box, name, await read_json(request))

    # -- commands and files
    @app.post(f"{v1}/boxes/{{box_id}}/commands")
    async def commands(box_id: str, request: Request) -> dict[str, Any]:
        box = gbox.live(box_id)
        return await run_command(box, parse_body(CommandBody, await read_json(request)))

    @app.get(f"{v1}/boxes/{{box_id}}/fs/read")
    async def fs_read(
        box_id: str, path: str, working_dir: str | None = Query(None, alias="workingDir")
    ) -> dict[str, Any]:
        return files.read(gbox.live(box_id), path, working_dir)

    @app.post(f"{v1}/boxes/{{box_id}}/fs/write")
    async def fs_write(box_id: str, request: Request) -> dict[str, Any]:
        return await files.write(gbox.live(box_id), request)

    # -- test-only controls
    @app.post("/_fake/faults")
    async def faults(request: Request) -> dict[str, Any]:
        body = parse_body(FaultsBody, await read_json(request))
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
