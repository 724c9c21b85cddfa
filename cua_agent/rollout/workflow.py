"""AReaL RolloutWorkflow: a group of G episodes of one task → one exact training row per turn.

Per turn (DESIGN §3): `input_ids` = the server's prompt ids (image tokens expanded by the server) + output
ids; `loss_mask` 1 on the output only; `logprobs` and `versions` from the server; `multi_modal_input` =
pixel values of exactly the images sent, from the processor the server uses (checked: image tokens in the
prompt == Σ grid/merge²); `rewards` = the episode's group-normalised reward, optionally discounted by turn.
Episodes lost to infrastructure are dropped; a group left with fewer than `min_group_size` episodes is
rejected (None) — an infrastructure failure never becomes a reward of 0.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from areal.api.workflow_api import RolloutWorkflow
from areal.utils import logging
from areal.utils.data import concat_padded_tensors
from PIL import Image

from cua_agent.episode.actions import CoordinateMapping
from cua_agent.episode.chat import CallRecord, EngineChatClient
from cua_agent.episode.loop import Episode, EpisodeConfig, run_episode
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.processing import load_processor
from cua_agent.inference.vllm_server import SamplingParams
from cua_agent.rollout.rewards import RewardConfig, episode_reward, normalise_group, turn_rewards
from cua_agent.train.data_feed import DRAW_KEY
from sandbox.backends import make_backend
from sandbox.base import SandboxSpec
from sandbox.errors import SandboxError
from sandbox.pool import SandboxPool

log = logging.getLogger("CUAWorkflow")  # AReaL's loggers reach outputs/<exp>/logs/training.log


class RowMismatchError(RuntimeError):
    """The trainer-side view of a call disagrees with the server's (processor or template drift)."""


class ModelView:
    """What the policy sees of a screen: the processor's resize, image tokens, and the coordinate mapping."""

    def __init__(self, processor: Any, convention: str):
        self.processor = processor
        self.image_processor = processor.image_processor
        self.convention = convention
        self.tokenizer = processor.tokenizer
        self.image_token_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        vision = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
        self.vision_token_ids = [self.tokenizer.convert_tokens_to_ids(t) for t in vision]
        self.merge = int(self.image_processor.merge_size)

        self._grids: dict[tuple[int, int], tuple[int, int, int]] = {}

    def _grid(self, screen_w: int, screen_h: int) -> tuple[int, int, int]:
        """(t, h, w) patch grid of a screen-sized image after the processor's resize (cached per size)."""
        if (screen_w, screen_h) not in self._grids:
            enc = self.image_processor(images=[Image.new("RGB", (screen_w, screen_h))], return_tensors="pt")
            t, h, w = (int(v) for v in enc["image_grid_thw"][0])
            self._grids[(screen_w, screen_h)] = (t, h, w)
        return self._grids[(screen_w, screen_h)]

    def mapping(self, screen_w: int, screen_h: int) -> CoordinateMapping:
        """Screen <-> model coordinates; "absolute" means pixels of the resized image the model saw."""
        _, gh, gw = self._grid(screen_w, screen_h)
        patch = int(self.image_processor.patch_size)
        return CoordinateMapping(screen_w, screen_h, gw * patch, gh * patch, self.convention)  # type: ignore[arg-type]

    def image_tokens(self, screen_w: int, screen_h: int) -> int:
        t, h, w = self._grid(screen_w, screen_h)
        return t * h * w // self.merge**2

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if isinstance(ids, dict) else ids)

    def row(self, call: CallRecord, reward: float) -> dict[str, Any]:
        """One training row for one model call."""
        prompt, out = call.prompt_token_ids, call.output_token_ids
        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in call.images]
        mm: dict[str, torch.Tensor] = {}
        expected = 0
        if images:
            enc = self.image_processor(images=images, return_tensors="pt")
            mm = {"pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}
            expected = int((enc["image_grid_thw"].prod(-1) // self.merge**2).sum())
        if set(out) & set(self.vision_token_ids):
            raise RowMismatchError(
                "the output contains a vision placeholder token (the model's own input markup)"
            )
        found = prompt.count(self.image_token_id)
        if found != expected:
            raise RowMismatchError(
                f"{found} image tokens in the server's prompt but {expected} from the processor for "
                f"{len(images)} image(s): trainer and server processors differ"
            )
        ids = prompt + out
        n_p, n_o = len(prompt), len(out)
        row: dict[str, Any] = {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.bool),
            "loss_mask": torch.tensor([[0] * n_p + [1] * n_o], dtype=torch.int32),
            "logprobs": torch.tensor([[0.0] * n_p + call.output_logprobs], dtype=torch.float32),
            "versions": torch.tensor([[-1] * n_p + [call.version] * n_o], dtype=torch.int32),
            "mm_token_type_ids": torch.tensor(
                [[int(t == self.image_token_id) for t in ids]], dtype=torch.long
            ),
            "rewards": torch.tensor([reward], dtype=torch.float32),
        }
        if mm:
            row["multi_modal_input"] = [mm]
        return row


class CUAWorkflow(RolloutWorkflow):
    """Built by the trainer as `CUAWorkflow(config=config)` (a CUAGRPOConfig)."""

    def __init__(self, config: Any, rollouts_path: str | Path | None = None):
        agent = config.agent
        self.group_size, self.min_group_size = agent.group_size, agent.min_group_size
        self.view = ModelView(
            load_processor(config.tokenizer_path or config.actor.path), agent.coordinate_convention
        )
        stop = [self.view.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.sampling = SamplingParams(
            max_tokens=agent.max_new_tokens,
            temperature=agent.temperature,
            stop_token_ids=stop,
            banned_token_ids=self.view.vision_token_ids,
        )
        self.episode_cfg = EpisodeConfig(
            max_turns=agent.max_turns,
            history_screenshots=agent.history_screenshots,
            on_parse_failure=agent.on_parse_failure,
            turn_timeout_s=agent.turn_timeout_s,
            episode_timeout_s=agent.episode_timeout_s,
            max_prompt_tokens=agent.max_prompt_tokens,
        )
        self.rewards = RewardConfig(format_penalty=agent.format_penalty, turn_discount=agent.turn_discount)
        sb = config.sandbox
        self.sandbox_cfg = sb
        self.spec = SandboxSpec(image=sb.image)  # the run's defaults; a row's `sandbox` block overrides them
        if rollouts_path is None and getattr(config, "cluster", None) is not None and agent.rollouts_file:
            rollouts_path = Path(config.cluster.fileroot) / agent.rollouts_file  # outputs/<experiment>/
            rank = int(os.environ.get("RANK", "0"))
            if rank > 0:  # one file per rank: appends from several hosts to one file are not atomic (NFS)
                rollouts_path = rollouts_path.with_name(
                    f"{rollouts_path.stem}-rank{rank}{rollouts_path.suffix}"
                )
        self.rollouts_path = Path(rollouts_path) if rollouts_path else None
        self.screenshots_dir = (
            self.rollouts_path.parent / "screenshots"
            if self.rollouts_path and agent.save_screenshots
            else None
        )
        self._pool: SandboxPool | None = None
        self._pool_lock: asyncio.Lock | None = None
        self._write_lock = threading.Lock()
        self.stats = {"episodes": 0, "infra_failures": 0, "groups_rejected": 0, "rows": 0}
        self.max_rejected_in_a_row = agent.max_rejected_in_a_row
        self.rejected_in_a_row = 0

    async def pool(self) -> SandboxPool:
        """Created on first use, in the event loop that runs the episodes (AReaL's rollout thread)."""
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                cfg = self.sandbox_cfg
                backend = make_backend(cfg.backend, docker_hosts=cfg.docker_hosts)
                self._pool = await SandboxPool(
                    backend,
                    self.spec,
                    max_size=cfg.max_concurrency,
                    warm=cfg.warm,
                    acquire_timeout=cfg.acquire_timeout_s,
                ).start()
        return self._pool

    def preflight(self) -> None:
        """Fail fast, naming the cause, when the sandbox backend cannot be reached: otherwise every episode
        of the run would fail the same way."""
        backend = make_backend(self.sandbox_cfg.backend, docker_hosts=self.sandbox_cfg.docker_hosts)
        try:
            backend.list_boxes()
        except Exception as exc:
            raise SandboxError(
                f"sandbox backend {self.sandbox_cfg.backend!r} is unreachable ({type(exc).__name__}: {exc}); "
                "for podman run `make setup`, or point DOCKER_HOST at a Docker engine"
            ) from exc
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()

    def remove_own_sandboxes(self) -> list[str]:
        """Last resort at a forced exit (the pool's own cleanup did not finish): remove this process's
        boxes directly through the backend."""
        backend = make_backend(self.sandbox_cfg.backend, docker_hosts=self.sandbox_cfg.docker_hosts)
        mine = [b["id"] for b in backend.list_boxes() if b["labels"].get("cua.owner_pid") == str(os.getpid())]
        for box_id in mine:
            backend.remove_sync(box_id)
        return mine

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def arun_episode(self, engine: StockVLLMEngine, data: dict[str, Any]) -> dict[str, Any] | None:
        pool = await self.pool()
        episodes = await asyncio.gather(*(self._episode(engine, pool, data) for _ in range(self.group_size)))
        batch = self.group_to_batch(list(episodes), data)
        self.rejected_in_a_row = 0 if batch is not None else self.rejected_in_a_row + 1
        if self.rejected_in_a_row >= self.max_rejected_in_a_row and hasattr(engine, "abort_run"):
            errors = sorted({ep.error or ep.status for ep in episodes if not ep.ok})
            engine.abort_run(
                f"{self.rejected_in_a_row} groups in a row rejected (agent.max_rejected_in_a_row): every "
                f"episode failed for infrastructure reasons; last errors: {'; '.join(errors)[:2000]}"
            )
        if DRAW_KEY in data:  # tell the TaskFeed what became of its row (see data_feed.py)
            if batch is None:
                engine.drop_row(data)
            else:
                batch[DRAW_KEY] = torch.full((batch["input_ids"].shape[0],), int(data[DRAW_KEY]))
        return batch

    def group_to_batch(self, episodes: list[Episode], data: dict[str, Any]) -> dict[str, Any] | None:
        """The group's training rows (one per model call), or None if too few episodes are usable."""
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
            self._record(episodes, {}, group_id=None)
            return None

        # Rows before rewards: a call whose rows cannot be built exactly drops its episode, never the step.
        usable: list[tuple[Episode, list[dict[str, Any]]]] = []
        for ep in ok:
            try:
                usable.append((ep, [self.view.row(t.call, 0.0) for t in ep.turns if t.call is not None]))
            except RowMismatchError as exc:
                ep.status, ep.error = "infra_error", f"RowMismatchError: {exc}"
                self.stats["infra_failures"] += 1
        if len(usable) < self.min_group_size:
            self.stats["groups_rejected"] += 1
            self._record(episodes, {}, group_id=None)
            return None

        returns = [
            episode_reward(ep.task_reward or 0.0, ep.format_failures, self.rewards) for ep, _ in usable
        ]
        advantages = normalise_group(returns, self.rewards.eps)
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
        self._record(episodes, advantage_of, group_id=uuid.uuid4().hex[:12])
        return concat_padded_tensors(rows) if rows else None

    async def _episode(self, engine: StockVLLMEngine, pool: SandboxPool, task: dict[str, Any]) -> Episode:
        client = EngineChatClient(engine, self.sampling, rid=uuid.uuid4().hex)
        try:
            spec = SandboxSpec.from_dict(task.get("sandbox"), base=self.spec)
            sb = await pool.acquire(spec, timeout=self.sandbox_cfg.acquire_timeout_s)
        except SandboxError as exc:
            return Episode(task["task_id"], int(task["seed"]), status="infra_error", error=f"acquire: {exc}")
        mapping = self.view.mapping(*sb.spec.screen)
        ep = await run_episode(
            sb,
            client,
            task,
            self.episode_cfg,
            mapping,
            count_tokens=self.view.count_tokens,
            image_tokens=self.view.image_tokens(*sb.spec.screen) - 1,
        )
        await pool.release(sb, broken=ep.status == "infra_error")
        return ep

    def _record(self, episodes: list[Episode], advantage_of: dict[int, float], group_id: str | None) -> None:
        """Append one line per episode to rollouts.jsonl (and its screenshots, when enabled)."""
        if self.rollouts_path is None:
            return
        lines = []
        for ep in episodes:
            episode_id = uuid.uuid4().hex[:12]
            turns = []
            for i, t in enumerate(ep.turns):
                turn: dict[str, Any] = {
                    "output": t.output,
                    "action": t.action,
                    "note": t.note,
                    "model_s": round(t.model_s, 3),
                    "env_s": round(t.env_s, 3),
                }
                if t.call is not None:
                    turn |= {
                        "prompt_tokens": len(t.call.prompt_token_ids),
                        "output_tokens": len(t.call.output_token_ids),
                        "version": t.call.version,
                        "images": len(t.call.images),
                        "attempts": t.call.attempts,
                    }
                    if self.screenshots_dir is not None and t.call.images:
                        d = self.screenshots_dir / episode_id
                        d.mkdir(parents=True, exist_ok=True)
                        (d / f"turn{i:02d}.png").write_bytes(t.call.images[-1])
                turns.append(turn)
            record = {
                "time": time.time(),
                "group": group_id,
                "episode": episode_id,
                "task_id": ep.task_id,
                "seed": ep.seed,
                "instruction": ep.instruction,
                "status": ep.status,
                "error": ep.error,
                "task_reward": ep.task_reward,
                "format_failures": ep.format_failures,
                "advantage": advantage_of.get(id(ep)),
                "wall_s": round(ep.wall_s, 3),
                "turns": turns,
            }
            lines.append(json.dumps(record, ensure_ascii=False))
        self.rollouts_path.parent.mkdir(parents=True, exist_ok=True)
        with self._write_lock, open(self.rollouts_path, "a") as f:
            f.write("\n".join(lines) + "\n")
