"""The local GBox server as a process:

    python -m sandbox.testing.gbox_server --port 0 --api-key KEY --ready-file F [--state-dir D]

Once listening, the server writes {"port", "pid"} to the ready file; on SIGTERM/SIGINT it terminates every
box (desktop and command sessions) before exiting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import uvicorn

from sandbox.testing.gbox_server.app import make_app
from sandbox.testing.gbox_server.boxes import FakeGbox


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
    ap = argparse.ArgumentParser(
        prog="python -m sandbox.testing.gbox_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
