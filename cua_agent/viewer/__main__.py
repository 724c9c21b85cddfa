"""Trajectory viewer: a local, read-only web page over a training run's or an evaluation's outputs.

    python -m cua_agent.viewer outputs/<experiment> [--port 8765] [--host 127.0.0.1]
    make view RUN=outputs/<experiment>

Groups (filter by file, task, outcome, weight version, how the episode ended) → a group's episodes side by
side with their rewards and advantages → each turn's screenshot with the action drawn on it, the raw model
output and the parsed action or the parse failure. Reload to see a run in progress grow; /plots shows the
training curves.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from cua_agent.viewer import pages
from cua_agent.viewer.runs import Run

log = logging.getLogger("cua_agent.viewer")


WILDCARDS = ("0.0.0.0", "::", "")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def turn_number(q: dict[str, str]) -> int | None:
    """`turn=` as an index: ASCII digits only ("²" is a digit to str.isdigit, not to int)."""
    turn = q.get("turn", "")
    return int(turn) if re.fullmatch(r"[0-9]{1,6}", turn) else None


def host_allowed(header: str, host: str, port: int) -> bool:
    """Whether a request's Host header names this server: a page of another site that got its name
    resolved to 127.0.0.1 (DNS rebinding) sends its own name and is refused. A server on every interface
    (warned at start) cannot know its names and takes any."""
    if host in WILDCARDS:
        return True
    names = {host, f"[{host}]"} | (set(LOOPBACK_NAMES) if host in LOOPBACK_NAMES else set())
    return header in names | {f"{n}:{port}" for n in names}


def make_server(run: Run, host: str, port: int) -> ThreadingHTTPServer:
    lock = threading.Lock()  # one refresh at a time: the scan state is shared

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            q = dict(parse_qsl(url.query))
            if not host_allowed(self.headers.get("Host", ""), host, self.server.server_address[1]):
                self._send(403, "text/plain; charset=utf-8", b"not this server's name (Host header)")
                return
            with lock:
                run.refresh()
            if url.path == "/":
                self._send(200, "text/html; charset=utf-8", pages.index(run, q).encode())
            elif url.path == "/group":
                html = pages.group(run, q.get("src", ""), q.get("id", ""))
                self._not_found() if html is None else self._send(
                    200, "text/html; charset=utf-8", html.encode()
                )
            elif url.path == "/turn":
                turn = turn_number(q)
                html = pages.turn(run, q.get("src", ""), q.get("ep", ""), turn) if turn is not None else None
                self._not_found() if html is None else self._send(
                    200, "text/html; charset=utf-8", html.encode()
                )
            elif url.path == "/shot":
                f = run.files.get(q.get("src", ""))
                turn = turn_number(q)
                path = f.screenshot(q.get("ep", ""), turn) if f and turn is not None else None
                self._not_found() if path is None else self._send(200, "image/png", path.read_bytes())
            elif url.path == "/plots":
                self._send(200, "text/html; charset=utf-8", pages.plots_page(run, q).encode())
            else:
                self._not_found()

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")  # a run in progress changes under the same URL
            self.end_headers()
            self.wfile.write(body)

        def _not_found(self) -> None:
            self._send(404, "text/plain; charset=utf-8", b"not found")

        def log_message(self, fmt: str, *args: object) -> None:
            log.debug(fmt, *args)

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cua_agent.viewer", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="outputs/<experiment>, or an evaluation's --out folder")
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1: this machine only (default)")
    parser.add_argument("--port", type=int, default=8765, help="0: any free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        run = Run(args.run)
    except FileNotFoundError as e:
        parser.error(str(e))
    run.refresh()
    if args.host not in LOOPBACK_NAMES:
        log.warning(
            "--host %s: anyone who can reach this machine on that address can read the run's rollouts "
            "(model outputs, screenshots); 127.0.0.1 and an SSH tunnel keep them yours",
            args.host,
        )
    try:
        server = make_server(run, args.host, args.port)
    except OSError as e:
        parser.error(f"cannot listen on {args.host}:{args.port}: {e.strerror} (--port 0 picks a free port)")
    host, port = server.server_address[:2]
    print(
        f"viewer: http://{host}:{port}/ over {args.run} ({len(run.episodes())} episodes); Ctrl-C stops it",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
