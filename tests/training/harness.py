"""Run `train_areal.py` as a user would, in a subprocess and its own session (FSDP and torch.distributed
state are process-global), and inspect what it leaves behind. Runs have two trainer ranks unless a test
asks for one: `python -m cua_agent.train.torchrun` (the compose stack's entry point) starts them."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk
from sandbox.backends import make_backend

RUN_TIMEOUT_S = 600
RANKS = 2  # trainer ranks of a run: the shape users run (configs/cua_grpo*.yaml: 4 or 8)
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


def rank_args(ranks: int) -> list[str]:
    """FSDP over `ranks` processes, one group a step on each (a test's own batch size wins)."""
    if ranks == 1:
        return []
    return [
        f"actor.backend=fsdp:d{ranks}",
        f"allocation_mode=fsdp:d{ranks}",
        f"train_dataset.batch_size={ranks}",
    ]


def training_command(args: list[str], config: str, ranks: int, tiny: bool = True) -> list[str]:
    """The command line of a run: train_areal.py alone at one rank, under the torchrun entry point else."""
    train = [
        "train_areal.py",
        "--config",
        config,
        *(TINY_MODEL_ARGS if tiny else []),
        *rank_args(ranks),
        *args,
    ]
    if ranks == 1:
        return [sys.executable, *train]
    launcher = ["-m", "cua_agent.train.torchrun", "--standalone", "--nproc-per-node", str(ranks)]
    return [sys.executable, *launcher, *train]


RAY_TRAINER = "ray::run_func"  # the title of a trainer process that AReaL's Ray launcher started


class Training(subprocess.Popen):
    """A started run in its own session. `pids` gathers its processes as they appear (the launcher, the
    trainer ranks): the ranks own the sandboxes (label cua.owner_pid) and write steps.jsonl (pid of rank 0).
    Under Ray (`ray=True`) the ranks are the Ray cluster's trainer workers, not the launcher's children."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None, ray: bool = False):
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env or {})}
        env.pop("WANDB_API_KEY", None)
        self.log = log
        with open(log, "wb") as out:
            super().__init__(
                cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.pids: set[int] = {self.pid}
        self.ray = ray
        self._watch = threading.Thread(target=self._track, daemon=True)
        self._watch.start()

    def _track(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while self.returncode is None:
            try:  # a short-lived child can end while its tree is walked: try again at the next tick
                self.pids.update(p.pid for p in root.children(recursive=True))
                if self.ray:
                    self.pids.update(p.pid for p in _ray_trainers())
            except psutil.Error:
                if not root.is_running():
                    return
            time.sleep(0.1)

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Every process of the run at once, as a node failure ends them (torchrun starts each rank in a
        session of its own: killing the launcher's group alone leaves them running)."""
        for pid in {self.pid, *self.pids}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig) if pid == self.pid else os.kill(pid, sig)


def _ray_trainers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if (p.info["cmdline"] or [""])[0].startswith(RAY_TRAINER):
                found.append(p)
        except (IndexError, psutil.Error):
            pass
    return found


@dataclass
class Run:
    rc: int
    pid: int
    elapsed_s: float
    log: Path
    pids: frozenset[int] = field(default_factory=frozenset)

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def start_training(
    args: list[str], log: Path, config: str = "configs/local_cpu.yaml", ranks: int = RANKS
) -> Training:
    return Training(training_command(args, config, ranks), log)


def hung(proc: Training, waited_s: float, what: str = "end") -> AssertionError:
    """A run that did not get somewhere in time: its processes print their stacks (SIGUSR1, registered by
    the ranks; the ranks first, the launcher last: without the handler it just ends, and its ranks with it),
    then all are killed, and the error carries the log's end with the stacks, so that a hang in CI shows
    where each rank waited."""
    for pid in [*(proc.pids - {proc.pid}), proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGUSR1)
    time.sleep(3)
    proc.kill_all()
    tail = "\n".join(proc.log.read_text(errors="replace").splitlines()[-250:])
    return AssertionError(f"the run did not {what} in {waited_s:.0f}s; the end of {proc.log}:\n{tail}")


def wait_training(proc: Training, log: Path, start: float, timeout_s: float = RUN_TIMEOUT_S) -> Run:
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise hung(proc, timeout_s) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return Run(
        proc.returncode if rc is None else rc, proc.pid, time.monotonic() - start, log, frozenset(proc.pids)
    )


def run_training(
    args: list[str],
    log: Path,
    config: str = "configs/local_cpu.yaml",
    timeout_s: float = RUN_TIMEOUT_S,
    ranks: int = RANKS,
) -> Run:
    start = time.monotonic()
    return wait_training(start_training(args, log, config, ranks), log, start, timeout_s)


def _pids(of: int | Iterable[int] | None) -> set[int] | None:
    return None if of is None else {of} if isinstance(of, int) else set(of)


def steps_of(exp: Path, pids: int | Iterable[int] | None = None) -> dict[int, dict]:
    """steps.jsonl records by global step (of one run's processes, if given); the last record of a step
    wins."""
    mine = _pids(pids)
    records = {}
    for path in exp.glob("logs/*/*/*/steps.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if mine is None or r["pid"] in mine:
                records[r["global_step"]] = r
    return records


def episodes_of(exp: Path) -> list[dict]:
    """Every rank's rollouts file (rollouts.jsonl, rollouts-rank1.jsonl, ...), episode by episode."""
    return [json.loads(line) for f in sorted(exp.glob("rollouts*.jsonl")) for line in f.open()]


def boxes_of(pids: int | Iterable[int]) -> list[dict]:
    """The sandboxes of a run's processes (Run.pids, Training.pids) or of one process."""
    mine = {str(p) for p in _pids(pids) or ()}
    return [b for b in make_backend("docker").list_boxes() if b["labels"].get("cua.owner_pid") in mine]


def left_behind(run: Run | Training) -> list[str]:
    """Processes of a finished run still alive: in the launcher's session, or in the session of any of its
    processes (torchrun starts each rank in a session of its own)."""
    return [p for sid in sorted({run.pid, *run.pids}) for p in left_in_session(sid)]


def left_in_session(sid: int) -> list[str]:
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:  # ended; PID 1 here may reap orphans late
                continue
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
    step k trains each rank's next row drawn, except that a group lost to infrastructure, or whose workflow
    raised (random events of one run), is dropped and the step takes the next row. So: each rank's draws increase, the same draw
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
        dropped = ("groups_rejected", "groups_failed")  # their rows are done, and the step takes the next
        clean = clean and not any(x[s]["faults"].get(k, 0) for x in (a, b) for k in dropped)
        if clean and a[s]["rows"] != b[s]["rows"]:
            out.append(f"step {s}: rows {a[s]['rows']} vs {b[s]['rows']}")
    return out


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    """Poll until `predicate()`; fail if the run exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, f"the run exited ({proc.returncode}) before {what}"
        if time.monotonic() >= deadline:
            if isinstance(proc, Training):
                raise hung(proc, timeout_s, f"reach {what}")
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def kill_mid_step(args: list[str], exp: Path, log: Path, finished: int) -> Run:
    """Start a run and SIGKILL it in the middle of the step after `finished` steps: once step `finished`
    is logged, while the next step's sandboxes run (they are left behind, to be reaped)."""
    start = time.monotonic()
    proc = start_training(args, log)
    wait_for(lambda: finished - 1 in steps_of(exp, proc.pids), 300, f"step {finished}", proc)
    wait_for(lambda: len(boxes_of(proc.pids)) > 0, 120, f"step {finished + 1}'s sandboxes", proc)
    proc.kill_all()
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
