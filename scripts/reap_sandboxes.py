#!/usr/bin/env python
"""Removes leftover sandboxes (manual cleanup; pools also reap at start).

python scripts/reap_sandboxes.py             # boxes whose owner process is gone (docker and local)
python scripts/reap_sandboxes.py --all       # every cua sandbox on this host, running owners included
python scripts/reap_sandboxes.py --list      # show, remove nothing
python scripts/reap_sandboxes.py --run-id X  # the boxes of one run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.backends import make_backend
from sandbox.base import owner_alive


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["docker", "local", "both"], default="both")
    ap.add_argument("--all", action="store_true", help="also boxes of live owners")
    ap.add_argument("--run-id", help="only the boxes of this run")
    ap.add_argument("--list", action="store_true", help="list boxes, remove nothing")
    args = ap.parse_args()
    total = 0
    for name in ("docker", "local") if args.backend == "both" else (args.backend,):
        try:
            backend = make_backend(name, run_id="reaper")
            boxes = backend.list_boxes(run_id=args.run_id)
        except Exception as exc:  # e.g. no podman service: nothing of this kind to reap
            print(f"{name}: unavailable ({exc})", file=sys.stderr)
            continue
        for box in boxes:
            labels = box["labels"]
            alive = owner_alive(labels)
            doomed = args.all or args.run_id is not None or not alive
            print(
                f"{name:6} {box['id']:<22} run={labels.get('cua.run_id', '?'):<28} "
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
