"""The episode loop: observe → model → act, until the model says done, the task ends its episode, max
turns or a timeout.

Failures are classified, never turned into reward 0:
- the model's fault (no valid action in its output, an action the sandbox rejects): a format failure —
  the turn is a no-op with a penalty, or ends the episode (`on_parse_failure`);
- infrastructure (sandbox died or timed out, inference server unavailable, a timeout): the episode ends
  with status "infra_error" and the workflow drops it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field, fields
from typing import Any

from cua_agent.episode.actions import Done, pointer_after
from cua_agent.episode.chat import ChatClient
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import DEFAULT_FAMILY, family_named
from cua_agent.episode.parser import ParseFailure, parse_action
from cua_agent.episode.prompting import PromptBudgetError, build_messages
from cua_agent.episode.turn import Turn
from cua_agent.inference.errors import InferenceServerError
from sandbox.base import Sandbox, broken_from_inside
from sandbox.errors import BoxBroken, SandboxDied, SandboxError, SandboxRequestError, SandboxTimeout
from sandbox.osworld import OSWorldTaskError, reset_source


@dataclass(frozen=True)
class EpisodeConfig:
    max_turns: int = 6
    history_screenshots: int = 2
    on_parse_failure: str = "noop"  # "noop": penalised no-op turn; "end": end the episode
    turn_timeout_s: float = 180.0
    episode_timeout_s: float = 900.0
    max_prompt_tokens: int | None = None
    model_family: str = DEFAULT_FAMILY  # its prompt format; the mapping passed along carries its convention

    @classmethod
    def of(cls, section: Any) -> EpisodeConfig:
        """From anything with these fields by name: the config's `agent` section, the CLI's arguments."""
        return cls(**{f.name: getattr(section, f.name) for f in fields(cls)})


@dataclass
class Episode:
    task_id: str
    seed: int
    instruction: str = ""
    turns: list[Turn] = field(default_factory=list)
    task_reward: float | None = None
    format_failures: int = 0
    status: str = "running"  # done | task_done | max_turns | parse_failure | box_broken | infra_error
    error: str | None = None
    verdict: str | None = None  # why the task scored what it did, where it says (a repository's tests)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "infra_error" and self.task_reward is not None

    @property
    def box_spoiled(self) -> bool:
        """Its box must serve no other episode: the infrastructure failed it, or the policy broke it."""
        return self.status in ("infra_error", "box_broken")


async def run_episode(
    sandbox: Sandbox,
    client: ChatClient,
    task: dict[str, Any],
    cfg: EpisodeConfig,
    mapping: CoordinateMapping,
    *,
    count_tokens: Any = None,
    image_tokens: int = 0,
) -> Episode:
    """One episode on an acquired sandbox. Never raises for model or infrastructure failures."""
    ep = Episode(task_id=task["task_id"], seed=int(task["seed"]))
    return await play_guarded(
        ep, _loop(ep, sandbox, client, task, cfg, mapping, count_tokens, image_tokens), cfg.episode_timeout_s
    )


async def play_guarded(ep: Episode, loop: Coroutine[Any, Any, None], timeout_s: float) -> Episode:
    """Runs an episode's loop within `timeout_s`; an infrastructure failure ends it as "infra_error", a box
    the policy broke (e.g. a process of its own answering for the box's server) as "box_broken", reward 0."""
    start = time.monotonic()
    try:
        await asyncio.wait_for(loop, timeout_s)
    except BoxBroken as exc:
        ep.status, ep.error, ep.task_reward = "box_broken", f"{type(exc).__name__}: {exc}", 0.0
    except (SandboxError, InferenceServerError, TimeoutError, PromptBudgetError) as exc:
        ep.status, ep.error = "infra_error", f"{type(exc).__name__}: {exc}"
    ep.wall_s = time.monotonic() - start
    return ep


async def _loop(
    ep: Episode,
    sandbox: Sandbox,
    client: ChatClient,
    task: dict[str, Any],
    cfg: EpisodeConfig,
    mapping: CoordinateMapping,
    count_tokens: Any,
    image_tokens: int,
) -> None:
    try:  # an OSWorld row's task and files, checked when the rows loaded: a file changed since is this one's
        source = reset_source(task["osworld"]) if task.get("osworld") else None
    except (OSWorldTaskError, OSError) as exc:
        raise SandboxError(f"task {ep.task_id}: its OSWorld file: {exc}") from None
    info = await sandbox.reset(ep.task_id, ep.seed, source)
    ep.instruction = task.get("instruction") or info.get("instruction") or ""
    if not ep.instruction:
        raise SandboxError(f"task {ep.task_id} seed {ep.seed}: the sandbox returned no instruction")
    screenshots = [await sandbox.screenshot()]
    acted = False  # whether an action of the policy reached the box
    # Where the pointer is, in screen pixels: unknown until a pointer action of this episode ran. Qwen's
    # computer_use clicks at it when a click has no coordinate and drags from it.
    pointer: tuple[int, int] | None = None
    try:
        max_turns = min(cfg.max_turns, int(task.get("max_turns") or cfg.max_turns))
        family = family_named(cfg.model_family)
        for _ in range(max_turns):
            prompt = build_messages(
                ep.instruction,
                ep.turns,
                screenshots,
                cfg.history_screenshots,
                mapping,
                count_tokens=count_tokens,
                max_tokens=cfg.max_prompt_tokens,
                image_tokens=image_tokens,
                family=family,
            )
            t0 = time.monotonic()
            call = await asyncio.wait_for(client.chat(prompt.messages, prompt.images), cfg.turn_timeout_s)
            model_s = time.monotonic() - t0
            parsed = parse_action(call.text, mapping, family=family.name, pointer=pointer)

            if isinstance(parsed, ParseFailure):
                ep.format_failures += 1
                ep.turns.append(Turn(call, None, f"no valid action: {parsed.reason}", model_s))
                screenshots.append(screenshots[-1])  # nothing happened: same screen
                if cfg.on_parse_failure == "end":
                    ep.status = "parse_failure"
                    break
                continue

            if isinstance(parsed.action, Done):
                ep.turns.append(Turn(call, parsed.action, "done", model_s))
                ep.status = "done"
                break

            t1 = time.monotonic()
            acted = True
            try:
                result, png = await sandbox.step(parsed.action.to_wire())
                note = "ok"
                pointer = pointer_after(parsed.action, result) or pointer
            except SandboxRequestError as exc:  # the sandbox refused the action: the policy's fault
                ep.format_failures += 1
                result, note, png = {}, f"rejected: {exc}", screenshots[-1]
            except (SandboxDied, SandboxTimeout):  # kept: if the box broke from inside, this action did it
                ep.turns.append(Turn(call, parsed.action, "box lost", model_s, time.monotonic() - t1))
                raise
            ep.turns.append(Turn(call, parsed.action, note, model_s, time.monotonic() - t1))
            screenshots.append(png)
            # the task ended its episode (MiniWoB's verdict): nothing left to act on
            if result.get("task_done"):
                ep.status = "task_done"
                break
        else:
            ep.status = "max_turns"
        last = ep.turns[-1].action if ep.turns else None
        gave_up = isinstance(last, Done) and last.success is False  # "this cannot be done" (OSWorld's FAIL)
        ep.task_reward = float((await sandbox.evaluate(gave_up=gave_up))["reward"])
    except (SandboxDied, SandboxTimeout) as exc:
        # A box that can hand the policy a shell (a task of a family that is not `reusable`: sandbox/server/task_families.py) and died or went silent
        # from inside after its actions is the policy's doing: its 0, not a way out of one.
        if (
            acted
            and not sandbox.reusable
            and (why := await broken_from_inside(sandbox.backend, sandbox.id, exc))
        ):
            raise why from exc
        raise
