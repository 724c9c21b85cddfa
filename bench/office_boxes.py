#!/usr/bin/env python
"""Office boxes against the desktop box and OSWorld's VM, in one run (docker backend, podman here):

1. image size: cua-sandbox-office against cua-sandbox (the engine's own figures);
2. cold start to the first screenshot with the application open (box start, reset, screenshot), per
   application of the office suite, against the same for a MiniWoB task in the desktop image;
3. reset between episodes: an office box serves one episode, so the next episode is a fresh box, which is
   (2); also the reset alone (the application closed and opened again on a live box).

OSWorld's figures for its VM (its Docker provider's defaults; the disk image is OSWorld's Ubuntu qcow2):
4 cores and 4 GB of memory per VM, a 32 GB disk, a boot awaited for up to 300 s, KVM required for speed.

  python bench/office_boxes.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec

TASKS = {
    "Calc": "office/calc-total",
    "Writer": "office/writer-append",
    "Impress": "office/impress-title",
    "text editor": "office/editor-append-line",
    "terminal": "office/terminal-mkdir",  # its set-up launches xterm, then sleeps 1 s (OSWorld's way)
    "browser": "office/browser-bookmark",  # launches chromium, then sleeps 2 s
}
REFERENCE = ("MiniWoB (chromium), desktop image", "miniwob/click-test", "cua-sandbox:latest")
OFFICE = "cua-sandbox-office:latest"
OSWORLD = "OSWorld VM: 4 cores, 4 GB, 32 GB disk; boot awaited up to 300 s"


def image_mb(image: str) -> float:
    out = subprocess.run(
        ["podman", "image", "inspect", image, "--format", "{{.Size}}"], capture_output=True, text=True
    )
    return int(out.stdout.strip()) / 1e6 if out.returncode == 0 else float("nan")


async def cold_start(backend: DockerBackend, image: str, task: str, seed: int) -> tuple[float, float]:
    """(box start to first screenshot with the app open, the reset alone on that live box)."""
    t0 = time.monotonic()
    sb = await backend.start(SandboxSpec(image=image, memory_mb=1536))
    try:
        await sb.reset(task, seed)
        await sb.screenshot()
        cold = time.monotonic() - t0
        t1 = time.monotonic()
        await sb.reset(task, seed + 1)
        await sb.screenshot()
        return cold, time.monotonic() - t1
    finally:
        await backend.stop(sb)


async def main(runs: int) -> None:
    setup = Path(__file__).resolve().parent.parent / "scripts" / "setup_sandbox.sh"
    subprocess.run(["bash", str(setup), "office_image"], check=True)  # built on first use, else a no-op
    backend = DockerBackend(run_id="bench-office")
    rows = [(*REFERENCE[:1], REFERENCE[1], REFERENCE[2])] + [
        (app, task, OFFICE) for app, task in TASKS.items()
    ]
    results = {}
    try:
        for name, task, image in rows:
            await cold_start(backend, image, task, 0)  # page cache warm, as in a run after its first box
            samples = [await cold_start(backend, image, task, 100 + i) for i in range(runs)]
            results[name] = (
                statistics.median(s[0] for s in samples),
                statistics.median(s[1] for s in samples),
            )
    finally:
        backend.close()
    ref = results[REFERENCE[0]][0]
    desk, office = image_mb(REFERENCE[2]), image_mb(OFFICE)
    print(
        f"image: {OFFICE} {office:.0f} MB, {REFERENCE[2]} {desk:.0f} MB ({office / desk:.2f}x, +{office - desk:.0f} MB)"
    )
    print(f"runs per row: {runs} (medians)\n")
    print(
        "| application | cold start to first screenshot, app open | vs MiniWoB box | reset alone (live box) |"
    )
    print("| --- | --- | --- | --- |")
    for name, (cold, reset) in results.items():
        print(f"| {name} | {cold:.2f} s | {cold / ref:.2f}x | {reset:.2f} s |")
    print(f"\nreference for the VM: {OSWORLD}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    asyncio.run(main(ap.parse_args().runs))
