"""Inference-path smoke run on the embedded default: start the vLLM CPU server on the tiny model, send a
chat with a 1280x800 screenshot, push a weight update from disk, check the server serves the new version,
stop the server. Everything it starts, it stops (also on Ctrl-C).

    python -m cua_agent.inference.smoke [--model DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import shutil
import sys
import time
from pathlib import Path

from PIL import Image, ImageDraw

from .local_server import MODELS, start_vllm
from .vllm_server import SamplingParams, VLLMServer, close_loop_session
from .weight_sync import update_servers_from_disk


def _screenshot_url() -> str:
    img = Image.new("RGB", (1280, 800), (236, 236, 236))
    ImageDraw.Draw(img).rectangle([560, 380, 720, 420], fill=(30, 110, 220))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


async def _run(address: str, model: Path, out: Path) -> None:
    server = VLLMServer(address)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": _screenshot_url()}},
                {"type": "text", "text": "Click the blue button."},
            ],
        }
    ]
    try:
        gen = await server.chat(messages, SamplingParams(max_tokens=16))
        print(
            f"chat: {len(gen.prompt_token_ids)} prompt ids (image tokens expanded), "
            f"{len(gen.output_token_ids)} output ids with logprobs, {gen.latency_s:.2f}s"
        )
        checkpoint = out / "weight_update_v1"
        shutil.copytree(model, checkpoint, dirs_exist_ok=True)
        start = time.perf_counter()
        await update_servers_from_disk([server], str(checkpoint), version=1)
        print(f"weight update from {checkpoint}: {time.perf_counter() - start:.2f}s")
        print(f"server serves weight version {await server.weight_version()}")
    finally:
        await close_loop_session()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=MODELS["untied"])
    p.add_argument("--out", type=Path, default=Path("outputs/smoke"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"starting vLLM CPU server on {args.model} (log: {args.out / 'vllm.log'}; takes ~30-75 s)")
    proc = start_vllm(args.model, args.out)
    try:
        proc.wait_healthy(400)
        print(f"server ready at {proc.address}")
        asyncio.run(_run(proc.address, args.model, args.out))
    finally:
        proc.stop()
        print("server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
