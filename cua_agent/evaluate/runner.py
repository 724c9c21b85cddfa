"""Run the agent on task rows for evaluation: the training loop's episode code (prompting, parser, history,
coordinate mapping) against any chat client, each row once, with bounded concurrency.

An episode lost to infrastructure (a dead box, a server error after the client's own retries, a timeout)
is played again on a fresh box, up to `retries` times; if it never completes it is reported apart, never
scored as a failure of the model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cua_agent.episode.chat import ChatClient
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import family_named
from cua_agent.episode.loop import Episode, EpisodeConfig, run_episode
from cua_agent.episode.model_view import ModelView
from cua_agent.evaluate.report import Report
from cua_agent.rollout.recorder import RolloutRecorder
from cua_agent.rollout.sandboxes import RolloutSandboxes
from cua_agent.terminal.loop import TerminalConfig, play_row
from sandbox.aio import finish, gather_all
from sandbox.errors import SandboxError
from sandbox.repo.tasks import RepoTaskFiles


@dataclass(frozen=True)
class EvalConfig:
    episode: EpisodeConfig
    concurrency: int = 4  # episodes at once
    retries: int = 2  # plays again of an episode lost to infrastructure
    terminal: TerminalConfig = field(default_factory=TerminalConfig)  # rows of repository tasks


class EvalRunner:
    """`view`: the model's processor (its resize decides the "absolute" convention's image size and the
    prompt budget's token counts); None for a model that sees the screen as it is (a hosted API). The
    coordinate convention is the model family's (cfg.episode.model_family)."""

    def __init__(
        self,
        client_for: Callable[[], ChatClient],
        sandboxes: RolloutSandboxes,
        cfg: EvalConfig,
        *,
        view: ModelView | None = None,
    ):
        if view is None and cfg.episode.max_prompt_tokens is not None:
            raise ValueError("max_prompt_tokens needs the model's processor to count tokens (--processor)")
        self.client_for, self.sandboxes, self.cfg = client_for, sandboxes, cfg
        self.view = view
        self.convention = family_named(cfg.episode.model_family).convention
        self.repo_tasks = RepoTaskFiles()

    def mapping(self, screen: tuple[int, int]) -> CoordinateMapping:
        if self.view is not None:
            return self.view.mapping(*screen)
        return CoordinateMapping(*screen, *screen, self.convention)  # type: ignore[arg-type]

    async def run(
        self, rows: list[dict[str, Any]], on_attempt: Callable[[Episode, bool], None] | None = None
    ) -> list[Episode]:
        """One final episode per row, in row order. `on_attempt(episode, final)` sees every attempt."""
        gate = asyncio.Semaphore(self.cfg.concurrency)
        seen = on_attempt or (lambda ep, final: None)

        async def one(row: dict[str, Any]) -> Episode:
            async with gate:
                ep = await self._attempt(row)
                for _ in range(self.cfg.retries):
                    if ep.ok:
                        break
                    seen(ep, False)
                    ep = await self._attempt(row)
                seen(ep, True)
                return ep

        return list(await gather_all(*(one(r) for r in rows)))

    async def _attempt(self, row: dict[str, Any]) -> Episode:
        if row.get("agent", "gui") == "terminal":
            count = self.view.count_tokens if self.view is not None else None
            return await play_row(
                self.sandboxes, self.client_for(), row, self.cfg.terminal, self.repo_tasks, count
            )
        pool = await self.sandboxes.pool()
        spec = self.sandboxes.spec_for(row)
        try:
            sb = await pool.acquire(spec, timeout=self.sandboxes.config.acquire_timeout_s)
        except SandboxError as exc:
            return Episode(row["task_id"], int(row["seed"]), status="infra_error", error=f"acquire: {exc}")
        broken = True
        try:
            budget: dict[str, Any] = {}
            if self.view is not None and self.cfg.episode.max_prompt_tokens is not None:
                budget = {
                    "count_tokens": self.view.count_tokens,
                    "image_tokens": self.view.image_tokens(*sb.spec.screen) - 1,
                }
            ep = await run_episode(
                sb, self.client_for(), row, self.cfg.episode, self.mapping(sb.spec.screen), **budget
            )
            broken = ep.box_spoiled
            return ep
        finally:
            await finish(pool.release(sb, broken=broken))

    async def close(self) -> None:
        await self.sandboxes.close()


async def evaluate(
    rows: list[dict[str, Any]],
    client_for: Callable[[], ChatClient],
    sandbox_config: Any,
    cfg: EvalConfig,
    out_dir: Path,
    *,
    view: ModelView | None = None,
    save_screenshots: bool = False,
    on_attempt: Callable[[Episode, bool], None] | None = None,
    meta: dict[str, Any] | None = None,
) -> Report:
    """Play every row once, each episode with the client `client_for()` gives (the caller closes them), on
    boxes of `sandbox_config` (a SandboxConfig); every attempt goes to <out_dir>/rollouts.jsonl, the report
    to report.json and report.md."""
    runner = EvalRunner(client_for, RolloutSandboxes(sandbox_config), cfg, view=view)
    recorder = RolloutRecorder(out_dir / "rollouts.jsonl", save_screenshots)
    retried = 0

    def attempt(ep: Episode, final: bool) -> None:
        nonlocal retried
        retried += int(not final)
        recorder.record([ep], {}, group_id=None)
        if on_attempt is not None:
            on_attempt(ep, final)

    runner.sandboxes.preflight()
    start = time.monotonic()
    try:
        episodes = await runner.run(rows, attempt)
    finally:
        await runner.close()
    report = Report.of(
        episodes, {**(meta or {}), "infra_retries": retried, "wall_s": round(time.monotonic() - start, 1)}
    )
    report.write(out_dir)
    return report
