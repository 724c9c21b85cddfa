"""The command API: a shell command run in a box, as GBox's `commands` route answers it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from sandbox.backends.local import host_python, kill_session
from sandbox.testing.gbox_server.bodies import CommandBody
from sandbox.testing.gbox_server.boxes import FakeBox
from sandbox.testing.gbox_server.wire import ApiError, duration_arg


async def run_command(box: FakeBox, body: CommandBody) -> dict[str, Any]:
    timeout = duration_arg(body.timeout, "timeout")
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
