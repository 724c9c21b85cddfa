"""The local GBox server (sandbox/testing/gbox_server/) as a test fixture: started as its own process, as a
cloud endpoint is, and asked through its test-only routes what it holds."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeGbox:
    proc: subprocess.Popen
    url: str  # the API's base URL, as GBOX_CLIENT_BASE_URL takes it
    api_key: str
    state_dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {"GBOX_API_KEY": self.api_key, "GBOX_CLIENT_BASE_URL": self.url}

    @property
    def root(self) -> str:
        return self.url.split("/api/v1")[0]

    def client(self, key: str | None = None):
        """The real SDK, strict: a response missing a field of GBox's models fails the test."""
        from gbox_sdk import AsyncGboxClient

        return AsyncGboxClient(
            api_key=key or self.api_key, base_url=self.url, max_retries=0, _strict_response_validation=True
        )

    def fake(self) -> httpx.AsyncClient:
        """The test-only routes, async."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return httpx.AsyncClient(base_url=self.root, headers=headers, timeout=30)

    def _fake(self, method: str, path: str, **kw) -> dict:
        resp = httpx.request(
            method,
            f"{self.root}/_fake{path}",
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=60,
            **kw,
        )
        resp.raise_for_status()
        return resp.json() if resp.content else {}

    def boxes(self) -> list[dict]:
        return self._fake("GET", "/boxes")["boxes"]

    def running(self) -> list[str]:
        return [b["id"] for b in self.boxes() if b["status"] in ("running", "pending")]

    def actions(self, box_id: str) -> list[dict]:
        return self._fake("GET", f"/boxes/{box_id}/actions")["actions"]

    def faults(self, **faults: float) -> None:
        self._fake("POST", "/faults", json=faults)

    def kill(self, box_id: str) -> None:
        self._fake("POST", f"/boxes/{box_id}/kill")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_fake_gbox(tmp: Path) -> FakeGbox:
    tmp.mkdir(parents=True, exist_ok=True)
    # The boxes' folder is short, not under `tmp`: their control sockets are in it (sandbox.base
    # MAX_SOCKET_PATH). It stays until the test process ends, for tests to see what the server left.
    ready, state = tmp / "ready.json", Path(tempfile.mkdtemp(prefix="cua-gbox-"))
    atexit.register(shutil.rmtree, state, True)
    key = secrets.token_hex(16)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox.testing.gbox_server",
            "--port",
            "0",
            "--api-key",
            key,
            "--ready-file",
            str(ready),
            "--state-dir",
            str(state),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=open(tmp / "server.log", "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(
                f"the local GBox server did not start:\n{(tmp / 'server.log').read_text()[-3000:]}"
            )
        time.sleep(0.1)
    port = json.loads(ready.read_text())["port"]
    return FakeGbox(proc, f"http://127.0.0.1:{port}/api/v1/", key, state)
