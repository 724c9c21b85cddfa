"""The file API: files read and written inside a box's home folder, never outside it."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from fastapi import Request

from sandbox.testing.gbox_server.boxes import FakeBox
from sandbox.testing.gbox_server.wire import ApiError, iso_time, read_json


def box_path(box: FakeBox, path: str, working_dir: str | None) -> Path:
    assert box.home is not None
    base = box.home / working_dir if working_dir else box.home
    # realpath: neither '..' nor a symlink may lead out of the home folder.
    target = Path(os.path.realpath(Path(path) if path.startswith("/") else base / path))
    home = Path(os.path.realpath(box.home))
    if not target.is_relative_to(home):
        raise ApiError(403, f"the fake only allows paths inside the box's home {str(box.home)!r}")
    return target


def read(box: FakeBox, path: str, working_dir: str | None) -> dict[str, Any]:
    target = box_path(box, path, working_dir)
    if not target.exists():
        raise ApiError(404, f"no such file: {path}")
    if not target.is_file():
        raise ApiError(400, f"not a file: {path}")
    return {"content": target.read_bytes().decode(errors="replace")}


async def write(box: FakeBox, request: Request) -> dict[str, Any]:
    """Text content comes as JSON {path, content, workingDir}, bytes as a multipart form."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form()  # bytes content: the SDK sends a file part named content
        path, working_dir, content = form.get("path"), form.get("workingDir"), form.get("content")
        if not isinstance(path, str) or content is None:
            raise ApiError(400, "multipart write needs a path field and a content part")
        data = content.encode() if isinstance(content, str) else await content.read()
        working_dir = working_dir if isinstance(working_dir, str) else None
    else:
        raw = await read_json(request)
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            raise ApiError(400, "path: must be a string")
        if not isinstance(raw.get("content"), str):
            raise ApiError(400, "content: must be a string")
        path, working_dir, data = raw["path"], raw.get("workingDir"), raw["content"].encode()
    target = box_path(box, path, working_dir)
    if target.is_dir():
        raise ApiError(400, f"{path} is a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    st = target.stat()
    return {
        "lastModified": iso_time(st.st_mtime),
        "mode": stat.filemode(st.st_mode),
        "name": target.name,
        "path": str(target),
        "size": str(st.st_size),
        "type": "file",
    }
