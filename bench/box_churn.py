#!/usr/bin/env python
"""Repository boxes under churn: each round starts 4 boxes at once while the previous round's 4 are removed
and the engine's list is read, as episodes of a run do. Prints the rounds done, start and removal p50/p95, and
whether the engine stopped answering (a call past the client's 60 s timeout).

`--userns auto` starts the boxes with podman's `userns=auto` instead of the fixed mapping the project
uses (sandbox/backends/libpod.py), the reference for that choice. With podman 4.3 it hung the podman
service within two minutes in both tries; recover with
`pkill -9 -f "podman system service"; scripts/setup_sandbox.sh service`.

`--hold N` instead starts N boxes and keeps them all running, then removes them: the boxes share one
host id, and each holds one kernel key of that id's quota (`kernel.keys.maxkeys`, 200 by default, which
scripts/setup_sandbox.sh raises).

  python bench/box_churn.py [--seconds 240] [--userns fixed|auto] [--hold N]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sandbox import fmt
from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import RepoBox, RepoSpec, start_repo_box


def with_userns_auto(backend: DockerBackend) -> None:
    """Start this backend's boxes the way the project did before: podman's Docker API, `userns=auto`."""
    from docker.models.containers import _create_container_args

    def run(image: str, **kwargs: Any) -> None:
        kwargs.pop("detach", None)
        args = _create_container_args({**kwargs, "image": image, "version": backend.docker.api._version})
        args["host_config"]["UsernsMode"] = "auto"
        backend.docker.api.start(backend.docker.api.create_container(**args)["Id"])

    backend.run_as_nobody_on_the_host = run  # type: ignore[method-assign]


def hold(backend: DockerBackend, spec: RepoSpec, n: int) -> int:
    boxes: list[RepoBox] = []
    error = None
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(4) as pool:
        for started in [pool.submit(start_repo_box, backend, spec) for _ in range(n)]:
            try:
                boxes.append(started.result())
            except Exception as exc:
                error = error or f"{type(exc).__name__}: {str(exc)[:1500]}"
    print(f"held {len(boxes)} of {n} boxes running at once, started in {time.perf_counter() - t:.0f} s")
    with cf.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda b: backend.remove_sync(b.id), boxes))
    print(f"engine: {'FAILED: ' + error if error else 'started every box'}")
    return 1 if error else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--userns", choices=["fixed", "auto"], default="fixed")
    ap.add_argument("--image", default="cua-repo-samples:latest")
    ap.add_argument("--hold", type=int, default=0, help="boxes to hold running at once (no churn)")
    args = ap.parse_args(argv)
    backend = DockerBackend(run_id=f"bench-churn-{args.userns}")
    if args.userns == "auto":
        with_userns_auto(backend)
    spec = RepoSpec(image=args.image, memory_mb=512)
    if args.hold:
        return hold(backend, spec, args.hold)
    starts: list[float] = []
    removals: list[float] = []
    live: list[RepoBox] = []

    def start() -> RepoBox:
        t = time.perf_counter()
        box = start_repo_box(backend, spec)
        starts.append(time.perf_counter() - t)
        return box

    def remove(box: RepoBox) -> None:
        t = time.perf_counter()
        backend.remove_sync(box.id)
        removals.append(time.perf_counter() - t)

    rounds, error = 0, None
    end = time.monotonic() + args.seconds
    with cf.ThreadPoolExecutor(8) as pool:
        try:
            while time.monotonic() < end:
                old, live = live, []
                started = [pool.submit(start) for _ in range(4)]
                done = [pool.submit(remove, b) for b in old] + [
                    pool.submit(backend.list_boxes, backend.run_id)
                ]
                live += [f.result() for f in started]
                for f in done:
                    f.result()
                rounds += 1
        except Exception as exc:  # the engine stopped answering, or a start failed
            error = f"{type(exc).__name__}: {str(exc)[:1500]}"
        for box in live:
            try:
                backend.remove_sync(box.id)
            except Exception as exc:
                error = error or f"cleanup: {exc}"
    print(f"userns {args.userns}: {rounds} rounds in {args.seconds:.0f} s")
    print(f"start   {fmt(starts or [0])}  (n={len(starts)})")
    print(f"removal {fmt(removals or [0])}")
    print(f"engine: {'FAILED: ' + error if error else 'answered every call'}")
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
