"""Generation throughput of the vLLM CPU server vs plain HF `generate`, same prompts, same run.

Each request: one 1280x800 screenshot (640 image tokens) + an instruction, N_NEW sampled tokens
(ignore_eos, so every request generates exactly that many). n=1: requests one after another; n=8: eight
at once (vLLM: concurrent requests; HF: one batched `generate`). Prints tokens/s and the ratio vLLM / HF.

--layouts instead compares two layouts of the vLLM CPU server, each started afresh in the same run: as
scripts/run_vllm_cpu.sh ships it (VLLM_ENABLE_V1_MULTIPROCESSING=0: the model runs in the engine's process)
against vLLM's CPU default (a separate worker process): seconds to /health, and tokens/s at n=1 and n=8.

    python bench/inference.py [--model DIR] [--new-tokens 64] [--requests 8] [--layouts]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.inference.local_server import MODELS, start_vllm
from cua_agent.inference.processing import load_processor
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from tests.inference.reference import chat_messages, screenshot

INSTRUCTION = "Click the Submit button."


async def vllm_tokens_per_s(address: str, n_concurrent: int, n_requests: int, new_tokens: int) -> float:
    server = VLLMServer(address)
    sampling = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    await server.chat(chat_messages([screenshot(99)], INSTRUCTION), sampling)  # warm-up
    sem = asyncio.Semaphore(n_concurrent)

    async def one(i: int) -> int:
        async with sem:
            gen = await server.chat(chat_messages([screenshot(i)], INSTRUCTION), sampling)
            return len(gen.output_token_ids)

    start = time.perf_counter()
    total = sum(await asyncio.gather(*(one(i) for i in range(n_requests))))
    elapsed = time.perf_counter() - start
    await close_loop_session()
    return total / elapsed


@torch.no_grad()
def hf_tokens_per_s(model_dir: Path, batch: int, n_requests: int, new_tokens: int) -> float:
    from transformers import AutoModelForImageTextToText

    processor = load_processor(model_dir)
    processor.tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": INSTRUCTION}]}],
        add_generation_prompt=True,
    )

    def generate(seeds: list[int]) -> int:
        enc = processor(
            text=[text] * len(seeds), images=[screenshot(s) for s in seeds], return_tensors="pt", padding=True
        )
        out = model.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True)
        return (out.shape[1] - enc["input_ids"].shape[1]) * len(seeds)

    generate([99])  # warm-up
    start = time.perf_counter()
    total = sum(generate(list(range(i, min(i + batch, n_requests)))) for i in range(0, n_requests, batch))
    return total / (time.perf_counter() - start)


def served(
    model: Path, requests: int, new_tokens: int, env: dict | None = None
) -> tuple[float, dict[int, float]]:
    """A fresh server's seconds to /health, and its tokens/s at n=1 and n=8."""
    with tempfile.TemporaryDirectory() as logs:
        start = time.perf_counter()
        proc = start_vllm(model, Path(logs), extra_env=env)
        try:
            proc.wait_healthy(400)
            healthy = time.perf_counter() - start
            return healthy, {
                n: asyncio.run(vllm_tokens_per_s(proc.address, n, requests, new_tokens)) for n in (1, 8)
            }
        finally:
            proc.stop()


def compare_layouts(args: argparse.Namespace) -> None:
    layouts = {  # the second: vLLM's CPU platform turns `uni` into a worker process when this is 1
        "model in the engine process (shipped)": None,
        "separate worker process (vLLM's CPU default)": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
    }
    found = {name: served(args.model, args.requests, args.new_tokens, env) for name, env in layouts.items()}
    print(
        f"model {args.model.name}, {args.requests} requests x {args.new_tokens} new tokens, 1 screenshot each"
    )
    print(f"{'layout':<46} {'to /health':>10} {'tok/s n=1':>10} {'tok/s n=8':>10}")
    for name, (healthy, rate) in found.items():
        print(f"{name:<46} {healthy:>9.1f}s {rate[1]:>10.1f} {rate[8]:>10.1f}")
    (h0, r0), (h1, r1) = found.values()
    print(
        f"shipped / default: start {h0 / h1:.2f}x the time, throughput {r0[1] / r1[1]:.2f}x (n=1), {r0[8] / r1[8]:.2f}x (n=8)"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=MODELS["untied"])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--layouts", action="store_true", help="compare the server's process layouts instead")
    args = p.parse_args()
    if args.layouts:
        compare_layouts(args)
        return 0

    _, vllm = served(args.model, args.requests, args.new_tokens)
    hf = {n: hf_tokens_per_s(args.model, n, args.requests, args.new_tokens) for n in (1, 8)}

    print(
        f"model {args.model.name}, {args.requests} requests x {args.new_tokens} new tokens, 1 screenshot each"
    )
    print(f"{'concurrency':>11} {'vLLM tok/s':>11} {'HF tok/s':>9} {'vLLM/HF':>8}")
    for n in (1, 8):
        print(f"{n:>11} {vllm[n]:>11.1f} {hf[n]:>9.1f} {vllm[n] / hf[n]:>7.2f}x")
    print(f"vLLM n=8 vs n=1: {vllm[8] / vllm[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
