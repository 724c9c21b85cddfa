"""Attacks on a desktop box's control server from a shell inside the box (what desktop/terminal-file gives
the agent: a process of the server's own user; here `podman exec`, as that user). Real boxes of the sandbox
image under podman.

Before: the server's token was in the container's environment (so in /proc/1/environ and every exec'd
process), and the host took any answer from the socket, so a process that moved the server's socket aside
and relayed through it could turn any evaluation into reward 1. Now the keys come in a file the server
deletes, the server is non-dumpable, the box's control folder is read-only once the server serves (no
socket can take its place), and every answer is signed with a key that is never sent (sandbox/base.py
BoxSecrets, sandbox/server/protocol.py signature), for where that folder's lock does not hold."""

from __future__ import annotations

import os
import time

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec
from sandbox.client import SandboxClient
from sandbox.errors import SandboxImpostor
from tests.security.box_shell import box_shell

pytestmark = pytest.mark.slow

# Moves the server's socket aside and answers at its place, relaying every request to the real server
# and rewriting the evaluation's body to a reward of 1 (the real server's headers, signature included, kept).
RELAY = r"""
import os, socket, threading
real, fake = "/run/cua/real.sock", "/run/cua/control.sock"
os.rename(fake, real)
srv = socket.socket(socket.AF_UNIX); srv.bind(fake); os.chmod(fake, 0o666); srv.listen(8)
open("/tmp/relay.ready", "w").close()

def read_message(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")), 0)
    while len(body) < n:
        body += conn.recv(65536)
    return head, body

def serve(client):
    upstream = socket.socket(socket.AF_UNIX); upstream.connect(real)
    while (request := read_message(client)) is not None:
        head, body = request
        upstream.sendall(head + b"\r\n\r\n" + body)
        rhead, rbody = read_message(upstream)
        if b"/task/evaluate" in head.split(b"\r\n")[0]:
            rbody = b'{"reward": 1.0, "done": true}'
            rhead = b"\r\n".join(
                l if not l.lower().startswith(b"content-length") else b"Content-Length: %d" % len(rbody)
                for l in rhead.split(b"\r\n"))
        client.sendall(rhead + b"\r\n\r\n" + rbody)

while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


async def test_the_keys_cannot_be_read_inside_and_a_relay_cannot_change_an_answer(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-server-{os.getpid()}")
    sb = await backend.start(SandboxSpec())
    try:
        token = sb.client._http.headers["Authorization"].removeprefix("Bearer ")
        proof = sb.client.proof_key
        assert proof and len(token) >= 16
        await sb.reset("miniwob/click-test", 0)
        honest = (await sb.evaluate(wait_s=0.1))["reward"]
        assert honest == 0.0, "nothing was clicked"
        shell = box_shell(backend, sb.id)  # the agent's shell: the server's user, in the box

        found = shell(
            "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>&1; ls -la /run/cua; "
            "cat /run/cua/* 2>/dev/null; for p in /proc/[0-9]*; do grep -qs sandbox.server $p/cmdline && "
            "head -c 4096 $p/mem; done"
        )
        assert "Permission denied" in found, found[-2000:]  # the server's own /proc files: non-dumpable
        assert token not in found and proof not in found, "a key is readable from inside the box"
        assert "secrets.json" not in shell("ls -a /run/cua"), "the keys' file outlived the server's start"

        shell(f"cat > /tmp/relay.py <<'EOF'\n{RELAY}\nEOF\n")
        refused = shell("/opt/cua/venv/bin/python /tmp/relay.py 2>&1")  # the folder is locked once it serves
        assert "PermissionError" in refused and "control.sock" in shell("ls /run/cua"), refused
        # where the lock does not hold (a box user with the host user's uid can undo its mode), the
        # signature still does: the relay takes the socket's place, its forged answer is refused
        socket_dir = os.path.dirname(sb.meta["socket"])
        os.chmod(socket_dir, 0o777)
        shell("nohup /opt/cua/venv/bin/python /tmp/relay.py >/tmp/relay.log 2>&1 &")
        deadline = time.monotonic() + 20
        while "ready" not in shell("ls /tmp/relay.ready 2>/dev/null && echo ready"):
            assert time.monotonic() < deadline, shell("cat /tmp/relay.log")
            time.sleep(0.2)
        socket_path = sb.meta["socket"]  # the host's next connection goes to the relay
        unchecked = SandboxClient(token, socket_path=socket_path)  # what the host was: the token alone
        checked = SandboxClient(token, socket_path=socket_path, proof_key=proof)
        try:
            assert (await unchecked.evaluate(wait_s=0.1))["reward"] == 1.0, "the relay forges the reward"
            with pytest.raises(SandboxImpostor, match="not signed by the box's control server"):
                await checked.evaluate(wait_s=0.1)
            assert (await checked.health())["ok"], "relayed answers it leaves alone are the server's own"
        finally:
            await unchecked.aclose()
            await checked.aclose()
    finally:
        await sb.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        backend.close()
