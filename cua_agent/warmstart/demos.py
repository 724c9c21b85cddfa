"""Demonstrations: the oracles play task rows through the episode loop (oracle_client.py); every turn of a
solved episode becomes one supervised row, built like a training row (rollout/rows.py: the prompt with its
image tokens expanded, the answer under the loss mask, the screenshots as PNG) so the warm start trains on
exactly what the policy will see and must answer."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

from PIL import Image

from cua_agent.episode.loop import Episode, EpisodeConfig, run_episode
from cua_agent.episode.model_view import ModelView
from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.rows import RowBuilder
from cua_agent.rollout.sandboxes import RolloutSandboxes
from cua_agent.warmstart.oracle_client import DemoTurn, OracleChatClient
from sandbox.aio import finish, gather_all
from sandbox.errors import SandboxError


async def record(
    rows: list[dict[str, Any]],
    sandboxes: RolloutSandboxes,
    view: ModelView,
    cfg: EpisodeConfig,
    concurrency: int = 2,
    on_episode: Callable[[Episode], None] | None = None,
    failures: list[str] | None = None,
) -> list[tuple[Episode, list[DemoTurn]]]:
    """Each row played once by its oracle; the solved episodes with their turns, in row order. Why each
    other row gave no demonstration goes to `failures`."""
    pool = await sandboxes.pool()
    gate = asyncio.Semaphore(concurrency)
    failed = failures if failures is not None else []

    async def one(row: dict[str, Any]) -> tuple[Episode, list[DemoTurn]] | None:
        what = f"{row.get('task_id')} seed {row.get('seed')}"
        async with gate:
            try:
                sb = await pool.acquire(sandboxes.spec_for(row), timeout=sandboxes.config.acquire_timeout_s)
            except SandboxError as exc:
                failed.append(f"{what}: no box ({type(exc).__name__}: {exc})")
                return None
            broken = True
            try:
                mapping = view.mapping(*sb.spec.screen)
                client = OracleChatClient(sb, mapping, view.family)
                try:
                    ep = await run_episode(client.relay, client, row, cfg, mapping)
                except Exception as exc:  # an oracle that failed (OracleError): no demonstration
                    failed.append(f"{what}: the oracle failed ({type(exc).__name__}: {exc})")
                    return None
                finally:
                    await client.close()
                broken = ep.box_spoiled
                if on_episode is not None:
                    on_episode(ep)
                solved = ep.ok and (ep.task_reward or 0) > 0 and ep.format_failures == 0
                if not solved:
                    failed.append(
                        f"{what}: not solved (status {ep.status}, reward {ep.task_reward}, "
                        f"{ep.format_failures} malformed answers{f', {ep.error}' if ep.error else ''})"
                    )
                return (ep, client.turns) if solved else None
            finally:
                await finish(pool.release(sb, broken=broken))

    found = await gather_all(*(one(r) for r in rows))
    return [f for f in found if f is not None]


def supervised_row(turn: DemoTurn, view: ModelView, rows: RowBuilder) -> dict[str, Any]:
    """One supervised row: the prompt as the server would tokenize it, the answer and <|im_end|> under the
    loss mask (the row builder checks the image tokens against the processor)."""
    proc = view.processor
    text = proc.apply_chat_template(turn.messages, add_generation_prompt=True, tokenize=False)
    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in turn.images]
    prompt = proc(text=[text], images=images or None, return_tensors="pt")["input_ids"][0].tolist()
    answer = view.tokenizer(turn.answer, add_special_tokens=False)["input_ids"]
    answer.append(view.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    call = ModelCall(turn.answer, prompt, answer, [0.0] * len(answer), version=0, images=turn.images)
    row = rows.row(call, 0.0)
    del row["rewards"], row["logprobs"], row["versions"]
    return row
