"""Run `train_areal.py` as a user would, in a subprocess and its own session (FSDP and torch.distributed
state are process-global), and inspect what it leaves behind."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk
from sandbox.backends import make_backend

RUN_TIMEOUT_S = 600
# What the tests train: the untied tiny model, as the shared test servers serve it (configs/local_cpu.yaml
# starts from the warm start, which they do not serve). It is random and fails every group alike, so the
# equal-reward filter is off; every task and 6 turns, as the tests were written for. A test's own
# arguments come after these and win.
TINY_MODEL_ARGS = [
    f"actor.path={MODELS['untied']}",
    "agent.filter_equal_reward_groups=false",
    "tasks.task_ids=[]",
    "agent.max_turns=6",
]


# One small GRPO step against servers the test started: 2 episodes of at most 2 turns on click-test.
SMALL_STEP_ARGS = [
    "inference.launch_local=false",
    "tasks.task_ids=[miniwob/click-test]",
    "agent.group_size=2",
    "agent.min_group_size=2",
    "agent.max_turns=2",
    "agent.max_new_tokens=24",
    "sandbox.max_concurrency=2",
]


@dataclass
class Run:
    rc: int
    pid: int
    elapsed_s: float
    log: Path

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def start_training(args: list[str], log: Path, config: str = "configs/local_cpu.yaml") -> subprocess.Popen:
    cmd = [sys.executable, "train_areal.py", "--config", config, *TINY_MODEL_ARGS, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("WANDB_API_KEY", None)
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_training(proc: subprocess.Popen, log: Path, start: float, timeout_s: float = RUN_TIMEOUT_S) -> Run:
    try:
        rc = proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return Run(proc.returncode if rc is None else rc, proc.pid, time.monotonic() - start, log)


def run_training(
    args: list[str], log: Path, config: str = "configs/local_cpu.yaml", timeout_s: float = RUN_TIMEOUT_S
) -> Run:
    start = time.monotonic()
    return wait_training(start_training(args, log, config), log, start, timeout_s)


def steps_of(exp: Path, pid: int | None = None) -> dict[int, dict]:
    """steps.jsonl records by global step (of one process, if given); the last record of a step wins."""
    records = {}
    for path in exp.glob("logs/*/*/*/steps.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if pid is None or r["pid"] == pid:
                records[r["global_step"]] = r
    return records


def boxes_of(pid: int) -> list[dict]:
    return [b for b in make_backend("docker").list_boxes() if b["labels"].get("cua.owner_pid") == str(pid)]


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


def recover_dir(exp: Path) -> Path:
    """Where a run of configs/local_cpu.yaml with cluster.fileroot=exp keeps its recover checkpoints."""
    return exp / "checkpoints" / getpass.getuser() / "cua-local" / "trial0" / "recover"


def served_version(address: str) -> int | None:
    """The weight version a server says it serves."""

    async def go() -> int | None:
        try:
            return await VLLMServer(address).weight_version()
        finally:
            await close_loop_session()

    return asyncio.run(go())


def same_steps(a: dict, b: dict) -> list[str]:
    """How two runs of the same seed differ in what they trained and with which LR.

    The LR of a step depends only on the restored schedule. The rows: with one group in flight per rank,
    step k trains each rank's next row drawn, except that a group lost to infrastructure (a random event of
    one run) is dropped and the step takes the next row. So: each rank's draws increase, the same draw
    number of a rank is the same row in both runs, and where neither run dropped a row before a step, the
    step's rows are equal."""
    out = []
    rows_of: dict[tuple[int, int], dict] = {}
    for run, steps in (("a", a), ("b", b)):
        for rank in sorted({r.get("rank", 0) for s in steps.values() for r in s["rows"]}):
            draws = [r["draw"] for s in sorted(steps) for r in steps[s]["rows"] if r.get("rank", 0) == rank]
            if draws != sorted(set(draws)):
                out.append(f"run {run}, rank {rank}: draws out of order {draws}")
        for s in steps.values():
            for r in s["rows"]:
                key = (r.get("rank", 0), r["draw"])
                if rows_of.setdefault(key, r) != r:
                    out.append(f"rank {key[0]} draw {key[1]}: {rows_of[key]} vs {r}")
    clean = True
    for s in sorted(set(a) & set(b)):
        if a[s]["lr"] != b[s]["lr"]:
            out.append(f"step {s}: lr {a[s]['lr']} vs {b[s]['lr']}")
        clean = clean and not any(x[s]["faults"].get("groups_rejected", 0) for x in (a, b))
        if clean and a[s]["rows"] != b[s]["rows"]:
            out.append(f"step {s}: rows {a[s]['rows']} vs {b[s]['rows']}")
    return out


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    """Poll until `predicate()`; fail if the run exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, f"the run exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def kill_mid_step(args: list[str], exp: Path, log: Path, finished: int) -> Run:
    """Start a run and SIGKILL it in the middle of the step after `finished` steps: once step `finished`
    is logged, while the next step's sandboxes run (they are left behind, to be reaped)."""
    start = time.monotonic()
    proc = start_training(args, log)
    wait_for(lambda: finished - 1 in steps_of(exp, proc.pid), 300, f"step {finished}", proc)
    wait_for(lambda: len(boxes_of(proc.pid)) > 0, 120, f"step {finished + 1}'s sandboxes", proc)
    proc.send_signal(signal.SIGKILL)
    return wait_training(proc, log, start)


def evaluate_cli(args: list[str], timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`python -m cua_agent.evaluate ARGS` as a user runs it (offline: the tiny models are local)."""
    return subprocess.run(
        [sys.executable, "-m", "cua_agent.evaluate", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
