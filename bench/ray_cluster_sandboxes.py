#!/usr/bin/env python
"""Boxes on the machines of a Ray cluster (sandbox.backend ray), the measures that need several Ray nodes,
each against a reference measured in the same run (bench/ray_sandboxes.py has the per-step hop):

1. spread: episodes per minute with the slots on two sandbox nodes against the same slots on one node
   (all nodes on this machine and its one engine: the same 2 cores, so it measures what spreading costs,
   not what a second machine adds); target ratio >= 0.95. Runs alternate one, two, one, two.
2. lag: the rollout loop's lag (a 10 ms timer's overshoot) while N episodes run at once through the ray
   backend, against the docker backend's direct socket running the same episodes, and an idle loop.
3. per-host: one actor per machine that keeps all its boxes (a prototype here, not the product) against
   one actor per box (the product): memory, box start, step round trip.

  python bench/ray_cluster_sandboxes.py [spread|lag|per-host ...] [--episodes 24] [--slots 4] [--lag-episodes 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sandbox.backends.docker import DockerBackend, default_docker_host  # noqa: E402
from sandbox.backends.ray_hosts import SLOT, RayBackend  # noqa: E402
from sandbox.base import SandboxSpec  # noqa: E402
from tests.deploy.ray_cluster import LocalRayCluster  # noqa: E402

SPEC = SandboxSpec()
STEPS = 5  # steps of an episode: click, screenshot


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def episode(backend: Any, seed: int) -> None:
    sb = await backend.start(SPEC)
    try:
        await sb.reset("miniwob/click-test", seed)
        for i in range(STEPS):
            await sb.step({"type": "click", "x": 300 + 20 * i, "y": 200}, 640, 400)
        await sb.evaluate()
    finally:
        await backend.stop(sb)


async def episodes_per_minute(backend: Any, n: int, at_once: int) -> float:
    gate = asyncio.Semaphore(at_once)

    async def one(seed: int) -> None:
        async with gate:
            await episode(backend, seed)

    began = time.perf_counter()
    ended = await asyncio.gather(*(one(seed) for seed in range(n)), return_exceptions=True)
    took = time.perf_counter() - began
    failed = [repr(e) for e in ended if isinstance(e, BaseException)]
    if failed:
        print(f"  {len(failed)} of {n} episodes failed (not counted): {failed[:3]}")
    return (n - len(failed)) / took * 60


class Cluster:
    """A trainer node (CPUs, no slots) and sandbox nodes with the given slots, all on this machine's engine;
    this process connects as the trainer's driver."""

    def __init__(self, slots: list[int]) -> None:
        import ray

        self.c = LocalRayCluster()
        self.c.start_node("trainer", cpus=2, gpus=0)
        for i, n in enumerate(slots):
            env = {"DOCKER_HOST": default_docker_host()}
            self.c.start_node(f"sandboxes-{i}", cpus=0, gpus=0, resources={SLOT: n}, env=env)
        ray.init(
            address=self.c.address, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False
        )

    def close(self) -> None:
        import ray

        ray.shutdown()
        left = self.c.stop()
        assert not left, f"Ray processes survived: {left}"


async def spread(args: argparse.Namespace) -> None:
    half = args.slots // 2
    shapes = {"one node": [args.slots], "two nodes": [half, args.slots - half]}
    rates: dict[str, list[float]] = {k: [] for k in shapes}
    for name in [*shapes, *shapes]:  # one, two, one, two: drift of the machine cancels out
        cluster = Cluster(shapes[name])
        try:
            backend = RayBackend(run_id=f"bench-spread-{os.getpid()}")
            await episode(backend, 0)  # warm: the node's workers and the image's page cache
            rates[name].append(await episodes_per_minute(backend, args.episodes, args.slots))
            print(
                f"  {name:9}: {rates[name][-1]:5.1f} episodes/min ({args.episodes} episodes, {args.slots} at once)"
            )
        finally:
            cluster.close()
    one, two = (statistics.mean(rates[k]) for k in shapes)
    print(
        f"spread over two nodes vs one, same slots and cores: {two:.1f} vs {one:.1f} episodes/min, ratio "
        f"{two / one:.2f} ({'meets' if two / one >= 0.95 else 'misses'} >= 0.95)"
    )


async def loop_lag(run: Any) -> tuple[list[float], Any]:
    """The overshoot of a 10 ms timer on this loop while `run` is awaited, and what it returned."""
    lags: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - t0 - 0.01)

    ticker = asyncio.create_task(tick())
    try:
        result = await run
    finally:
        done.set()
        await ticker
    return lags, result


def say_lag(name: str, lags: list[float], extra: str = "") -> None:
    ms = [x * 1000 for x in lags]
    print(f"  {name:28}: p50 {pct(ms, 0.5):6.1f}  p99 {pct(ms, 0.99):7.1f}  max {max(ms):7.1f} ms {extra}")


async def lag(args: argparse.Namespace) -> None:
    n = args.lag_episodes
    print(f"rollout loop lag (10 ms timer overshoot), {n} episodes at once, {STEPS} steps each:")
    idle, _ = await loop_lag(asyncio.sleep(5))
    say_lag("idle loop", idle)
    direct = DockerBackend(run_id=f"bench-lag-direct-{os.getpid()}")
    try:
        lags, rate = await loop_lag(episodes_per_minute(direct, n, n))
        say_lag("docker backend (direct)", lags, f"({rate:.1f} episodes/min)")
    finally:
        direct.close()
    cluster = Cluster([n])
    try:
        lags, rate = await loop_lag(episodes_per_minute(RayBackend(run_id=f"bench-lag-{os.getpid()}"), n, n))
        say_lag("ray backend (actor per box)", lags, f"({rate:.1f} episodes/min)")
    finally:
        cluster.close()


class HostKeeper:
    """The alternative design, prototyped for the measure only: one actor per machine that keeps every box
    it starts there (no slot per box: Ray would no longer count boxes, the actor would)."""

    def __init__(self, run_id: str) -> None:
        self.backend = DockerBackend(run_id=run_id)
        self.boxes: dict[str, Any] = {}

    async def start(self, spec: SandboxSpec) -> tuple[str, str]:
        sb = await self.backend.start(spec)
        self.boxes[sb.id] = sb
        return sb.id, socket.gethostname()

    async def call(self, box_id: str, method: str, args: tuple[Any, ...]) -> Any:
        return await getattr(self.boxes[box_id].client, method)(*args)

    async def stop(self, box_id: str) -> None:
        await self.backend.stop(self.boxes.pop(box_id))

    def pid(self) -> int:
        return os.getpid()


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


async def round_trips(call: Any, n: int = 30) -> float:
    out = []
    for i in range(n + 2):
        t0 = time.perf_counter()
        await call({"type": "click", "x": 300 + 20 * (i % 2), "y": 200}, 640, 400)
        out.append(time.perf_counter() - t0)
    return statistics.median(out[2:]) * 1000


async def per_host(args: argparse.Namespace) -> None:
    import ray

    k = args.slots
    cluster = Cluster([k + 1])  # k boxes each way, and the host actor's own slot
    try:
        per_box = RayBackend(run_id=f"bench-perbox-{os.getpid()}")
        t0 = time.perf_counter()
        boxes = [await per_box.start(SPEC) for _ in range(k)]
        box_start = (time.perf_counter() - t0) / k
        pids = [await sb.client.actor.__ray_call__.remote(lambda self: os.getpid()) for sb in boxes]
        box_mb = sum(rss_mb(p) for p in pids)
        await boxes[0].reset("miniwob/click-test", 0)
        box_rt = await round_trips(boxes[0].step)
        for sb in boxes:
            await per_box.stop(sb)

        host = (
            ray.remote(HostKeeper)
            .options(resources={SLOT: 1}, num_cpus=0)
            .remote(f"bench-perhost-{os.getpid()}")
        )
        t0 = time.perf_counter()
        await host.pid.remote()
        host_up = time.perf_counter() - t0
        t0 = time.perf_counter()
        ids = [(await host.start.remote(SPEC))[0] for _ in range(k)]
        host_start = (time.perf_counter() - t0) / k
        host_mb = rss_mb(await host.pid.remote())
        await host.call.remote(ids[0], "reset", ("miniwob/click-test", 0))
        host_rt = await round_trips(lambda *a: host.call.remote(ids[0], "step", a))
        for box_id in ids:
            await host.stop.remote(box_id)
        ray.kill(host)
    finally:
        cluster.close()
    print(f"one actor per box (the product) vs one per machine (prototype), {k} boxes:")
    print(f"  memory of the actors: {box_mb:.0f} MB ({box_mb / k:.0f} per box) vs {host_mb:.0f} MB")
    print(
        f"  box start: {box_start:.2f} s vs {host_start:.2f} s (+ {host_up:.1f} s once for the machine's actor)"
    )
    print(f"  step round trip p50 (640x400): {box_rt:.1f} ms vs {host_rt:.1f} ms")


PARTS = {"spread": spread, "lag": lag, "per-host": per_host}


async def main(args: argparse.Namespace) -> None:
    if unknown := set(args.parts) - set(PARTS):
        raise SystemExit(f"unknown part(s) {sorted(unknown)}: choose from {', '.join(PARTS)}")
    for part in args.parts or list(PARTS):
        print(f"== {part}")
        await PARTS[part](args)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)} (default: all)")
    ap.add_argument("--episodes", type=int, default=24, help="episodes per spread run")
    ap.add_argument(
        "--slots", type=int, default=4, help="sandbox slots (and episodes at once) of a spread run"
    )
    ap.add_argument("--lag-episodes", type=int, default=32, help="episodes at once for the loop-lag measure")
    asyncio.run(main(ap.parse_args()))
