#!/usr/bin/env python
"""Boxes through Ray actors (sandbox.backend ray) against the docker backend's direct socket, in one run:

1. step round trip (a click, then the screenshot) p50/p95, small (640x400) and full (1280x800) screenshots:
   through the box's actor vs the direct unix socket; the overhead per step (target <= 5 ms at p50)
2. box start latency (start to the first answer) and the memory of a box's actor process
3. a lost box: from its actor's death to the trainer's next request failing as SandboxDied (an
   infrastructure failure)

It runs a one-node Ray cluster of its own in this process (`ray.init`, sandbox_slots = --boxes), on the
engine DOCKER_HOST or podman's socket names: one machine, so it measures the hop, not a network.

  python bench/ray_sandboxes.py [--steps 40] [--boxes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.backends.docker import DockerBackend
from sandbox.backends.ray_hosts import SLOT, RayBackend
from sandbox.base import SandboxSpec
from sandbox.errors import SandboxDied

SIZES = {"small": (640, 400), "full": (1280, 800)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000


async def steps(sb, n: int, size: tuple[int, int]) -> list[float]:
    out = []
    for i in range(n + 2):  # two warm-ups
        t0 = time.perf_counter()
        _, png = await sb.step({"type": "click", "x": 600 + (i % 2) * 40, "y": 500}, *size)
        assert png[:4] == b"\x89PNG"
        out.append(time.perf_counter() - t0)
    return out[2:]


async def started(backend, spec: SandboxSpec):
    t0 = time.perf_counter()
    sb = await backend.start(spec)
    return sb, time.perf_counter() - t0


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


async def main(args: argparse.Namespace) -> None:
    import ray

    ray.init(
        num_cpus=os.cpu_count(),
        resources={SLOT: args.boxes},
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}},
        logging_level="ERROR",
        log_to_driver=False,
    )
    spec = SandboxSpec()
    docker, via_ray = (
        DockerBackend(run_id=f"bench-direct-{os.getpid()}"),
        RayBackend(run_id=f"bench-ray-{os.getpid()}"),
    )
    boxes = []
    try:
        direct, t_direct = await started(docker, spec)
        relayed, t_ray = await started(via_ray, spec)
        boxes = [(docker, direct), (via_ray, relayed)]
        for sb in (direct, relayed):
            await sb.reset("miniwob/click-test", 0)
        print(f"step round trip, {args.steps} steps each (click + screenshot), same machine:")
        for name, size in SIZES.items():
            d = await steps(direct, args.steps, size)
            r = await steps(relayed, args.steps, size)
            over = pct(r, 0.5) - pct(d, 0.5)
            print(
                f"  {name:5} {size[0]}x{size[1]}: direct p50 {pct(d, 0.5):6.1f} p95 {pct(d, 0.95):6.1f} ms | "
                f"ray p50 {pct(r, 0.5):6.1f} p95 {pct(r, 0.95):6.1f} ms | overhead p50 {over:+.1f} ms "
                f"({'meets' if over <= 5 else 'misses'} <= 5 ms), ratio {statistics.median(r) / statistics.median(d):.2f}x"
            )
        pid = await relayed.client.actor.__ray_call__.remote(lambda self: os.getpid())
        print(
            f"box start to first answer: direct {t_direct:.2f} s, ray {t_ray:.2f} s ({t_ray / t_direct:.2f}x)"
        )
        print(
            f"memory of a box's actor process: {rss_mb(pid):.0f} MB RSS (the box itself is the same container)"
        )
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        try:
            while True:
                await relayed.screenshot()
        except SandboxDied:
            print(f"actor killed -> SandboxDied on the next request after {time.perf_counter() - t0:.2f} s")
    finally:
        for backend, sb in boxes:
            await backend.stop(sb)
        docker.close()
        ray.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--boxes", type=int, default=2)
    asyncio.run(main(ap.parse_args()))
