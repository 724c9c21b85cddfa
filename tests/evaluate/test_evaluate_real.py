"""`python -m cua_agent.evaluate` through real sandboxes (podman) against two OpenAI-compatible endpoints:

- the project's vLLM server (the tiny model; random, so it fails every task: what is checked is the
  command's path, its files and its counts);
- a stand-in for a hosted API (which cannot be reached from here): an HTTP server that follows the OpenAI
  chat-completions contract (bearer key, `model`, image parts as data URLs, the response schema) and answers
  like a model that points in relative 0..1000 coordinates. It also fails requests with HTTP 500 on demand,
  as hosted APIs do under load.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cua_agent.episode.actions import Click
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import FAMILIES
from cua_agent.evaluate.__main__ import main
from cua_agent.inference.local_server import MODELS

pytestmark = pytest.mark.slow

TASK = "miniwob/click-test"


def run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / "eval"
    rc = main(
        [
            "--task-ids", TASK, "--seeds-per-task", "3", "--max-turns", "2", "--max-new-tokens", "16",
            "--concurrency", "3", "--out", str(out), *args,
        ]
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    episodes = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    return rc, report, episodes


def test_against_the_projects_vllm_server(vllm_servers, tmp_path):
    server = vllm_servers["untied"]
    rc, report, episodes = run(
        tmp_path,
        "--base-url", f"http://{server.address}/v1",
        "--model", str(MODELS["untied"]),  # the launcher serves the model under its path
        "--processor", str(MODELS["untied"]),
        "--max-prompt-tokens", "6000",
    )  # fmt: skip
    assert rc == 0
    overall = report["overall"]
    assert overall["episodes"] == 3 and overall["infra_failures"] == 0 and overall["turns"] == 2.0
    assert set(report["tasks"]) == {TASK} and report["meta"]["split"] == "test"
    assert all(e["task_id"] == TASK for e in episodes)
    assert len({e["seed"] for e in episodes}) == 3 and all(
        e["seed"] >= 100000 for e in episodes
    )  # test split
    assert (tmp_path / "eval" / "report.md").read_text().startswith("| task |")


class HostedAPIStandIn:
    """OpenAI chat completions over HTTP: answers a click at (500, 500) of 1000, then `wait`; the first
    `fail_first` requests get HTTP 500."""

    def __init__(self, key: str, fail_first: int = 0):
        self.key, self.fail_first = key, fail_first
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stand_in.lock:
                    stand_in.requests.append({"auth": self.headers.get("Authorization"), **body})
                    n = len(stand_in.requests)
                if (
                    self.path != "/v1/chat/completions"
                    or self.headers.get("Authorization") != f"Bearer {key}"
                ):
                    return self._send(401, {"error": {"message": "bad key or path"}})
                if n <= stand_in.fail_first:
                    return self._send(500, {"error": {"message": "overloaded"}})
                mapping = CoordinateMapping(1280, 800, 1280, 800, "relative_1000")
                text = FAMILIES["qwen3-vl"].answer(Click(640, 400), mapping)  # Qwen3-VL's computer_use
                return self._send(
                    200,
                    {
                        "id": f"chatcmpl-{n}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_against_a_hosted_api_with_its_key_its_coordinates_and_its_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    # 9 failing requests: the openai client's own retries (3 attempts a call) exhaust on the first 3 calls,
    # so 3 episodes are lost to infrastructure once and played again.
    api = HostedAPIStandIn("sk-test-123", fail_first=9)
    try:
        rc, report, episodes = run(
            tmp_path,
            "--base-url",
            api.base_url,
            "--model",
            "hosted-vl",
            "--model-family",
            "qwen3-vl",  # a hosted model that points in 0..1000
        )
    finally:
        api.close()
    assert rc == 0
    overall = report["overall"]
    assert overall["episodes"] == 3 and overall["infra_failures"] == 0, overall  # retried, never scored as 0
    assert report["meta"]["infra_retries"] == 3 and overall["format_failure_rate"] == 0.0
    lost = [e for e in episodes if e["status"] == "infra_error"]
    assert len(lost) == 3 and all("500" in e["error"] for e in lost), [e["error"] for e in lost]
    played = [e for e in episodes if e["status"] != "infra_error"]
    # (500, 500) of 1000 on a 1280x800 screen it was shown as it is: screen pixel (640, 400)
    assert all(t["action"] == {"type": "click", "x": 640, "y": 400} for e in played for t in e["turns"])
    ok = [r for r in api.requests if r["auth"] == "Bearer sk-test-123" and r["model"] == "hosted-vl"]
    assert len(ok) == len(api.requests)
    parts = [p for m in api.requests[-1]["messages"] if isinstance(m["content"], list) for p in m["content"]]
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert images and all(url.startswith("data:image/png;base64,") for url in images)
    system = api.requests[-1]["messages"][0]
    assert system["role"] == "system" and '"name": "computer_use"' in system["content"]  # the family's tool
