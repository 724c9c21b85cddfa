"""The terminal agent's episode loop: prompt → model → tool call → its output, until the model submits or
runs out of turns; then the task's tests score the repository.

The same failure rules as the GUI loop (cua_agent/episode/loop.py): an output with no valid tool call is
a format failure (a penalised no-op turn, or the end of the episode with `on_parse_failure: end`); a
command that fails or hangs is the agent's business (its output and exit status, or the timeout, are the
observation); so is a box it breaks (killed from inside, or its control loop silenced): status
"box_broken", reward 0, never a way out of a 0. A box the engine lost, a server that fails, a timeout of
the whole episode are infrastructure failures (status "infra_error": the workflow drops the episode, never
scores it 0). The tests run in a fresh box on the agent's diff (sandbox/repo/scoring.py).

Prompt: the system prompt (tools), the issue, then one assistant/user pair per turn (the model's output
verbatim; the tool's output cut at `observation_chars`). Over `max_prompt_tokens`, the oldest pairs are
left out, with a line saying how many.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, fields
from typing import Any

from cua_agent.episode.chat import ChatClient
from cua_agent.episode.loop import Episode, play_guarded
from cua_agent.episode.prompting import PromptBudgetError, TokenCounter
from cua_agent.episode.turn import Turn
from cua_agent.terminal.tools import ToolCall, ToolCallError, parse_tool_call, system_prompt
from sandbox.base import broken_from_inside
from sandbox.errors import SandboxError
from sandbox.repo.box import CommandResult, RepoBox
from sandbox.repo.scoring import FreshBox, score
from sandbox.repo.tasks import RepoTask, RepoTaskFiles


@dataclass(frozen=True)
class TerminalConfig:
    max_turns: int = 8
    on_parse_failure: str = "noop"
    turn_timeout_s: float = 180.0
    episode_timeout_s: float = 900.0
    max_prompt_tokens: int | None = None
    command_timeout_s: float = 30.0  # a command running longer is killed; the episode goes on
    observation_chars: int = 2000  # of a tool's output shown to the model (the rest is cut, with a marker)

    @classmethod
    def of(cls, section: Any) -> TerminalConfig:
        return cls(**{f.name: getattr(section, f.name) for f in fields(cls)})


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[head - limit :]}"


async def execute(box: RepoBox, call: ToolCall, cfg: TerminalConfig) -> CommandResult:
    a = call.arguments
    if call.name == "run":
        return await box.run(a["command"], timeout_s=cfg.command_timeout_s)
    if call.name == "read_file":
        return await box.read_file(a["path"])
    if call.name == "write_file":
        return await box.write_file(a["path"], a["content"])
    if call.name == "apply_patch":
        return await box.apply_patch(a["patch"] if a["patch"].endswith("\n") else a["patch"] + "\n")
    raise ValueError(f"not an executable tool: {call.name}")


def build_messages(
    task: RepoTask,
    turns: list[Turn],
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """The next call's messages, the oldest turns left out while over `max_tokens`."""
    head = [
        {"role": "system", "content": system_prompt(task.spec.workdir)},
        {"role": "user", "content": f"Issue:\n{task.issue}"},
    ]
    for skip in range(len(turns) + 1):
        messages = [dict(m) for m in head]
        if skip:
            messages[1]["content"] += f"\n\n[{skip} earlier turn{'s' if skip > 1 else ''} left out]"
        for t in turns[skip:]:
            messages.append({"role": "assistant", "content": t.output})
            messages.append({"role": "user", "content": t.observation or t.note})
        if count_tokens is None or max_tokens is None or count_tokens(messages) <= max_tokens:
            return messages
    raise PromptBudgetError(count_tokens(messages) if count_tokens else 0, max_tokens or 0, 0)


async def run_terminal_episode(
    box: RepoBox,
    fresh_box: FreshBox,
    client: ChatClient,
    task: RepoTask,
    seed: int,
    cfg: TerminalConfig,
    count_tokens: TokenCounter | None = None,
) -> Episode:
    """One episode on a started repository box, scored in one from `fresh_box()`. Never raises for model
    or infrastructure failures."""
    ep = Episode(task_id=task.task_id, seed=seed, instruction=task.issue)
    loop = _loop(ep, box, fresh_box, client, task, cfg, count_tokens)
    return await play_guarded(ep, loop, cfg.episode_timeout_s)


async def _loop(
    ep: Episode,
    box: RepoBox,
    fresh_box: FreshBox,
    client: ChatClient,
    task: RepoTask,
    cfg: TerminalConfig,
    count_tokens: TokenCounter | None,
) -> None:
    for _ in range(min(cfg.max_turns, task.max_steps)):
        messages = build_messages(task, ep.turns, count_tokens, cfg.max_prompt_tokens)
        t0 = time.monotonic()
        call = await asyncio.wait_for(client.chat(messages, []), cfg.turn_timeout_s)
        model_s = time.monotonic() - t0
        try:
            tool = parse_tool_call(call.text)
        except ToolCallError as exc:
            ep.format_failures += 1
            note = f"no valid tool call: {exc}"
            ep.turns.append(Turn(call, None, note, model_s, observation=note))
            if cfg.on_parse_failure == "end":
                ep.status = "parse_failure"
                break
            continue
        if tool.name == "submit":
            ep.turns.append(Turn(call, tool, "done", model_s))
            ep.status = "done"
            break
        t1 = time.monotonic()
        try:
            result = await execute(box, tool, cfg)
        except SandboxError as exc:  # kept: if the box broke from inside, this command did it
            ep.turns.append(Turn(call, tool, "box lost", model_s, time.monotonic() - t1))
            if (why := await broken_from_inside(box.backend, box.id, exc)) is None:
                raise
            raise why from exc  # the policy's 0 (play_guarded)
        observation = _cut(result.observation(), cfg.observation_chars)
        ep.turns.append(Turn(call, tool, "ok", model_s, time.monotonic() - t1, observation=observation))
    else:
        ep.status = "max_turns"
    verdict = await score(box, task.tests, fresh_box)
    ep.task_reward, ep.verdict = verdict.reward, verdict.reason


async def play_row(
    sandboxes: Any,
    client: ChatClient,
    row: dict[str, Any],
    cfg: TerminalConfig,
    tasks: RepoTaskFiles,
    count_tokens: TokenCounter | None = None,
) -> Episode:
    """A row of a repository task played on a fresh box of its image (`sandboxes`: RolloutSandboxes)."""
    task = tasks.task(row)
    try:
        async with sandboxes.repo_box(task.spec) as box:
            fresh = lambda: sandboxes.scoring_box(task.spec)  # noqa: E731
            return await run_terminal_episode(box, fresh, client, task, int(row["seed"]), cfg, count_tokens)
    except SandboxError as exc:  # the box did not start
        return Episode(task.task_id, int(row["seed"]), status="infra_error", error=f"repo box: {exc}")
