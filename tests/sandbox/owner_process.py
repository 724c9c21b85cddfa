"""Helper for the reaper tests: owns a pool with one box, says READY, then waits to be killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sandbox.backends import make_backend
from sandbox.base import SandboxSpec
from sandbox.pool import SandboxPool


async def main(backend_name: str, run_id: str) -> None:
    backend = make_backend(backend_name, run_id=run_id)
    pool = SandboxPool(backend, SandboxSpec(backend=backend_name), max_size=1, reap_orphans=False)
    await pool.start()
    sb = await pool.acquire()
    print(f"READY {sb.id}", flush=True)
    await asyncio.sleep(600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
