#!/usr/bin/env python
"""Removes leftover sandboxes (manual cleanup; pools also reap at start).

python scripts/reap_sandboxes.py             # boxes whose owner process is gone (docker, local, and gbox
                                             # when GBOX_API_KEY is set: environment or .env)
python scripts/reap_sandboxes.py --all       # every cua sandbox on this host, running owners included
python scripts/reap_sandboxes.py --list      # show, remove nothing
python scripts/reap_sandboxes.py --run-id X  # the boxes of one run
python scripts/reap_sandboxes.py --config configs/cua_grpo.yaml   # every endpoint of sandbox.docker_hosts
python scripts/reap_sandboxes.py --docker-host unix:///a.sock --docker-host unix:///b.sock
python scripts/reap_sandboxes.py --ray HEAD:6379   # also every machine of that Ray cluster that offers
                                                   # sandbox_slots (as does a CONFIG with sandbox.backend ray)

On a Ray cluster the same rule runs on each sandbox machine, on that machine's own engine (a box's owner is a
process of its machine): a task that needs no resources, pinned to the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cua_agent.settings import Settings
from sandbox.backends import BACKENDS, make_backend
from sandbox.base import Backend, owner_alive

RAY_TASK_TIMEOUT_S = 300.0  # a machine's reap: its engine removes boxes one by one


def reap_boxes(
    name: str, backend: Backend, all_boxes: bool, run_id: str | None, list_only: bool
) -> list[str]:
    """The rule on one backend: lines saying what was found and done; the last says how many were removed."""
    lines, removed = [], 0
    for box in backend.list_boxes(run_id=run_id):
        labels = box["labels"]
        alive = owner_alive(labels)
        doomed = all_boxes or run_id is not None or not alive
        where = f" {box['endpoint']}" if "endpoint" in box else ""
        lines.append(
            f"{name:6}{where} {box['id']:<22} run={labels.get('cua.run_id', '?'):<28} "
            f"owner={labels.get('cua.owner_pid', '?')} ({'alive' if alive else 'gone'}) "
            f"{'-> remove' if doomed and not list_only else ''}"
        )
        if doomed and not list_only:
            backend.remove_sync(box["id"])
            removed += 1
    if name == "docker" and not list_only and not run_id:
        backend.reap(all_boxes=all_boxes)  # also stale socket folders
    return [*lines, f"removed {removed}"]


def reap_this_machine(all_boxes: bool, run_id: str | None, list_only: bool) -> list[str]:
    """The rule on the engine of the machine this runs on (a Ray task pinned there)."""
    from sandbox.backends.docker import DockerBackend

    backend = DockerBackend(run_id="reaper")
    try:
        return reap_boxes("docker", backend, all_boxes, run_id, list_only)
    finally:
        backend.close()


def reap_ray_cluster(address: str, all_boxes: bool, run_id: str | None, list_only: bool) -> int:
    """Every live machine of the cluster that offers sandbox slots, reaped on its own; returns the boxes
    removed, and prints a section per machine."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from sandbox.backends.ray_hosts import SLOT

    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    try:
        machines = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(SLOT)]
        if not machines:
            print(f"ray {address}: no live machine offers {SLOT}")
        task = ray.remote(reap_this_machine)
        runs = {
            n["NodeID"]: task.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            ).remote(all_boxes, run_id, list_only)
            for n in machines
        }
        total = 0
        for n in machines:
            print(
                f"ray machine {n['NodeManagerAddress']} (node {n['NodeID'][:12]}, {n['Resources'][SLOT]:g} {SLOT}):"
            )
            try:
                lines: list[Any] = ray.get(runs[n["NodeID"]], timeout=RAY_TASK_TIMEOUT_S)
            except Exception as exc:  # its engine or its node is down: the other machines still count
                print(f"  unavailable ({type(exc).__name__}: {str(exc)[:300]})")
                continue
            for line in lines:
                print(f"  {line}")
            total += int(lines[-1].split()[-1])
        return total
    finally:
        ray.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=[*BACKENDS, "both"], default="both", help="both: every backend")
    ap.add_argument("--all", action="store_true", help="also boxes of live owners")
    ap.add_argument("--run-id", help="only the boxes of this run")
    ap.add_argument("--list", action="store_true", help="list boxes, remove nothing")
    ap.add_argument(
        "--docker-host",
        action="append",
        default=[],
        metavar="URL",
        help="a Docker endpoint to cover (repeatable; default: DOCKER_HOST or the podman socket)",
    )
    ap.add_argument("--config", type=Path, help="also cover the sandbox.docker_hosts of this training YAML")
    ap.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="also every machine of this Ray cluster that offers sandbox_slots ('auto': this machine's)",
    )
    args = ap.parse_args()
    Settings().export()  # GBOX_API_KEY and DOCKER_HOST from .env too
    hosts = list(args.docker_host)
    ray_address = args.ray
    if args.config:
        section = (yaml.safe_load(args.config.read_text()) or {}).get("sandbox") or {}
        hosts += [h for h in section.get("docker_hosts") or [] if h not in hosts]
        if section.get("backend") == "ray" and not ray_address:
            ray_address = section.get("ray_address") or os.environ.get("RAY_ADDRESS") or "auto"
    if args.backend == "ray" and not ray_address:
        ray_address = os.environ.get("RAY_ADDRESS") or "auto"
    total = 0
    for name in BACKENDS if args.backend == "both" else (args.backend,):
        if name == "ray":
            continue  # a trainer's RayBackend knows its own boxes alone: the cluster is reaped below
        try:
            backend = make_backend(
                name, run_id="reaper", **({"docker_hosts": hosts} if name == "docker" else {})
            )
            lines = reap_boxes(name, backend, args.all, args.run_id, args.list)
        except Exception as exc:  # e.g. no podman service: nothing of this kind to reap
            print(f"{name}: unavailable ({exc})", file=sys.stderr)
            continue
        print("\n".join(lines[:-1])) if lines[:-1] else None
        total += int(lines[-1].split()[-1])
    if ray_address:
        try:
            total += reap_ray_cluster(ray_address, args.all, args.run_id, args.list)
        except ConnectionError as exc:
            print(f"ray: no Ray cluster at {ray_address} ({exc})", file=sys.stderr)
            return 1
    print(f"removed {total} sandbox(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
