"""OpenMP threads that spin against threads that sleep while they wait (cua_agent/openmp.py), alone and beside
another process running torch on the same cores, as a CPU run's trainer and vLLM server always share them.

Trainer: ppo_update of 16 warm-start rows (1280x800 screenshots, ~1,500 tokens each: a step of make local's shape),
configs/local_cpu.yaml's actor, one rank. vLLM: 16 requests (8 at once), each a new screenshot and 24 tokens.
Each side is measured in a fresh process per policy (libgomp reads it when it loads); the load is a process
of 2 torch threads at libgomp's default. Prints the mean of 3 measurements (stalls are what spinning costs) and the
ratio spinning / sleeping.

    python bench/omp_wait.py [--part trainer|vllm|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POLICIES = {
    "spinning (libgomp's default)": {},
    "sleeping (OMP_WAIT_POLICY=PASSIVE)": {"OMP_WAIT_POLICY": "PASSIVE"},
}
LOAD = "import torch\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\nwhile True:\n    a = torch.tanh(a @ a.T / 512)\n"


def env_without_openmp() -> dict[str, str]:
    """This environment without OpenMP settings: a child's libgomp then loads with its defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}


def with_load(fn):
    """fn() beside a process that keeps 2 torch threads busy."""
    load = subprocess.Popen([sys.executable, "-c", LOAD], env=env_without_openmp())
    try:
        time.sleep(2)
        return fn()
    finally:
        load.kill()
        load.wait()


def trainer_seconds() -> dict[str, float]:
    from tests.training.one_update import timed_warm_update

    update, actor = timed_warm_update()
    out = {
        "alone": mean(update() for _ in range(3)),
        "beside the load": with_load(lambda: mean(update() for _ in range(3))),
    }
    actor.destroy()
    return out


def vllm_seconds() -> dict[str, float]:
    from cua_agent.inference.local_server import MODELS, start_vllm
    from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
    from tests.inference.reference import chat_messages, screenshot

    async def burst(address: str, first_seed: int) -> float:
        server, sampling, sem = (
            VLLMServer(address),
            SamplingParams(max_tokens=24, ignore_eos=True),
            asyncio.Semaphore(8),
        )

        async def one(seed: int) -> None:
            async with sem:
                await server.chat(chat_messages([screenshot(seed)], "Click the Submit button."), sampling)

        start = time.perf_counter()
        await asyncio.gather(*(one(first_seed + i) for i in range(16)))
        return time.perf_counter() - start

    async def measure(address: str) -> dict[str, float]:
        try:
            await burst(address, 1000)  # a fresh server's first requests are slow
            alone = mean([await burst(address, 16 * i) for i in range(3)])

            async def loaded() -> float:
                return mean([await burst(address, 100 + 16 * i) for i in range(3)])

            return {
                "alone": alone,
                "beside the load": await asyncio.to_thread(with_load, lambda: asyncio.run(loaded())),
            }
        finally:
            await close_loop_session()

    proc = start_vllm(MODELS["untied"], Path(tempfile.mkdtemp()))  # the policy comes with this process's env
    try:
        proc.wait_healthy(400)
        return asyncio.run(measure(proc.address))
    finally:
        proc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["trainer", "vllm", "both"], default="both")
    ap.add_argument("--measure", choices=["trainer", "vllm"], help=argparse.SUPPRESS)  # the child's job
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(trainer_seconds() if args.measure == "trainer" else vllm_seconds()))
        return
    for part in ("trainer", "vllm") if args.part == "both" else (args.part,):
        results = {}
        for name, setting in POLICIES.items():
            env = env_without_openmp() | setting
            out = subprocess.run(
                [sys.executable, __file__, "--measure", part],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        what = "ppo_update of 16 rows" if part == "trainer" else "16 vLLM requests"
        for where in ("alone", "beside the load"):
            spin, sleep = (results[name][where] for name in POLICIES)
            print(
                f"{what}, {where}: spinning {spin:.1f} s, sleeping {sleep:.1f} s, spinning / sleeping {spin / sleep:.2f}"
            )


if __name__ == "__main__":
    main()
