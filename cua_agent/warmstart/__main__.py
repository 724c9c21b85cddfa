"""Build a warm-started policy: the oracles play task rows through the agent loop in real sandboxes
(demonstrations), then supervised training of the base model on every turn of the solved episodes.

    python -m cua_agent.warmstart --out DIR [--base MODEL] [--task-ids miniwob/click-test,...]
        [--seeds-per-task 64] [--epochs 20] [--lr 1e-3] [--batch 16]

Writes DIR (an HF model folder that vLLM serves and GRPO trains), DIR/warmstart.json (inputs, demo
counts, losses, timings) and keeps the supervised rows in DIR/demos.pt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from cua_agent.config import AgentConfig, SandboxConfig
from cua_agent.episode.loop import EpisodeConfig
from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.processing import load_processor
from cua_agent.rollout.rows import RowBuilder
from cua_agent.rollout.sandboxes import RolloutSandboxes
from cua_agent.rollout.task_rows import load_task_rows
from cua_agent.warmstart.demos import record, supervised_row


def parse_args(argv: list[str]) -> argparse.Namespace:
    agent = AgentConfig()
    ap = argparse.ArgumentParser(prog="python -m cua_agent.warmstart", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--base", type=Path, default=MODELS["untied"])
    ap.add_argument("--tasks", default="tasks/miniwob.jsonl")
    ap.add_argument("--split", default="train")
    ap.add_argument("--task-ids", default="miniwob/click-test")
    ap.add_argument("--seeds-per-task", type=int, default=64)
    ap.add_argument("--max-turns", type=int, default=agent.max_turns)
    ap.add_argument("--history-screenshots", type=int, default=agent.history_screenshots)
    ap.add_argument("--coordinate-convention", default=agent.coordinate_convention)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=16)
    return ap.parse_args(argv)


def demonstrations(args: argparse.Namespace, view: ModelView) -> tuple[list[dict], dict[str, int]]:
    """Supervised rows of the solved episodes, and counts."""
    task_ids = [t for t in args.task_ids.split(",") if t]
    rows = load_task_rows(args.tasks, args.split, task_ids, seeds_per_task=args.seeds_per_task)
    sandbox = replace(SandboxConfig(), max_concurrency=args.concurrency, warm=0)
    cfg = EpisodeConfig(max_turns=args.max_turns, history_screenshots=args.history_screenshots)

    async def run() -> list:
        boxes = RolloutSandboxes(sandbox)
        try:
            return await record(rows, boxes, view, cfg, concurrency=args.concurrency)
        finally:
            await boxes.close()

    solved = asyncio.run(run())
    builder = RowBuilder(view)
    supervised = [supervised_row(t, view, builder) for _, turns in solved for t in turns]
    return supervised, {"episodes": len(rows), "solved": len(solved), "rows": len(supervised)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    view = ModelView(load_processor(args.base), args.coordinate_convention)
    start = time.monotonic()
    rows, counts = demonstrations(args, view)
    demo_s = time.monotonic() - start
    if not rows:
        print("no demonstration: every oracle episode failed", file=sys.stderr)
        return 1
    torch.save(rows, args.out / "demos.pt")
    print(
        f"{counts['solved']}/{counts['episodes']} episodes solved by the oracles, {counts['rows']} rows "
        f"in {demo_s:.0f}s",
        file=sys.stderr,
    )
    start = time.monotonic()
    sft = subprocess.run(  # its own process: torch.distributed and FSDP state are process-global
        [sys.executable, "-m", "cua_agent.warmstart.sft", str(args.out / "demos.pt"), str(args.base), str(args.out),
         "--epochs", str(args.epochs), "--lr", str(args.lr), "--batch", str(args.batch)],
        capture_output=True, text=True,
    )  # fmt: skip
    if sft.returncode != 0:
        print(sft.stdout[-3000:] + sft.stderr[-3000:], file=sys.stderr)
        return 1
    losses = [json.loads(line)["loss"] for line in sft.stdout.splitlines() if line.startswith('{"epoch"')]
    info = {
        "args": {k: str(v) for k, v in vars(args).items()},
        **counts,
        "losses": losses,
        "demo_s": round(demo_s, 1),
        "sft_s": round(time.monotonic() - start, 1),
    }
    (args.out / "warmstart.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "args"}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
