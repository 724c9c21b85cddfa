"""The terminal agent (cua_agent/terminal): its tool-call parser, its prompt under a token budget, and
whole episodes on real repository boxes of the sample image. The model is scripted here (`Scripted`: a
fixed list of outputs stands in for the policy, whose real calls the GRPO and consistency tests make), so
each episode's path is known."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlencode

import pytest

from cua_agent.episode.prompting import PromptBudgetError
from cua_agent.episode.turn import Turn
from cua_agent.inference.local_server import REPO
from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.recorder import RolloutRecorder
from cua_agent.terminal.loop import TerminalConfig, build_messages, run_terminal_episode
from cua_agent.terminal.tools import ToolCall, ToolCallError, format_tool_call, parse_tool_call
from sandbox.repo.box import repo_box, start_repo_box
from sandbox.repo.tasks import SAMPLE_TASKS, load_repo_tasks

TASKS = {t.task_id: t for t in load_repo_tasks(SAMPLE_TASKS)}
CALC = TASKS["repo/calc-add"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>\n{"name": "run", "arguments": {"command": "ls -la"}}\n</tool_call>',
            ToolCall("run", {"command": "ls -la"}),
        ),
        (
            'I will look.\n<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}',
            ToolCall("read_file", {"path": "a.py"}),
        ),
        (
            '<tool_call>{"name": "run", "arguments": {"command": "pwd"',
            ToolCall("run", {"command": "pwd"}),
        ),  # cut by max tokens
        ('{"name": "submit", "arguments": {}}', ToolCall("submit")),
        (
            '<tool_call>{"name": "run", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>',
            ToolCall("run", {"command": "ls"}),
        ),
        (
            '<tool_call>{"name": "write_file", "arguments": {"path": "x", "content": "a\\nb"}}</tool_call>\n<tool_call>{"name": "submit"}</tool_call>',
            ToolCall("write_file", {"path": "x", "content": "a\nb"}),
        ),
    ],
)
def test_tool_calls_parse(text, expected):
    assert parse_tool_call(text) == expected


def test_parsing_is_linear_on_long_runs_of_whitespace():
    """A model can write thousands of spaces: the tag pattern that took 1.8 s on 16 KB now takes none."""
    for text in ("<tool_call>x" + " " * 16000 + "y", "<tool_call>x" + " \n" * 50_000 + "y" + " " * 50_000):
        t0 = time.thread_time()  # CPU time: a loaded machine's pauses do not count
        with pytest.raises(ToolCallError):
            parse_tool_call(text)
        assert time.thread_time() - t0 < 0.1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("just prose", "no tool call"),
        ("<tool_call>{nope</tool_call>", "not JSON"),
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown tool 'rm_rf'"),
        ('<tool_call>{"name": "run", "arguments": {}}</tool_call>', "run: missing argument 'command'"),
        (
            '<tool_call>{"name": "run", "arguments": {"command": 3}}</tool_call>',
            "run: command must be a string",
        ),
        ('<tool_call>{"name": "run", "arguments": {"command": " "}}</tool_call>', "run: empty command"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs "name"'),
    ],
)
def test_bad_tool_calls_are_format_failures_naming_the_problem(text, reason):
    with pytest.raises(ToolCallError, match=reason.replace("(", r"\(")):
        parse_tool_call(text)


def test_the_canonical_form_parses_back():
    call = ToolCall("apply_patch", {"patch": '--- a/x\n+++ b/x\n@@ -1 +1 @@\n-"a"\n+"b"\n'})
    assert parse_tool_call(format_tool_call(call)) == call


def _turn(i: int) -> Turn:
    return Turn(
        ModelCall(f"output {i} " + "word " * 50), ToolCall("run", {"command": "ls"}), observation=f"obs {i}"
    )


def test_the_prompt_leaves_out_the_oldest_turns_over_the_budget():
    turns = [_turn(i) for i in range(6)]
    count = lambda msgs: sum(len(str(m["content"]).split()) for m in msgs)  # noqa: E731 (words as tokens)
    full = build_messages(CALC, turns)
    assert len(full) == 2 + 2 * 6 and full[-1]["content"] == "obs 5"
    budget = count(full) - 60
    cut = build_messages(CALC, turns, count, budget)
    assert (
        count(cut) <= budget
        and cut[-1]["content"] == "obs 5"
        and "[2 earlier turns left out]" in cut[1]["content"]
    )
    with pytest.raises(PromptBudgetError):
        build_messages(CALC, turns, count, 5)


class Scripted:
    """Stands in for the policy: answers each chat call with the next scripted output."""

    def __init__(self, outputs: list[str]) -> None:
        self.outputs, self.prompts = list(outputs), []

    async def chat(self, messages, images):
        assert images == []  # a terminal agent sends text only
        self.prompts.append(messages)
        return ModelCall(self.outputs.pop(0))


def call(name: str, **arguments: str) -> str:
    return format_tool_call(ToolCall(name, arguments))


@pytest.fixture
async def calc_box(sandbox_setup, docker_backend):
    box = await asyncio.to_thread(start_repo_box, docker_backend, CALC.spec)
    yield box
    await box.close()
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == []


def fresh_calc(backend):
    return lambda: repo_box(backend, CALC.spec)


@pytest.fixture(scope="module")
def docker_backend():
    from sandbox.backends.docker import DockerBackend

    backend = DockerBackend(run_id=f"pytest-{os.getpid()}-terminal")
    yield backend
    backend.close()


async def test_an_episode_that_fixes_the_bug_scores_1(calc_box, docker_backend, tmp_path):
    model = Scripted(
        [
            call("read_file", path="calc/ops.py"),
            call("apply_patch", patch=CALC.solution.read_text()),
            call("run", command="python3 -c 'from calc.ops import add; print(add(2, 3))'"),
            call("submit"),
        ]
    )
    ep = await run_terminal_episode(calc_box, fresh_calc(docker_backend), model, CALC, 0, TerminalConfig())
    assert (ep.status, ep.task_reward, ep.format_failures) == ("done", 1.0, 0), ep.error
    assert ep.verdict == "all 2 named tests as expected"  # scored in a fresh box, from the agent's diff
    assert "return a - b" in ep.turns[0].observation and ep.turns[2].observation == "5\n\n[exit code 0]"
    assert model.prompts[-1][-1] == {"role": "user", "content": ep.turns[2].observation}  # the model read it
    assert [t.wire["tool"] for t in ep.turns] == ["read_file", "apply_patch", "run", "submit"]

    # The viewer shows the episode's commands, the diff and what came back (no screenshots to miss).
    RolloutRecorder(tmp_path / "rollouts.jsonl").record([ep], {id(ep): 0.5}, "g1")
    page = viewer_page(tmp_path, "/group?" + urlencode({"src": "rollouts.jsonl", "id": "g1"}))
    assert "$ python3 -c &#x27;from calc.ops import add; print(add(2, 3))&#x27;" in page
    assert "<pre class='diff'>--- a/calc/ops.py" in page and "-    return a - b" in page
    assert "<pre class='observation'>5\n\n[exit code 0]</pre>" in page
    assert "screenshot not kept" not in page


def viewer_page(folder, path: str) -> str:
    """A page of the real viewer (`python -m cua_agent.viewer`) on `folder`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cua_agent.viewer", str(folder), "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        for line in proc.stdout:
            if m := re.match(r"viewer: (http://127\.0\.0\.1:\d+)/ ", line):
                with urllib.request.urlopen(m.group(1) + path, timeout=30) as resp:
                    return resp.read().decode()
        raise AssertionError(f"the viewer exited {proc.wait()}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_a_hanging_command_and_malformed_output_do_not_end_the_episode(calc_box, docker_backend):
    model = Scripted(["no idea", call("run", command="sleep 600"), call("run", command="echo still here")])
    cfg = TerminalConfig(max_turns=3, command_timeout_s=2)
    ep = await run_terminal_episode(calc_box, fresh_calc(docker_backend), model, CALC, 0, cfg)
    assert (ep.status, ep.task_reward, ep.format_failures) == ("max_turns", 0.0, 1)
    assert ep.turns[0].note.startswith("no valid tool call") and ep.turns[0].action is None
    assert "timed out after 2 s" in ep.turns[1].observation and ep.turns[1].env_s < 6
    assert ep.turns[2].observation == "still here\n\n[exit code 0]"


async def test_a_box_killed_mid_episode_is_an_infrastructure_failure(calc_box, docker_backend):
    class KillsTheBox(Scripted):
        async def chat(self, messages, images):
            if len(self.prompts) == 1:
                await asyncio.to_thread(docker_backend.docker.containers.get(calc_box.id).kill)
            return await super().chat(messages, images)

    model = KillsTheBox([call("run", command="ls"), call("run", command="ls")])
    ep = await run_terminal_episode(
        calc_box, fresh_calc(docker_backend), model, CALC, 0, TerminalConfig(max_turns=2)
    )
    assert ep.status == "infra_error" and ep.task_reward is None and "SandboxDied" in ep.error, ep


def test_rollouts_record_terminal_turns_with_their_observations(tmp_path):
    from cua_agent.episode.loop import Episode

    ep = Episode(
        "repo/calc-add", 0, instruction=CALC.issue, turns=[_turn(0)], task_reward=0.0, status="max_turns"
    )
    RolloutRecorder(tmp_path / "r.jsonl").record([ep], {id(ep): 0.0}, "g")
    (line,) = (tmp_path / "r.jsonl").read_text().splitlines()
    (turn,) = json.loads(line)["turns"]
    assert turn["action"] == {"tool": "run", "command": "ls"} and turn["observation"] == "obs 0"
