"""Helper for the reaper tests: owns a pool with one box per endpoint, says READY, then waits to be killed.

owner_process.py BACKEND RUN_ID [DOCKER_HOST ...]   (several hosts: one box on each)

The tests start it with `spawn_owner`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sandbox.backends import make_backend
from sandbox.base import SandboxSpec
from sandbox.pool import SandboxPool

REPO = Path(__file__).resolve().parents[2]


def spawn_owner(
    backend: str, run_id: str, hosts: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen, list[str]]:
    """This script as a process of its own, once its boxes are up: (the process, their ids)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, backend, run_id, *hosts],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
    )
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("READY "), f"owner did not start: {line!r}"
    return proc, line.split()[1:]


async def main(backend_name: str, run_id: str, hosts: list[str]) -> None:
    backend = make_backend(backend_name, docker_hosts=hosts, run_id=run_id)
    size = max(1, len(hosts))
    pool = SandboxPool(backend, SandboxSpec(), max_size=size, reap_orphans=False)
    await pool.start()
    boxes = await asyncio.gather(*(pool.acquire() for _ in range(size)))
    print("READY " + " ".join(sb.id for sb in boxes), flush=True)
    await asyncio.sleep(600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
