"""The API's wire format: errors as `{"statusCode", "message", "error"}`, JSON bodies read into models
(a bad one is a 400, never FastAPI's 422), Go durations, timestamps and screenshots as data URIs."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

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


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    body = {"statusCode": status, "message": message, "error": HTTPStatus(status).phrase}
    return JSONResponse(body, status_code=status)


def describe_errors(exc: ValidationError | RequestValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in list(exc.errors())[:5]
    )


M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise ApiError(400, "request body is not valid JSON") from None


def parse_body(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, describe_errors(exc)) from None


def duration_arg(text: str, name: str, max_s: float | None = None) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ApiError(400, f"{name}: {exc}") from None
    if max_s is not None and seconds > max_s:
        raise ApiError(400, f"{name}: at most {max_s:g}s, got {text!r}")
    return seconds


def iso_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def require_base64(output_format: str) -> None:
    if output_format == "storageKey":
        raise ApiError(400, "outputFormat 'storageKey' is not supported by the fake GBox server: use base64")
