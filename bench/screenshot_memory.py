#!/usr/bin/env python
"""Host memory of a group's training rows: screenshots as fp32 pixel values in every row (before) against
PNG bytes held once per episode (now, cua_agent/rollout/rows.py), at Qwen2.5-VL-7B's image resize.

The rows are real: `RowBuilder.row` on model calls whose prompts carry exactly the image tokens the
processor expects. "Before" is what the former RowBuilder held per row: the processor's pixel values of the
row's images (measured by running the processor on them, as it did) plus the same token tensors. The
processor is the tiny model's (its tokenizer), with the image processor of Qwen2.5-VL-7B-Instruct's
preprocessor_config.json (tests/fixtures/models): only the resize and normalisation matter here.

Screenshots: real 1280x800 MiniWoB screens from a local-backend sandbox (a few tasks, after random clicks),
or desktop-like synthetic frames with --synthetic (no sandbox needed). A group is --episodes episodes of
--turns turns; each row shows the newest --history screenshots, as the agent loop does.

Also printed: event-loop time per row (before: the processor; now: PNG headers) and the trainer's time
to build one row's pixel values (now done per micro-batch in the trainer, cua_agent/train/patches.py).

    python bench/screenshot_memory.py [--episodes 8] [--turns 10] [--history 2] [--groups-per-step 8]
                                      [--mb-rows 8] [--synthetic]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.model_call import ModelCall
from cua_agent.inference.processing import load_processor
from cua_agent.rollout.rows import SCREENSHOTS, RowBuilder, batch_pixel_values, pixel_values

# Qwen2.5-VL-7B-Instruct's shape files (config.json, preprocessor_config.json; no weights).
SHAPE_7B = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "models" / "qwen2.5-vl-7b"
MB = 1e6


def processor_7b() -> Any:
    from transformers import AutoImageProcessor

    proc = load_processor(MODELS["untied"])
    proc.image_processor = AutoImageProcessor.from_pretrained(SHAPE_7B, use_fast=True)
    return proc


def synthetic_screens(n: int) -> list[bytes]:
    out = []
    for seed in range(n):
        rng = random.Random(seed)
        img = Image.new("RGB", (1280, 800), (236, 236, 236))
        draw = ImageDraw.Draw(img)
        for _ in range(40):
            x, y = rng.randint(0, 1180), rng.randint(0, 760)
            draw.rectangle([x, y, x + 100, y + 32], fill=tuple(rng.randint(0, 255) for _ in range(3)))
            draw.text((x + 6, y + 10), rng.choice(["OK", "Submit", "Cancel", "Next"]), fill=(0, 0, 0))
        buf = io.BytesIO()
        img.save(buf, "PNG")
        out.append(buf.getvalue())
    return out


async def sandbox_screens(n: int) -> list[bytes]:
    from sandbox.backends.local import LocalBackend
    from sandbox.base import SandboxSpec

    tasks = ["miniwob/click-button", "miniwob/enter-text", "miniwob/click-checkboxes", "miniwob/email-inbox"]
    backend = LocalBackend()
    box = await backend.start(SandboxSpec())
    out: list[bytes] = []
    try:
        rng = random.Random(0)
        while len(out) < n:
            await box.reset(tasks[len(out) % len(tasks)], len(out))
            out.append(await box.screenshot())
            _, png = await box.step({"type": "click", "x": rng.randint(0, 1279), "y": rng.randint(0, 799)})
            out.append(png)
    finally:
        await backend.stop(box)
    return out[:n]


def group_calls(view: ModelView, screens: list[bytes], episodes: int, turns: int, history: int) -> list[Any]:
    """Model calls as the loop makes them: turn t embeds the newest `history` screenshots (the same
    bytes objects), and the server's prompt holds their image tokens."""
    calls, k = [], 0
    for _ in range(episodes):
        shots: list[bytes] = []
        for _t in range(turns):
            shots.append(screens[k % len(screens)])
            k += 1
            images = shots[-history:]
            n_img = sum(view.image_tokens(*Image.open(io.BytesIO(p)).size) for p in images)
            prompt = [1] * 600 + [view.image_token_id] * n_img + [2] * 200  # text around the images
            calls.append(
                ModelCall("", prompt, [3] * 60, [-1.0] * 60, latency_s=0.0, version=0, images=images)
            )
    return calls


def tensor_bytes(x: Any) -> int:
    if torch.is_tensor(x):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(tensor_bytes(v) for v in x.values())
    if isinstance(x, list | tuple):
        return sum(tensor_bytes(v) for v in x)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--history", type=int, default=2)
    ap.add_argument("--groups-per-step", type=int, default=8)
    ap.add_argument("--mb-rows", type=int, default=8, help="rows in the timed trainer micro-batch")
    ap.add_argument("--synthetic", action="store_true", help="desktop-like frames instead of a sandbox's")
    args = ap.parse_args()

    n_screens = args.episodes * args.turns
    t0 = time.monotonic()
    screens = synthetic_screens(n_screens) if args.synthetic else asyncio.run(sandbox_screens(n_screens))
    source = "synthetic" if args.synthetic else "MiniWoB (local sandbox)"
    print(
        f"{len(screens)} screenshots, {source}, in {time.monotonic() - t0:.0f}s: "
        f"PNG {statistics.median(len(s) for s in screens) / 1e3:.0f} kB median"
    )

    proc = processor_7b()
    view = ModelView(proc, "qwen2.5-vl")
    ip = proc.image_processor
    calls = group_calls(view, screens, args.episodes, args.turns, args.history)
    builder = RowBuilder(view)

    now_rows, now_s = [], []
    for c in calls:
        t = time.perf_counter()
        now_rows.append(builder.row(c, 0.0))
        now_s.append(time.perf_counter() - t)
    token_bytes = sum(
        tensor_bytes({k: v for k, v in r.items() if k != "multi_modal_input"}) for r in now_rows
    )
    grid_bytes = sum(tensor_bytes(r.get("multi_modal_input", [])) for r in now_rows)
    distinct = {
        id(p): len(p) for r in now_rows for m in r.get("multi_modal_input", []) for p in m[SCREENSHOTS]
    }
    now_bytes = token_bytes + grid_bytes + sum(distinct.values())

    before_bytes, before_s, decode_s = token_bytes, [], []
    for r, c in zip(now_rows, calls, strict=True):
        t = time.perf_counter()
        images = [Image.open(io.BytesIO(p)).convert("RGB") for p in c.images]
        enc = ip(images=images, return_tensors="pt")  # what the former RowBuilder did, per row
        before_s.append(time.perf_counter() - t)
        before_bytes += tensor_bytes(enc["pixel_values"]) + tensor_bytes(enc["image_grid_thw"])
        t = time.perf_counter()
        pixel_values(r["multi_modal_input"][0], ip)  # what the trainer now does, per micro-batch
        decode_s.append(time.perf_counter() - t)

    grid = view.grid(1280, 800)
    per_image = grid[0] * grid[1] * grid[2] * ip.temporal_patch_size * ip.patch_size**2 * 3 * 4
    rows = len(calls)
    print(
        f"7B resize of 1280x800: grid {grid}, {view.image_tokens(1280, 800)} image tokens, "
        f"{per_image / MB:.1f} MB fp32 pixel values per image"
    )
    print(
        f"group: {args.episodes} episodes x {args.turns} turns = {rows} rows, {args.history} screenshots per row"
    )
    print(
        f"  before (pixel values in every row): {before_bytes / MB:9.1f} MB per group, "
        f"{before_bytes * args.groups_per_step / 1e9:6.2f} GB per step of {args.groups_per_step} groups"
    )
    print(
        f"  now    (PNG once per episode)     : {now_bytes / MB:9.1f} MB per group, "
        f"{now_bytes * args.groups_per_step / 1e9:6.2f} GB per step  "
        f"(tokens {token_bytes / MB:.1f} MB, {len(distinct)} PNGs {sum(distinct.values()) / MB:.1f} MB)"
    )
    print(f"  ratio before / now: {before_bytes / now_bytes:.0f}x")
    print(
        f"rollout event loop per row: before {statistics.median(before_s) * 1e3:.1f} ms, "
        f"now {statistics.median(now_s) * 1e3:.2f} ms (median)"
    )
    print(
        f"trainer, pixel values of one row (per micro-batch, each forward): "
        f"{statistics.median(decode_s) * 1e3:.1f} ms median"
    )
    mb = [r["multi_modal_input"][0] for r in now_rows[: args.mb_rows]]
    workers = os.cpu_count() or 1
    t = time.perf_counter()
    batch_pixel_values(mb, ip)
    serial = time.perf_counter() - t
    t = time.perf_counter()
    batch_pixel_values(mb, ip, workers)
    pooled = time.perf_counter() - t
    print(
        f"trainer, a micro-batch of {len(mb)} rows: serial {serial:.2f}s, {workers} threads {pooled:.2f}s "
        f"({serial / pooled:.1f}x)"
    )


if __name__ == "__main__":
    main()
