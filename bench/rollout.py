"""Rollout machinery throughput: AReaL's executor + our agent loop, with the model and the sandbox replaced by
fixed-latency stand-ins, so that only the concurrency of the machinery is measured. One run prints:

1. episodes/s at K concurrent episodes (K = 8, 32), through AReaL's WorkflowExecutor
   (`max_concurrent_rollouts=K`, `rollout_batch`), against the ideal K / episode latency;
2. a simulated training loop on the same workload (`prepare_batch` → fixed "train" sleep → pause,
   `set_version(v+1)`, resume, as PPOTrainer does) with `max_head_offpolicyness=0` (synchronous) and `=2`
   (asynchronous): seconds per step, each against its ideal, and the ratio sync / async.

What is real: `StockVLLMEngine` (AReaL's `RemoteInfEngine`: WorkflowExecutor, StalenessManager, the
rollout thread's event loop), `cua_agent.episode.loop.run_episode` (prompt building with base64 screenshots, the
action parser, history), a trivial RolloutWorkflow returning a one-row trajectory.

What stands in, and why (the real components are measured elsewhere: the sandbox in bench/sandbox.py, the
model server in bench/inference.py; here their speed would hide the machinery's):
- sandbox → `FixedLatencySandbox`: reset / screenshot / step / evaluate each `asyncio.sleep` a fixed
  latency and return one pre-encoded 1280x800 PNG;
- model → `FixedLatencyChat`: sleeps a fixed latency, then answers a valid Qwen-style click tool call
  (`format_tool_call`), so the real parser runs and every turn steps the sandbox; it returns no token ids
  (as evaluation clients do), so no training rows are built from processor outputs;
- vLLM server → a local HTTP stub answering GET /health and POST /resume: all the engine's `initialize`
  asks (it health-checks servers, and resumes any a killed trainer left paused); no other request is
  sent to it because the stand-in chat client does not call the engine.
Not in the loop: the tokenizer's prompt-token count (`count_tokens`) and RowBuilder.row (image processor),
both CPU work that the real CUAWorkflow does in the rollout thread.

Episode latency = 3 env calls (reset, first screenshot, evaluate) + turns x (model call + step). AReaL's
`prepare_batch` waits for results in 1 s slices and enqueues the next batch only when a slice times out,
so the async loop overlaps rollouts with training only when a batch takes > 1 s (real CUA episodes take
tens of seconds); the defaults keep episodes above that.

    python bench/rollout.py [--ks 8 32] [--rounds 4] [--turns 5] [--model-ms 150] [--step-ms 100]
                            [--batch 8] [--loop-k 8] [--steps 8] [--train-ms <episode latency>]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import math
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import torch
from areal.api.cli_args import InferenceEngineConfig
from areal.api.workflow_api import RolloutWorkflow
from PIL import Image, ImageDraw
from torchdata.stateful_dataloader import StatefulDataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.episode.actions import Click
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.loop import EpisodeConfig, run_episode
from cua_agent.episode.tool_calls import format_tool_call
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.model_call import ModelCall
from sandbox.base import Sandbox

SCREEN = (1280, 800)
NO_STALENESS_LIMIT = int(1e12)  # as AReaL sets for evaluation: only max_concurrent_rollouts binds


@dataclass(frozen=True)
class Workload:
    turns: int
    model_s: float
    env_s: float

    @property
    def episode_s(self) -> float:
        """Ideal episode latency: reset + first screenshot + evaluate, and per turn a model call + a step."""
        return 3 * self.env_s + self.turns * (self.model_s + self.env_s)


def screen_png() -> bytes:
    """One 1280x800 screenshot-like PNG (flat areas and a few widgets), encoded once and reused."""
    img = Image.new("RGB", SCREEN, (240, 240, 240))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, SCREEN[0], 40), fill=(50, 60, 80))
    for i in range(12):
        draw.rectangle((100, 80 + 50 * i, 700, 115 + 50 * i), outline=(90, 90, 90), fill=(255, 255, 255))
        draw.text((110, 90 + 50 * i), f"field {i}", fill=(0, 0, 0))
    draw.rectangle((560, 700, 720, 740), fill=(30, 110, 220))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class FixedLatencySandbox:
    """The `Sandbox` methods run_episode calls, each a fixed sleep (no box, no HTTP)."""

    def __init__(self, latency_s: float, png: bytes):
        self.latency_s, self.png = latency_s, png

    async def reset(
        self, task_id: str, seed: int = 0, source: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        await asyncio.sleep(self.latency_s)
        return {"instruction": "Click the blue button."}

    async def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> bytes:
        await asyncio.sleep(self.latency_s)
        return self.png

    async def step(
        self, action: dict[str, Any], max_width: int | None = None, max_height: int | None = None
    ) -> tuple[dict[str, Any], bytes]:
        await asyncio.sleep(self.latency_s)
        return {"ok": True}, self.png

    async def evaluate(self, wait_s: float = 0.5, gave_up: bool = False) -> dict[str, Any]:
        await asyncio.sleep(self.latency_s)
        return {"reward": 1.0}


class FixedLatencyChat:
    """A chat client that answers the same valid click after a fixed latency (no token ids)."""

    def __init__(self, latency_s: float, text: str):
        self.latency_s, self.text = latency_s, text

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall:
        await asyncio.sleep(self.latency_s)
        return ModelCall(self.text)


class StandInEpisode(RolloutWorkflow):
    """One real `run_episode` on the stand-ins → one minimal training row (version at episode start)."""

    def __init__(self, work: Workload, png: bytes):
        self.work, self.png = work, png
        self.mapping = CoordinateMapping.identity(*SCREEN)
        self.reply = format_tool_call(Click(640, 720), self.mapping)
        self.cfg = EpisodeConfig(max_turns=work.turns, history_screenshots=2)
        self.walls: list[float] = []  # appended in the rollout thread, read between batches
        self.failures: list[str] = []

    async def arun_episode(self, engine: StockVLLMEngine, data: dict[str, Any]) -> dict[str, Any] | None:
        version = engine.get_version()
        sandbox = cast(Sandbox, FixedLatencySandbox(self.work.env_s, self.png))
        client = FixedLatencyChat(self.work.model_s, self.reply)
        task = {"task_id": "bench/click", "seed": int(data["seed"])}
        ep = await run_episode(sandbox, client, task, self.cfg, self.mapping)
        # Anything but `turns` executed clicks means the stand-ins no longer exercise the loop as intended.
        if not ep.ok or len(ep.turns) != self.work.turns or any(t.note != "ok" for t in ep.turns):
            self.failures.append(f"{ep.status} {ep.error} {[t.note for t in ep.turns]}")
            return None
        self.walls.append(ep.wall_s)
        n_prompt, n_out = 4, 2
        n = n_prompt + n_out
        return {
            "input_ids": torch.zeros(1, n, dtype=torch.long),
            "attention_mask": torch.ones(1, n, dtype=torch.bool),
            "loss_mask": torch.tensor([[0] * n_prompt + [1] * n_out], dtype=torch.int32),
            "logprobs": torch.zeros(1, n, dtype=torch.float32),
            "versions": torch.tensor([[-1] * n_prompt + [version] * n_out], dtype=torch.int32),
            "rewards": torch.tensor([float(ep.task_reward or 0.0)], dtype=torch.float32),
        }

    def check(self) -> None:
        if self.failures:
            raise RuntimeError(f"{len(self.failures)} stand-in episode(s) failed, first: {self.failures[0]}")


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.send_response(200 if self.path == "/resume" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # keep the bench's output to its numbers
        pass


@contextmanager
def health_stub() -> Iterator[str]:
    """A local server that answers GET /health and POST /resume: all `initialize` asks of a server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, name="health-stub", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def engine_on(
    address: str, k: int, consumer_batch_size: int, offpolicyness: int
) -> Iterator[StockVLLMEngine]:
    config = InferenceEngineConfig(
        max_concurrent_rollouts=k,
        consumer_batch_size=consumer_batch_size,
        max_head_offpolicyness=offpolicyness,
        setup_timeout=30,
        request_timeout=60,
        request_retries=1,
    )
    engine = StockVLLMEngine(config)
    engine.initialize(addr=[address], train_data_parallel_size=1)
    try:
        yield engine
    finally:
        engine.destroy()


def _batch(engine: StockVLLMEngine, wf: StandInEpisode, n: int, seed0: int) -> None:
    rows = engine.rollout_batch([{"seed": seed0 + i} for i in range(n)], workflow=wf)
    wf.check()
    if len(rows) != n:
        raise RuntimeError(f"{n - len(rows)} of {n} episodes were rejected by the executor")


def throughput(address: str, work: Workload, png: bytes, k: int, rounds: int) -> dict[str, float]:
    """Episodes/s of `rounds * k` episodes at concurrency k, after one k-episode warm-up batch."""
    wf = StandInEpisode(work, png)
    with engine_on(address, k, consumer_batch_size=k, offpolicyness=NO_STALENESS_LIMIT) as engine:
        _batch(engine, wf, k, seed0=0)  # warm-up: the rollout thread's event loop, first prompt/parse
        wf.walls.clear()
        n = rounds * k
        start = time.perf_counter()
        _batch(engine, wf, n, seed0=k)
        elapsed = time.perf_counter() - start
    measured, ideal = n / elapsed, k / work.episode_s
    return {
        "k": k,
        "episodes": n,
        "measured_eps": measured,
        "ideal_eps": ideal,
        "ratio": measured / ideal,
        "episode_wall_s": statistics.mean(wf.walls),
    }


def training_loop(
    address: str,
    work: Workload,
    png: bytes,
    k: int,
    batch: int,
    steps: int,
    train_s: float,
    offpolicyness: int,
) -> dict[str, float]:
    """PPOTrainer's step order with a sleep for training; steps after the first are timed (the first has
    nothing to overlap with in either mode)."""
    wf = StandInEpisode(work, png)
    loader = StatefulDataLoader(
        [{"seed": i} for i in range(4 * batch)], batch_size=batch, shuffle=False, collate_fn=lambda xs: xs
    )
    step_s: list[float] = []
    lags: list[int] = []
    with engine_on(address, k, consumer_batch_size=batch, offpolicyness=offpolicyness) as engine:
        for version in range(steps):
            start = time.perf_counter()
            trajs = engine.prepare_batch(loader, workflow=wf)
            wf.check()
            if len(trajs) != batch:
                raise RuntimeError(f"prepare_batch returned {len(trajs)} trajectories, expected {batch}")
            # How many versions behind the consumer the oldest episode of the batch started.
            lags.append(version - min(int(t["versions"].max()) for t in trajs))
            time.sleep(train_s)  # training; sleep releases the GIL as GPU work would
            engine.pause()  # as PPOTrainer around the weight update
            engine.set_version(version + 1)
            engine.resume()
            step_s.append(time.perf_counter() - start)
    rollout_s = math.ceil(batch / k) * work.episode_s
    ideal = rollout_s + train_s if offpolicyness == 0 else max(rollout_s, train_s)
    return {
        "offpolicyness": offpolicyness,
        "step_s": statistics.mean(step_s[1:]),
        "ideal_step_s": ideal,
        "max_lag": max(lags),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ks", type=int, nargs="+", default=[8, 32], help="concurrent episodes to measure")
    p.add_argument("--rounds", type=int, default=4, help="timed episodes per K: rounds x K")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--model-ms", type=float, default=150.0, help="stand-in model call latency")
    p.add_argument("--step-ms", type=float, default=100.0, help="stand-in sandbox latency, every call")
    p.add_argument("--batch", type=int, default=8, help="training loop: episodes per step")
    p.add_argument("--loop-k", type=int, default=8, help="training loop: max_concurrent_rollouts")
    p.add_argument("--steps", type=int, default=8, help="training loop: steps per setting (first untimed)")
    p.add_argument("--train-ms", type=float, default=None, help="training loop: default = episode latency")
    p.add_argument("--async-offpolicyness", type=int, default=2)
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps must be >= 2 (the first step is not timed)")

    work = Workload(turns=args.turns, model_s=args.model_ms / 1000, env_s=args.step_ms / 1000)
    train_s = work.episode_s if args.train_ms is None else args.train_ms / 1000
    png = screen_png()
    with health_stub() as address:
        tput = {k: throughput(address, work, png, k, args.rounds) for k in args.ks}
        loop = {
            ofp: training_loop(address, work, png, args.loop_k, args.batch, args.steps, train_s, ofp)
            for ofp in (0, args.async_offpolicyness)
        }
    sync, asyn = loop[0], loop[args.async_offpolicyness]
    result = {
        "episode_s": work.episode_s,
        "throughput": tput,
        "loop": loop,
        "sync_over_async": sync["step_s"] / asyn["step_s"],
        "ideal_sync_over_async": sync["ideal_step_s"] / asyn["ideal_step_s"],
    }

    print(
        f"stand-ins: {work.turns} turns x (model {args.model_ms:.0f} ms + step {args.step_ms:.0f} ms) + "
        f"reset/screenshot/evaluate 3 x {args.step_ms:.0f} ms = episode {work.episode_s:.2f} s; "
        f"PNG {len(png)} bytes"
    )
    print(f"throughput: AReaL executor, max_concurrent_rollouts=K, {args.rounds}K episodes after K warm-up")
    print(f"{'K':>4} {'episodes':>8} {'ep/s':>7} {'ideal':>7} {'ratio':>6} {'mean episode s':>15}")
    for r in tput.values():
        print(
            f"{r['k']:>4} {r['episodes']:>8} {r['measured_eps']:>7.2f} {r['ideal_eps']:>7.2f} "
            f"{r['ratio']:>5.2f}x {r['episode_wall_s']:>15.3f}"
        )
    if math.ceil(args.batch / args.loop_k) * work.episode_s <= 1.0:
        print("note: a batch takes <= 1 s, so prepare_batch never prefetches: async cannot overlap here")
    print(
        f"training loop: K={args.loop_k}, batch {args.batch}, train {train_s:.2f} s/step, "
        f"{args.steps} steps, steps 2..{args.steps} timed"
    )
    print(f"{'max_head_offpolicyness':>22} {'s/step':>7} {'ideal':>7} {'max lag':>8}")
    for r in loop.values():
        print(f"{r['offpolicyness']:>22} {r['step_s']:>7.2f} {r['ideal_step_s']:>7.2f} {r['max_lag']:>8}")
    print(
        f"sync/async step time: {result['sync_over_async']:.2f}x "
        f"(ideal {result['ideal_sync_over_async']:.2f}x)"
    )
    return result


if __name__ == "__main__":
    main()
