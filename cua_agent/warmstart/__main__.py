"""Build a warm-started policy: the oracles play task rows through the agent loop in real sandboxes
(demonstrations), then supervised training of the base model on every turn of the solved episodes.

    python -m cua_agent.warmstart [--out DIR] [--base MODEL] [--task-ids miniwob/click-test,...]
        [--seeds-per-task 64] [--epochs 15] [--lr 5e-3] [--batch 4] [--force]

Writes DIR (an HF model folder that vLLM serves and GRPO trains; default: the tiny model's warm start,
which setup builds), DIR/warmstart.json (inputs, demo counts, losses, timings) and keeps the supervised
rows in DIR/demos.pt. A DIR built from the same inputs (arguments, base model, task file, the code that
makes a demonstration row) is kept as it is; a build goes to DIR.partial and replaces DIR only when done.
The defaults are the measured tiny recipe (docs/warm-start.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Only light imports here: an up-to-date warm start is recognised (setup runs this every time) before
# torch and areal are loaded.
from cua_agent.inference.local_server import (
    MODELS,
    REPO,
    SMALL_SCREEN_TASKS,
    SMALL_SCREEN_WARM_MODEL,
    WARM_MODEL,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m cua_agent.warmstart", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help=f"default: {WARM_MODEL}")
    ap.add_argument("--base", type=Path, default=MODELS["untied"])
    ap.add_argument("--tasks", help=f"default: {REPO / 'tasks' / 'miniwob.jsonl'}")
    ap.add_argument(
        "--small-screen",
        action="store_true",
        help=f"the warm start at 400x300 instead: --tasks {SMALL_SCREEN_TASKS.relative_to(REPO)} --out "
        f"{SMALL_SCREEN_WARM_MODEL} (make learn's and the learning test's; setup builds both)",
    )
    ap.add_argument("--split", default="train")
    ap.add_argument("--task-ids", default="miniwob/click-test")
    ap.add_argument("--seeds-per-task", type=int, default=64)
    # The oracle's turns: a click-test demonstration is one click whatever this is (the task ends there);
    # tasks of several actions (enter-text: click, type, submit) need more.
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument(
        "--history-screenshots",
        type=int,
        default=2,
        help="as the training config's agent.history_screenshots",
    )
    ap.add_argument(
        "--model-family", default="qwen2.5-vl", help="as the training config's agent.model_family"
    )
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--lr", type=float, default=5e-3)
    # 4: one click row per episode, so a batch of 4 sees as many clicks as a batch of 8 did when each
    # episode also had its `done` row; 8 (120 steps) left 27% of first answers malformed.
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--force", action="store_true", help="build even when DIR is up to date")
    args = ap.parse_args(argv)
    # Not an input of its own: a warm start built with it is the one built with its --tasks and --out.
    small = args.__dict__.pop("small_screen")
    args.out = args.out or (SMALL_SCREEN_WARM_MODEL if small else WARM_MODEL)
    args.tasks = args.tasks or str(SMALL_SCREEN_TASKS if small else REPO / "tasks" / "miniwob.jsonl")
    return args


# The code that decides what a demonstration row is: the oracles, the agent's prompting, parsing and
# episode loop, the row builder, the processor, and this package.
HASHED_SOURCES = ("cua_agent/warmstart", "cua_agent/episode", "cua_agent/rollout/rows.py",
                  "cua_agent/inference/processing.py", "sandbox/oracles")  # fmt: skip
STAMP = ".warmstart_hash"


def inputs_hash(args: argparse.Namespace) -> str:
    h = hashlib.sha256()
    for k, v in sorted(vars(args).items()):
        if k not in ("out", "force", "concurrency", "tasks"):  # the task file: its content, below
            h.update(f"{k}={v}\n".encode())
    base_stamp = args.base / ".inputs_hash"  # the tiny model's own inputs; else its weights
    for f in [base_stamp] if base_stamp.is_file() else sorted(args.base.glob("*.safetensors")):
        h.update(f.read_bytes())
    h.update(Path(args.tasks).read_bytes())
    for src in HASHED_SOURCES:
        path = REPO / src
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f"{f.relative_to(REPO)}\n".encode() + f.read_bytes())
    return h.hexdigest()[:16]


def demonstrations(args: argparse.Namespace, view: Any) -> tuple[list[dict], dict[str, Any]]:
    """Supervised rows of the solved episodes, and counts (with why the other episodes gave none)."""
    import asyncio
    from dataclasses import replace

    from cua_agent.config import SandboxConfig
    from cua_agent.episode.loop import EpisodeConfig
    from cua_agent.rollout.rows import RowBuilder
    from cua_agent.rollout.sandboxes import RolloutSandboxes
    from cua_agent.rollout.task_rows import load_task_rows
    from cua_agent.warmstart.demos import record, supervised_row

    task_ids = [t for t in args.task_ids.split(",") if t]
    rows = load_task_rows(args.tasks, args.split, task_ids, seeds_per_task=args.seeds_per_task)
    sandbox = replace(SandboxConfig(), max_concurrency=args.concurrency, warm=0)
    cfg = EpisodeConfig(
        max_turns=args.max_turns, history_screenshots=args.history_screenshots, model_family=args.model_family
    )

    async def run() -> list:
        boxes = RolloutSandboxes(sandbox)
        try:
            return await record(rows, boxes, view, cfg, concurrency=args.concurrency, failures=failures)
        finally:
            await boxes.close()

    failures: list[str] = []
    solved = asyncio.run(run())
    builder = RowBuilder(view)
    supervised = [supervised_row(t, view, builder) for _, turns in solved for t in turns]
    counts = {"episodes": len(rows), "solved": len(solved), "rows": len(supervised)}
    return supervised, counts | {"failures": failures}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    final, want = args.out, inputs_hash(args)
    stamp = final / STAMP
    if not args.force and stamp.is_file() and stamp.read_text().strip() == want:
        print(f"warm start {final}: up to date", file=sys.stderr)
        return 0
    args.out = final.with_name(final.name + ".partial")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    import torch

    from cua_agent.episode.model_view import ModelView

    view = ModelView.of_model(args.base, args.model_family)
    start = time.monotonic()
    rows, counts = demonstrations(args, view)
    demo_s = time.monotonic() - start
    failures = counts.pop("failures")
    if failures:
        shown = "\n  ".join(failures[:5]) + (f"\n  ... {len(failures) - 5} more" if len(failures) > 5 else "")
        print(f"{len(failures)} oracle episode(s) gave no demonstration:\n  {shown}", file=sys.stderr)
    if not rows:
        print("no demonstration: every oracle episode failed (above: why)", file=sys.stderr)
        return 1
    torch.save(rows, args.out / "demos.pt")
    print(
        f"{counts['solved']}/{counts['episodes']} episodes solved by the oracles, {counts['rows']} rows "
        f"in {demo_s:.0f}s",
        file=sys.stderr,
    )
    start = time.monotonic()
    # Its own process: torch.distributed and FSDP state are process-global. Its epoch lines are the
    # progress shown here; the rest of its output only when it fails.
    cmd = [sys.executable, "-m", "cua_agent.warmstart.sft", str(args.out / "demos.pt"), str(args.base),
           str(args.out), "--epochs", str(args.epochs), "--lr", str(args.lr), "--batch", str(args.batch)]  # fmt: skip
    losses, lrs, lines = [], [], []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as sft:
        assert sft.stdout is not None
        for line in sft.stdout:
            lines.append(line)
            if line.startswith('{"epoch"'):
                epoch = json.loads(line)
                losses.append(epoch["loss"])
                lrs.append(epoch["lr"])
                print(f"supervised epoch {epoch['epoch']}/{args.epochs}: loss {epoch['loss']:.3f} "
                      f"({epoch['s']:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    if sft.returncode != 0:
        print("".join(lines[-60:]), file=sys.stderr)
        return 1
    info = {
        "args": {k: str(v) for k, v in vars(args).items()} | {"out": str(final)},
        **counts,
        "losses": losses,
        "lrs": lrs,
        "demo_s": round(demo_s, 1),
        "sft_s": round(time.monotonic() - start, 1),
    }
    (args.out / "warmstart.json").write_text(json.dumps(info, indent=2) + "\n")
    (args.out / STAMP).write_text(want + "\n")
    shutil.rmtree(final, ignore_errors=True)
    args.out.rename(final)
    print(json.dumps({k: v for k, v in info.items() if k != "args"}), file=sys.stderr)
    print(f"warm start {final}: built", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
