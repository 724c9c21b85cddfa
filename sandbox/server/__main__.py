"""Entry point: `python -m sandbox.server --socket /run/cua/control.sock`.

Its keys (sandbox/base.py BoxSecrets) come from the file CUA_SANDBOX_SECRETS names, deleted once read,
or else from CUA_SANDBOX_TOKEN and CUA_SANDBOX_PROOF (GBox's harness), removed from the environment. The
process makes itself non-dumpable first, so that other processes of its user (an agent's shell in the
box) cannot read its memory or environment through /proc.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time

from sandbox.server.app import Controller, make_server
from sandbox.server.display import Display
from sandbox.server.protocol import IDLE_EXIT_CODE


def _watch_idle(ctl: Controller, idle_s: float, expire) -> None:
    # The last backstop: a box no trainer talks to any more (its owner gone where no reaper looks) ends itself.
    while True:
        time.sleep(min(1.0, idle_s / 4))
        if time.monotonic() - ctl.last_request > idle_s:
            expire()
            return


def _watch_owner(pid: int, stop) -> None:
    # Local backend: the sandbox dies with the process that owns it, even on SIGKILL.
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            stop()
            return
        except PermissionError:
            pass


PR_SET_DUMPABLE = 4


def _keys() -> tuple[str, str]:
    path = os.environ.pop("CUA_SANDBOX_SECRETS", "")
    if path:
        with open(path) as f:
            found = json.load(f)
        os.unlink(path)
        return str(found.get("token", "")), str(found.get("proof", ""))
    return os.environ.pop("CUA_SANDBOX_TOKEN", ""), os.environ.pop("CUA_SANDBOX_PROOF", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--socket", help="unix socket path to listen on")
    ap.add_argument("--port", type=int, help="loopback TCP port (0: any) when no --socket")
    ap.add_argument("--width", type=int, default=int(os.environ.get("CUA_SCREEN_WIDTH", 1280)))
    ap.add_argument("--height", type=int, default=int(os.environ.get("CUA_SCREEN_HEIGHT", 800)))
    ap.add_argument("--display", help="use this existing X display instead of starting Xvfb")
    ap.add_argument("--owner-pid", type=int, help="exit when this process is gone")
    ap.add_argument("--ready-file", help="write {'socket'|'port', 'display'} here once serving")
    ap.add_argument(
        "--idle-exit-s",
        type=float,
        default=float(os.environ.get("CUA_SANDBOX_IDLE_EXIT_S", 0)),
        help=f"stop, with exit status {IDLE_EXIT_CODE}, after this long without a request (0: never)",
    )
    args = ap.parse_args(argv)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(f"prctl(PR_SET_DUMPABLE, 0) failed: errno {ctypes.get_errno()}", file=sys.stderr)
        return 2
    token, proof = _keys()  # apps started in the box inherit neither
    if len(token) < 16 or len(proof) < 16:
        print("the sandbox keys must be set (CUA_SANDBOX_SECRETS, >= 16 characters each)", file=sys.stderr)
        return 2

    # An existing display is a desktop that has its own window manager (a GBox box's).
    display = Display(args.width, args.height, display=args.display, window_manager=args.display is None)
    ctl = Controller(display)
    srv = make_server(ctl, token, proof, args.socket, args.port)
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.owner_pid:
        threading.Thread(target=_watch_owner, args=(args.owner_pid, stop), daemon=True).start()
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        stop()

    if args.idle_exit_s > 0:
        threading.Thread(target=_watch_idle, args=(ctl, args.idle_exit_s, expire), daemon=True).start()
    if args.ready_file:
        where = {"socket": args.socket} if args.socket else {"port": srv.server_address[1]}
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({**where, "display": display.name, "pid": os.getpid()}, f)
        os.replace(tmp, args.ready_file)
    print(f"cua sandbox server on {args.socket or srv.server_address} display {display.name}", flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        ctl.close()
        if args.socket and os.path.exists(args.socket):
            with contextlib.suppress(OSError):  # the host locks the socket's folder once the box serves
                os.unlink(args.socket)
    if expired.is_set():
        print(f"no request for {args.idle_exit_s:g} s: stopped", flush=True)
        return IDLE_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
