"""AReaL RolloutWorkflow: a group of G episodes of one task → one exact training row per turn.

`arun_episode` runs the group concurrently, each episode by the agent its row names: the GUI agent on
desktop boxes of the pool, the terminal agent on a repository box of its task (rollout/sandboxes.py). It
returns the group's rows (rollout/rows.py), each with the episode's group-normalised reward, optionally
discounted by turn (rollout/rewards.py), or None when the group is rejected. Episodes lost to infrastructure are
dropped; a group left with fewer than `min_group_size` episodes is rejected — an infrastructure failure
never becomes a reward of 0. Every episode goes to rollouts.jsonl (rollout/recorder.py). `run_group` also
returns the group's `GroupRecord` (its id in rollouts.jsonl and the tallies of its scored episodes), rejected
or not, for the training run's step metrics. The group's rows and its lines in rollouts.jsonl are made in a
thread of their own, one group at a time: the rollout loop keeps stepping the other groups' episodes
meanwhile, and the loop's default executor keeps its threads for the engines' calls.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from areal.api.workflow_api import RolloutWorkflow
from areal.utils import logging
from areal.utils.data import concat_padded_tensors

from cua_agent.episode.chat import EngineChatClient
from cua_agent.episode.loop import Episode, EpisodeConfig, run_episode
from cua_agent.episode.model_view import ModelView
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.vllm_server import SamplingParams
from cua_agent.rollout.outcomes import GroupRecord, tally
from cua_agent.rollout.recorder import RolloutRecorder
from cua_agent.rollout.rewards import RewardConfig, episode_reward, normalise_group, turn_rewards
from cua_agent.rollout.rows import PlaceholderInOutput, RowBuilder, RowMismatchError
from cua_agent.rollout.sandboxes import RolloutSandboxes
from cua_agent.terminal.loop import TerminalConfig, play_row
from sandbox.aio import finish, gather_all
from sandbox.errors import SandboxError
from sandbox.pool import SandboxPool
from sandbox.repo.tasks import RepoTaskFiles

log = logging.getLogger("CUAWorkflow")  # AReaL's loggers reach outputs/<exp>/logs/training.log


class CUAWorkflow(RolloutWorkflow):
    """Built by the trainer as `CUAWorkflow(config=config)` (a CUAGRPOConfig)."""

    def __init__(self, config: Any, rollouts_path: str | Path | None = None):
        agent = config.agent
        self.group_size, self.min_group_size = agent.group_size, agent.min_group_size
        self.view = ModelView.of_model(config.tokenizer_path or config.actor.path, agent.model_family)
        self.rows = RowBuilder(self.view)
        stop = [self.view.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.sampling = SamplingParams(
            max_tokens=agent.max_new_tokens,
            temperature=agent.temperature,
            stop_token_ids=stop,
            banned_token_ids=self.view.vision_token_ids,
        )
        self.episode_cfg = EpisodeConfig.of(agent)
        self.terminal_cfg = TerminalConfig.of(agent)
        self.repo_tasks = RepoTaskFiles()
        self.rewards = RewardConfig(
            format_reward=agent.format_reward,
            quit_penalty=agent.quit_penalty,
            turn_discount=agent.turn_discount,
            std_norm=agent.advantage_std_norm,
        )
        self.sandboxes = RolloutSandboxes(config.sandbox)
        self.recorder = (
            RolloutRecorder(Path(rollouts_path), agent.save_screenshots, agent.screenshots_budget_mb)
            if rollouts_path is not None
            else RolloutRecorder.for_run(config)
        )
        self.stats = {"episodes": 0, "infra_failures": 0, "groups_rejected": 0, "rows": 0}
        self._rows_thread: ThreadPoolExecutor | None = None  # made on the first group

    def preflight(self) -> None:
        self.sandboxes.preflight()

    def remove_own_sandboxes(self) -> list[str]:
        return self.sandboxes.remove_own()

    async def close(self) -> None:
        await self.sandboxes.close()
        if self._rows_thread is not None:
            self._rows_thread.shutdown(wait=False)
            self._rows_thread = None

    async def arun_episode(self, engine: StockVLLMEngine, data: dict[str, Any]) -> dict[str, Any] | None:
        """The group's training rows, or None when the group is rejected (too few usable episodes)."""
        batch, _ = await self.run_group(engine, data)
        return batch

    async def run_group(
        self, engine: StockVLLMEngine, data: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, GroupRecord]:
        """`arun_episode`'s result, and the group's record."""
        pool = await self.sandboxes.pool()
        episodes = await gather_all(*(self._episode(engine, pool, data) for _ in range(self.group_size)))
        group_id = uuid.uuid4().hex[:12]
        if self._rows_thread is None:  # one thread: groups that end together share the stats
            self._rows_thread = ThreadPoolExecutor(1, thread_name_prefix="cua-rows")
        batch = await asyncio.get_running_loop().run_in_executor(
            self._rows_thread, self.group_to_batch, list(episodes), data, group_id
        )
        return batch, GroupRecord(group_id, data["task_id"], int(data["seed"]), tally(episodes))

    def group_to_batch(
        self, episodes: list[Episode], data: dict[str, Any], group_id: str | None = None
    ) -> dict[str, Any] | None:
        """The group's training rows (one per model call), or None if too few episodes are usable. Its
        episodes go to rollouts.jsonl under `group_id` (a new one if None)."""
        group_id = group_id or uuid.uuid4().hex[:12]
        ok = [ep for ep in episodes if ep.ok]
        self.stats["episodes"] += len(episodes)
        self.stats["infra_failures"] += len(episodes) - len(ok)
        for ep in episodes:
            if not ep.ok:  # by exception type, e.g. infra_failures/SandboxError
                kind = "infra_failures/" + (ep.error or ep.status).split(":")[0]
                self.stats[kind] = self.stats.get(kind, 0) + 1
        if len(ok) < self.min_group_size:
            self.stats["groups_rejected"] += 1
            log.warning(
                "group of %s seed %s rejected: %d/%d episodes usable (errors: %s)",
                data["task_id"],
                data["seed"],
                len(ok),
                len(episodes),
                "; ".join(sorted({ep.error or ep.status for ep in episodes if not ep.ok})),
            )
            self._record(episodes, {}, group_id)
            return None

        # Rows before rewards: a call whose rows cannot be built exactly drops its episode, never the step.
        usable: list[tuple[Episode, list[dict[str, Any]]]] = []
        for ep in ok:
            try:
                usable.append((ep, self._rows(ep)))
            except RowMismatchError as exc:
                ep.status, ep.error = "infra_error", f"RowMismatchError: {exc}"
                self.stats["infra_failures"] += 1
        if len(usable) < self.min_group_size:
            self.stats["groups_rejected"] += 1
            self._record(episodes, {}, group_id)
            return None

        returns = [episode_reward(ep, self.rewards) for ep, _ in usable]
        advantages = normalise_group(returns, self.rewards.eps, self.rewards.std_norm)
        rows: list[dict[str, Any]] = []
        advantage_of: dict[int, float] = {}
        for (ep, ep_rows), adv in zip(usable, advantages, strict=True):
            for row, r in zip(
                ep_rows, turn_rewards(adv, len(ep_rows), self.rewards.turn_discount), strict=True
            ):
                row["rewards"] = torch.tensor([r], dtype=torch.float32)
            rows += ep_rows
            advantage_of[id(ep)] = adv
        self.stats["rows"] += len(rows)
        self._record(episodes, advantage_of, group_id)
        return concat_padded_tensors(rows) if rows else None

    def _rows(self, ep: Episode) -> list[dict[str, Any]]:
        """The episode's rows. A turn whose output holds a vision placeholder is the policy's failure: it
        counts as malformed (the episode keeps its place, and its reward, in the group) and has no row."""
        rows = []
        for t in ep.turns:
            try:
                rows.append(self.rows.row(t.call, 0.0))
            except PlaceholderInOutput as exc:
                t.note = f"no valid action: {exc}"
                ep.format_failures += 1
        return rows

    async def _episode(self, engine: StockVLLMEngine, pool: SandboxPool, task: dict[str, Any]) -> Episode:
        client = EngineChatClient(engine, self.sampling, rid=uuid.uuid4().hex)
        if task.get("agent", "gui") == "terminal":
            return await play_row(
                self.sandboxes, client, task, self.terminal_cfg, self.repo_tasks, self.view.count_tokens
            )
        try:
            sb = await pool.acquire(
                self.sandboxes.spec_for(task), timeout=self.sandboxes.config.acquire_timeout_s
            )
        except SandboxError as exc:
            return Episode(task["task_id"], int(task["seed"]), status="infra_error", error=f"acquire: {exc}")
        broken = True  # an episode that raises or is cancelled leaves its box in an unknown state
        try:
            ep = await run_episode(
                sb,
                client,
                task,
                self.episode_cfg,
                self.view.mapping(*sb.spec.screen),
                count_tokens=self.view.count_tokens,
                image_tokens=self.view.image_tokens(*sb.spec.screen) - 1,
            )
            broken = ep.box_spoiled
            return ep
        finally:  # to its end: a second cancellation must not leave the box marked busy
            await finish(pool.release(sb, broken=broken))

    def _record(self, episodes: list[Episode], advantage_of: dict[int, float], group_id: str) -> None:
        """The group's episodes, whatever became of the group (a rejected group's have no advantage)."""
        if self.recorder is not None:
            self.recorder.record(episodes, advantage_of, group_id)
