"""Held-out evaluation during training: after a step's weight update, the policy as the vLLM servers now
serve it plays the `evaluation` section's rows once each (greedy by default) through the servers'
OpenAI API, on boxes of its own. Run by the trainer's rank 0 (cua_agent/train/trainer.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable
from pathlib import Path

from areal.utils import logging

from cua_agent.config import CUAGRPOConfig
from cua_agent.episode.chat import OpenAIChatClient
from cua_agent.episode.loop import Episode, EpisodeConfig
from cua_agent.episode.model_view import ModelView
from cua_agent.evaluate.report import Report
from cua_agent.evaluate.runner import EvalConfig, evaluate
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from cua_agent.rollout.outcomes import succeeded
from cua_agent.rollout.task_rows import rows_of_files
from cua_agent.terminal.loop import TerminalConfig

logger = logging.getLogger("HeldOutEval")  # AReaL's loggers reach outputs/<exp>/logs/training.log


class EvalProgress:
    """A line at most every `every_s` while the evaluation plays: episodes done of all, success so far."""

    def __init__(self, total: int, every_s: float = 30.0, log: Callable[[str], None] = logger.info):
        self.total, self.every_s, self.log = total, every_s, log
        self.done = self.wins = 0
        self._last = time.monotonic()

    def __call__(self, ep: Episode, final: bool) -> None:
        if not final:
            return  # an infrastructure failure played again
        self.done += 1
        self.wins += succeeded(ep)
        now = time.monotonic()
        if now - self._last >= self.every_s and self.done < self.total:
            self._last = now
            self.log(
                f"Held-out eval: {self.done}/{self.total} episodes, success so far {self.wins / self.done:.0%}"
            )


class HeldOutEval:
    """Built once per run: the held-out rows (a split that names no row fails here, at start-up), the
    model's view and the episode settings. `run` plays the rows against the servers as they serve now."""

    def __init__(self, config: CUAGRPOConfig):
        ev, agent, tasks = config.evaluation, config.agent, config.tasks
        paths = [tasks.valid_path] if tasks.valid_path else [tasks.train_path, *tasks.extra_train_paths]
        rows = rows_of_files(paths, ev.split, list(ev.task_ids or tasks.task_ids), ev.seeds_per_task)
        self.rows = [row for row in rows for _ in range(ev.episodes_per_seed)]
        self.view = ModelView.of_model(config.tokenizer_path or config.actor.path, agent.model_family)
        self.cfg = EvalConfig(
            EpisodeConfig.of(agent), ev.concurrency, ev.retries, terminal=TerminalConfig.of(agent)
        )
        self.boxes = dataclasses.replace(config.sandbox, max_concurrency=ev.concurrency, warm=0)
        self.sampling = SamplingParams(max_tokens=agent.max_new_tokens, temperature=ev.temperature)
        self.meta = {"split": ev.split, "temperature": ev.temperature}

    def run(self, addresses: list[str], out_dir: Path, model: str | None = None) -> Report:
        """`model`: the name the servers serve the policy under (a LoRA run's adapter of the current
        version); None: the model they were started with."""
        return asyncio.run(self._run(addresses, out_dir, model))

    async def _run(self, addresses: list[str], out_dir: Path, model: str | None) -> Report:
        clients = []
        try:
            for a in addresses:
                name = model or await VLLMServer(a).served_model()
                clients.append(OpenAIChatClient(f"http://{a}/v1", name, sampling=self.sampling))
            turn = itertools.cycle(clients)
            return await evaluate(
                self.rows,
                lambda: next(turn),
                self.boxes,
                self.cfg,
                out_dir,
                view=self.view,
                meta={**self.meta, "servers": addresses, "model": clients[0].model},
                on_attempt=EvalProgress(len(self.rows)),
            )
        finally:
            for c in clients:
                await c.close()
            await close_loop_session()


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
