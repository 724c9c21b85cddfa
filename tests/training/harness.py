"""Run `train_areal.py` as a user would, in a subprocess and its own session (FSDP and torch.distributed
state are process-global), and inspect what it leaves behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from cua_agent.inference.local_server import REPO
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk

RUN_TIMEOUT_S = 600


@dataclass
class Run:
    rc: int
    pid: int
    elapsed_s: float
    log: Path

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def run_training(overrides: list[str], log: Path, config: str = "configs/local_cpu.yaml") -> Run:
    cmd = [sys.executable, "train_areal.py", "--config", config, *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("WANDB_API_KEY", None)
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    return Run(rc, proc.pid, time.monotonic() - start, log)


def left_in_session(sid: int) -> list[str]:
    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getsid(p.pid) == sid:
                left.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:200]}")
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return left


def restore_weights(address: str, model_dir: Path, scratch: Path, version: int) -> None:
    """Put the model's original weights back on a shared test server after a run trained it."""
    copy = scratch / "restore-weights"
    shutil.copytree(model_dir, copy, dirs_exist_ok=True)

    async def go() -> None:
        try:
            await update_servers_from_disk([VLLMServer(address)], str(copy), version)
        finally:
            await close_loop_session()

    asyncio.run(go())
