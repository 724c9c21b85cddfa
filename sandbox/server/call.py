"""One request to the control server from inside its box: `python3 -m sandbox.server.call METHOD PATH [JSON]`.
JSON may be `@FILE`: the body is read from FILE, which is then removed (bodies over a command line's limit).

For providers whose boxes are reached only through a command API (GBox): the host runs this in the box
instead of connecting to the server's socket. The socket comes from CUA_CONTROL_SOCKET and the token from
CUA_SANDBOX_TOKEN (passed as the command's environment, never on its command line). It prints one JSON
line, {"status": <HTTP status>, "body": <the JSON answer>}, and exits 0 whenever the server answered;
3 when it could not be reached (the server is gone). Standard library only, and quick to start.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys

UNREACHABLE = 3


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("sandbox", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or args[0] not in ("GET", "POST"):
        print("usage: python3 -m sandbox.server.call GET|POST PATH [JSON]", file=sys.stderr)
        return 2
    method, path = args[0], args[1]
    body = args[2].encode() if len(args) == 3 else None
    if body is not None and body.startswith(b"@"):
        with open(body[1:], "rb") as f:
            body = f.read()
        os.unlink(args[2][1:])
    conn = _UnixConnection(
        os.environ["CUA_CONTROL_SOCKET"], timeout=float(os.environ.get("CUA_CALL_TIMEOUT", 120))
    )
    headers = {"Authorization": f"Bearer {os.environ.get('CUA_SANDBOX_TOKEN', '')}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    except OSError as exc:
        print(json.dumps({"status": None, "error": f"control server unreachable: {exc!r}"}))
        return UNREACHABLE
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = {"error": raw.decode(errors="replace")[:2000]}
    print(json.dumps({"status": resp.status, "body": answer}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
