"""What a process answering on a box's control socket can do to the host's client (sandbox/client.py):
claim or send an endless answer, or trickle one byte at a time. The client read every answer whole, and
each read had its own timeout, so a box could fill the host's memory or hold an episode until its 900 s
timeout. Real requests over a unix socket to a server this test runs, which stands for what a shell in a
box could start there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sandbox.client import SandboxClient
from sandbox.errors import BoxBroken, SandboxTimeout


async def serve(path: Path, answer) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await answer(writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return await asyncio.start_unix_server(handle, path=str(path))


async def claims_a_huge_body(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 99999999999\r\n\r\n")
    await w.drain()
    await asyncio.sleep(30)


async def never_ends(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * (1 << 20)
    while True:
        w.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await w.drain()


async def trickles(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        w.write(b" ")
        await w.drain()
        await asyncio.sleep(0.5)


@pytest.mark.parametrize(
    ("answer", "error", "within_s"),
    [(claims_a_huge_body, BoxBroken, 2), (never_ends, BoxBroken, 10), (trickles, SandboxTimeout, 5)],
    ids=["claims-a-huge-body", "never-ends", "trickles"],
)
async def test_an_answer_is_read_up_to_a_cap_and_within_its_timeout(tmp_path: Path, answer, error, within_s):
    sock = tmp_path / "control.sock"
    server = await serve(sock, answer)
    client = SandboxClient("t" * 24, socket_path=str(sock), timeout=2.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(error):
            await client.screenshot()
    finally:
        await client.aclose()
        server.close()
    assert time.monotonic() - t0 < within_s
