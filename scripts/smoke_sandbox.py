#!/usr/bin/env python
"""Runs the scripted oracle (or a random agent) on N tasks through a sandbox backend; prints the reward
per task. Exit status 1 if an oracle run scores below 1.

  python scripts/smoke_sandbox.py --backend docker --boxes 2 -n 30
  python scripts/smoke_sandbox.py --backend local --tasks miniwob/click-test desktop/editor-save
  python scripts/smoke_sandbox.py --task-files tasks/office.jsonl --seed 100000   (needs the office image)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.backends import BACKENDS, make_backend
from sandbox.base import SandboxSpec
from sandbox.oracles import random_actions, solve, supported_tasks
from sandbox.pool import SandboxPool
from sandbox.tasks import load_tasks

REPO = Path(__file__).resolve().parent.parent


async def run_task(pool: SandboxPool, task_id: str, seed: int, agent: str, spec: SandboxSpec) -> dict:
    t0 = time.monotonic()
    async with pool.sandbox(spec) as sb:
        reset = await sb.reset(task_id, seed)
        n_actions = 0
        if agent == "oracle":
            n_actions = len((await solve(sb)).actions)
        else:
            await random_actions(sb, 5, random.Random(f"{task_id}:{seed}"), *sb.spec.screen)
            n_actions = 5
        result = await sb.evaluate(wait_s=1.0)
    return {
        "task_id": task_id,
        "seed": seed,
        "reward": result["reward"],
        "actions": n_actions,
        "instruction": reset["instruction"],
        "seconds": round(time.monotonic() - t0, 2),
        "info": result.get("info", {}),
    }


async def main_async(args: argparse.Namespace) -> int:
    specs = [t for f in args.task_files for t in load_tasks(REPO / f)]
    if args.tasks:
        task_ids = args.tasks
    else:
        known = set(supported_tasks())
        task_ids = list(dict.fromkeys(t.task_id for t in specs if t.task_id in known))
    task_ids = task_ids[: args.n] if args.n else task_ids
    backend = make_backend(args.backend)
    default = SandboxSpec(image=args.image)
    # Each task's box as training starts it: its row's `sandbox` block over the defaults.
    box_spec = {t.task_id: t.sandbox_spec(default) for t in reversed(specs)}  # the first row of an id wins
    results = []
    async with SandboxPool(backend, default, max_size=args.boxes, warm=args.boxes) as pool:
        sem = asyncio.Semaphore(args.boxes)

        async def one(tid: str) -> None:
            async with sem:
                try:
                    r = await run_task(pool, tid, args.seed, args.agent, box_spec.get(tid, default))
                except Exception as exc:
                    r = {
                        "task_id": tid,
                        "seed": args.seed,
                        "reward": 0.0,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                results.append(r)
                print(
                    f"{r['task_id']:<34} reward {r['reward']:.2f}  "
                    f"{r.get('seconds', '-')} s  {r.get('error') or r.get('instruction', '')[:90]}",
                    flush=True,
                )

        await asyncio.gather(*(one(t) for t in task_ids))
    ok = sum(r["reward"] >= 1.0 for r in results)
    print(
        f"{args.agent}: {ok}/{len(results)} tasks with reward 1 (mean {sum(r['reward'] for r in results) / max(1, len(results)):.2f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if args.agent != "oracle" or ok == len(results) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="docker", choices=BACKENDS)
    ap.add_argument("--image", default="cua-sandbox:latest", help="for tasks whose row names no image")
    ap.add_argument("--agent", default="oracle", choices=["oracle", "random"])
    ap.add_argument(
        "--tasks", nargs="*", help="task ids (default: every task of tasks/*.jsonl with an oracle)"
    )
    ap.add_argument("-n", type=int, default=0, help="run only the first N tasks")
    ap.add_argument("--boxes", type=int, default=2, help="concurrent sandboxes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--task-files",
        nargs="+",
        default=["tasks/miniwob.jsonl", "tasks/desktop.jsonl"],
        help="relative to the repo",
    )
    ap.add_argument("--json", help="write the per-task results here")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
