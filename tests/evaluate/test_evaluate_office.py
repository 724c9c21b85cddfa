"""`python -m cua_agent.evaluate` on the office suite's test split: office boxes (LibreOffice, a terminal) from
the rows' own sandbox spec, and success measured from what the box verifies.

The policy is a stand-in for a hosted API (it cannot be reached from here), an HTTP server that follows
the OpenAI chat-completions contract and answers in Qwen3-VL's computer_use format. It reads the
instruction (an episode's turns are the requests with its instruction) and, for terminal-mkdir, clicks the terminal, types the mkdir command, presses Return, waits and says
done; for any other task it says done at once. So one task is solved and the other is not, and the report
must say exactly that.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cua_agent.episode.actions import Click, Done, Key, TypeText, Wait
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import FAMILIES
from cua_agent.evaluate.__main__ import main
from cua_agent.viewer import pages
from cua_agent.viewer.runs import Run
from sandbox.osworld import main as osworld_main
from tests.sandbox.osworld_files import HF, text_task, write, write_asset

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MKDIR = re.compile(r"create a folder named (\S+) in (\S+)\.")


def policy(instruction: str, turn: int) -> Any:
    if "video" in instruction:  # the OSWorld rows below: declares them impossible (OSWorld's FAIL)
        return Done(success=False)
    found = MKDIR.search(instruction)
    if found is None:
        return Done(success=True)
    name, folder = found.groups()
    # It waits before saying done, as a careful agent would: beside another test, xterm took over a second
    # to run the command after Return, and the box's check came first.
    script = [Click(640, 400), TypeText(f"mkdir {folder}/{name}"), Key("Return"), Wait(5), Done(success=True)]
    return script[min(turn, len(script) - 1)]


class PolicyStandIn:
    def __init__(self) -> None:
        mapping = CoordinateMapping(1280, 800, 1280, 800, "relative_1000")
        self.instructions: list[str] = []
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = [
                    p["text"]
                    for m in body["messages"]
                    if m["role"] == "user" and isinstance(m["content"], list)
                    for p in m["content"]
                    if p["type"] == "text"
                ] + [
                    m["content"]
                    for m in body["messages"]
                    if m["role"] == "user" and isinstance(m["content"], str)
                ]
                found = MKDIR.search(" ".join(texts))
                instruction = found.group(0) if found else " ".join(texts)
                with stand_in.lock:  # an episode's turn: how often its instruction came before
                    stand_in.instructions.append(instruction)
                    turn = stand_in.instructions.count(instruction) - 1
                text = FAMILIES["qwen3-vl"].answer(policy(instruction, turn), mapping)
                data = json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        stand_in = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def evaluate_with_stand_in(out: Path, monkeypatch, *args: str) -> tuple[int, PolicyStandIn]:
    """The evaluation command against the stand-in (qwen3-vl's format), 2 episodes at once, into `out`."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    api = PolicyStandIn()
    try:
        rc = main([
            "--base-url", api.base_url, "--model", "hosted-vl", "--model-family", "qwen3-vl",
            "--split", "test", "--concurrency", "2", "--out", str(out), *args,
        ])  # fmt: skip
    finally:
        api.server.shutdown()
    return rc, api


def test_the_office_suites_test_split_is_scored_by_its_boxes(tmp_path, monkeypatch, office_image):
    out = tmp_path / "eval"
    rc, api = evaluate_with_stand_in(
        out, monkeypatch, "--tasks", str(REPO / "tasks" / "office.jsonl"),
        "--task-ids", "office/terminal-mkdir,office/calc-total", "--seeds-per-task", "2", "--max-turns", "6",
        "--save-screenshots",
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    tasks = report["tasks"]
    assert (
        tasks["office/terminal-mkdir"]["successes"] == 2 and tasks["office/terminal-mkdir"]["episodes"] == 2
    )
    assert tasks["office/calc-total"]["successes"] == 0 and tasks["office/calc-total"]["episodes"] == 2
    assert report["overall"]["infra_failures"] == 0 and report["meta"]["split"] == "test"
    episodes = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert all(e["seed"] >= 100000 for e in episodes)
    assert any("/home/sandbox/work" in i for i in api.instructions)  # the box's paths, not OSWorld's
    # The viewer shows these episodes like any others: the typed command, over the terminal's screenshot.
    run = Run(out)
    run.refresh()
    assert {e.task_id for e in run.episodes()} == {"office/terminal-mkdir", "office/calc-total"}
    mkdir = next(e for e in episodes if e["task_id"] == "office/terminal-mkdir" and e["task_reward"] == 1.0)
    page = pages.turn(run, "rollouts.jsonl", mkdir["episode"], 1)
    assert page is not None and "mkdir /home/sandbox/work/" in page and "<img" in page


def test_osworld_rows_score_the_agents_verdict_as_osworld_does(tmp_path, monkeypatch, office_image):
    """An `infeasible` OSWorld task succeeds only when the agent's last action declares it impossible
    (done with failure, OSWorld's FAIL); a feasible task the agent gives up on scores 0. The stand-in
    gives up on both."""
    infeasible, feasible = "44444444-5555-4666-8777-888888888888", "99999999-aaaa-4bbb-8ccc-dddddddddddd"
    impossible = text_task(infeasible)
    impossible["instruction"] = "Turn notes.txt on the Desktop into a video with narration."
    impossible["evaluator"] = {"func": "infeasible"}
    possible = text_task(feasible)
    possible["instruction"] = "Put the line 'hello box' at the top of notes.txt (not a video) and save it."
    for task in (impossible, possible):
        write(tmp_path, "os", task)
        write_asset(tmp_path, f"{HF}/os/{task['id']}/notes.txt", b"first line\n")
    write_asset(tmp_path, f"{HF}/os/{feasible}/notes_gold.txt", b"hello box\nfirst line\n")
    rows = tmp_path / "osworld.jsonl"
    args = ["rows", str(tmp_path / "examples"), "--assets", str(tmp_path / "assets"), "--out", str(rows)]
    assert osworld_main([*args, "--image", office_image]) == 0
    out = tmp_path / "eval"
    rc, _ = evaluate_with_stand_in(
        out, monkeypatch, "--tasks", str(rows), "--seeds-per-task", "1", "--max-turns", "3"
    )
    assert rc == 0
    tasks = json.loads((out / "report.json").read_text())["tasks"]
    assert tasks[f"osworld/{infeasible}"]["successes"] == 1 and tasks[f"osworld/{feasible}"]["successes"] == 0
    assert tasks[f"osworld/{feasible}"]["episodes"] == 1
