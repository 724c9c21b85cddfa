#!/usr/bin/env python
"""Removes leftover sandboxes (manual cleanup; pools also reap at start).

python scripts/reap_sandboxes.py             # boxes whose owner process is gone (docker, local, and gbox
                                             # when GBOX_API_KEY is set: environment or .env)
python scripts/reap_sandboxes.py --all       # every cua sandbox on this host, running owners included
python scripts/reap_sandboxes.py --list      # show, remove nothing
python scripts/reap_sandboxes.py --run-id X  # the boxes of one run
python scripts/reap_sandboxes.py --config configs/cua_grpo.yaml   # every endpoint of sandbox.docker_hosts
python scripts/reap_sandboxes.py --docker-host unix:///a.sock --docker-host unix:///b.sock
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from cua_agent.settings import Settings
from sandbox.backends import BACKENDS, make_backend
from sandbox.base import owner_alive


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
    args = ap.parse_args()
    Settings().export()  # GBOX_API_KEY and DOCKER_HOST from .env too
    hosts = list(args.docker_host)
    if args.config:
        section = (yaml.safe_load(args.config.read_text()) or {}).get("sandbox") or {}
        hosts += [h for h in section.get("docker_hosts") or [] if h not in hosts]
    total = 0
    for name in BACKENDS if args.backend == "both" else (args.backend,):
        try:
            backend = make_backend(
                name, run_id="reaper", **({"docker_hosts": hosts} if name == "docker" else {})
            )
            boxes = backend.list_boxes(run_id=args.run_id)
        except Exception as exc:  # e.g. no podman service: nothing of this kind to reap
            print(f"{name}: unavailable ({exc})", file=sys.stderr)
            continue
        for box in boxes:
            labels = box["labels"]
            alive = owner_alive(labels)
            doomed = args.all or args.run_id is not None or not alive
            where = f" {box['endpoint']}" if "endpoint" in box else ""
            print(
                f"{name:6}{where} {box['id']:<22} run={labels.get('cua.run_id', '?'):<28} "
                f"owner={labels.get('cua.owner_pid', '?')} ({'alive' if alive else 'gone'}) "
                f"{'-> remove' if doomed and not args.list else ''}"
            )
            if doomed and not args.list:
                backend.remove_sync(box["id"])
                total += 1
        if name == "docker" and not args.list and not args.run_id:
            backend.reap(all_boxes=args.all)  # also stale socket folders
    print(f"removed {total} sandbox(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
