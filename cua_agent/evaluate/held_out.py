"""Held-out evaluation during training: after a step's weight update, the policy as the vLLM servers now
serve it plays the `evaluation` section's rows once each (greedy by default) through the servers'
OpenAI API, on boxes of its own. Run by the trainer's data-parallel head (cua_agent/train/trainer.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import urllib.request
from pathlib import Path
from typing import Any

from cua_agent.config import CUAGRPOConfig
from cua_agent.episode.chat import OpenAIChatClient
from cua_agent.episode.loop import EpisodeConfig
from cua_agent.episode.model_view import ModelView
from cua_agent.evaluate.report import Report
from cua_agent.evaluate.runner import EvalConfig, evaluate
from cua_agent.inference.processing import load_processor
from cua_agent.inference.vllm_server import SamplingParams
from cua_agent.rollout.task_rows import load_task_rows


def served_model(address: str, timeout_s: float = 10.0) -> str:
    """The name a vLLM server serves its model under (GET /v1/models)."""
    with urllib.request.urlopen(f"http://{address}/v1/models", timeout=timeout_s) as r:
        return json.load(r)["data"][0]["id"]


def held_out_rows(config: CUAGRPOConfig) -> list[dict[str, Any]]:
    ev, tasks = config.evaluation, config.tasks
    return load_task_rows(
        tasks.valid_path or tasks.train_path,
        ev.split,
        list(ev.task_ids or tasks.task_ids),
        seeds_per_task=ev.seeds_per_task,
    )


def evaluate_held_out(config: CUAGRPOConfig, addresses: list[str], out_dir: Path) -> Report:
    ev, agent = config.evaluation, config.agent
    sampling = SamplingParams(max_tokens=agent.max_new_tokens, temperature=ev.temperature)
    clients = [OpenAIChatClient(f"http://{a}/v1", served_model(a), sampling=sampling) for a in addresses]
    turn = itertools.cycle(clients)
    cfg = EvalConfig(EpisodeConfig.of(agent), concurrency=ev.concurrency, retries=ev.retries)
    view = ModelView(load_processor(config.tokenizer_path or config.actor.path), agent.coordinate_convention)
    boxes = dataclasses.replace(config.sandbox, max_concurrency=ev.concurrency, warm=0)

    async def run() -> Report:
        try:
            return await evaluate(
                held_out_rows(config),
                lambda: next(turn),
                boxes,
                cfg,
                out_dir,
                view=view,
                convention=agent.coordinate_convention,
                meta={"split": ev.split, "temperature": ev.temperature, "servers": addresses},
            )
        finally:
            for c in clients:
                await c.close()

    return asyncio.run(run())


def eval_stats(report: Report) -> dict[str, float]:
    """eval/<scope>/<metric>: scope "all" or a task id."""
    out: dict[str, float] = {}
    for scope, s in [("all", report.overall), *report.tasks.items()]:
        out[f"eval/{scope}/episodes"] = s.episodes
        out[f"eval/{scope}/success_rate"] = s.success_rate
        if scope == "all":
            out["eval/all/ci95_low"], out["eval/all/ci95_high"] = s.ci95
            out["eval/all/task_reward"] = s.task_reward
            out["eval/all/format_failure_rate"] = s.format_failure_rate
            out["eval/all/turns"] = s.turns
            out["eval/all/infra_failures"] = s.infra_failures
    return out
