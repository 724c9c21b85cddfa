"""Multi-node through AReaL's Ray launcher: a head and a worker node (`ray start` on this machine, one
logical GPU each), `python -m cua_agent.train.launch_ray train_areal.py --config configs/local_cpu.yaml` runs one
GRPO step with FSDP d2 — one trainer rank per node, rendezvous across the nodes — against the shared vLLM
CPU server and real sandboxes. The two ranks' groups differ in turns (one task allows 1 turn, the other 2),
so their rows differ in number when AReaL redistributes them. The launcher exits 0, the new weights reach
the server, and nothing is left: no process in the launcher's or the nodes' sessions once the nodes are
stopped, no sandbox of the ranks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from sandbox.backends import make_backend
from tests.deploy.ray_cluster import LocalRayCluster
from tests.training.harness import TINY_MODEL_ARGS, left_in_session, restore_weights

pytestmark = pytest.mark.slow

LAUNCH_TIMEOUT_S = 480


async def served_version(address: str) -> int | None:
    try:
        return await VLLMServer(address).weight_version()
    finally:
        await close_loop_session()


class TrainerWatch:
    """Samples the trainer processes (Ray workers titled ray::run_func): pid -> session (= node)."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["pid", "cmdline"]):
                try:
                    if (p.info["cmdline"] or [""])[0].startswith("ray::run_func"):
                        self.seen[p.pid] = os.getsid(p.pid)
                except (ProcessLookupError, PermissionError, psutil.Error):
                    pass
            self._stop.wait(0.5)

    def __enter__(self) -> TrainerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def variable_turn_tasks(path: Path) -> Path:
    """Two rows (one seed per task): each rank draws one, and their groups have 2 and 4 rows."""
    rows = [
        {"task_id": "miniwob/click-test", "max_turns": 1, "seeds": [0, 1], "split": "train"},
        {"task_id": "miniwob/click-button", "max_turns": 2, "seeds": [0, 1], "split": "train"},
    ]
    path.write_text("".join(json.dumps({"instruction": None, "tags": [], **r}) + "\n" for r in rows))
    return path


def test_one_step_on_two_ray_nodes(vllm_servers, tmp_path: Path):
    server = vllm_servers["untied"]
    exp = tmp_path / "exp"
    tasks = variable_turn_tasks(tmp_path / "tasks.jsonl")
    cluster = LocalRayCluster()
    t0 = time.monotonic()
    try:
        head = cluster.start_node("head", cpus=1, gpus=1)
        worker = cluster.start_node("worker", cpus=1, gpus=1)
        t_cluster = time.monotonic() - t0

        cmd = [
            sys.executable,
            "-m",
            "cua_agent.train.launch_ray",
            "train_areal.py",
            "--config",
            "configs/local_cpu.yaml",
            *TINY_MODEL_ARGS,
            "allocation_mode=fsdp:d2",
            "actor.backend=fsdp:d2",
            "cluster.n_nodes=2",
            "cluster.n_gpus_per_node=1",
            "+actor.scheduling_spec=[{cpu:1,mem:2}]",
            f"cluster.fileroot={exp}",
            "total_train_steps=1",
            "train_dataset.batch_size=2",  # one group per rank
            "rollout.max_head_offpolicyness=0",  # no rollouts for a step that will not run
            "inference.launch_local=false",
            f'inference.addresses=["{server.address}"]',
            f"tasks.train_path={tasks}",
            "agent.group_size=2",
            "agent.min_group_size=2",
            "agent.max_turns=2",
            "agent.max_new_tokens=24",
            "sandbox.max_concurrency=2",
        ]
        env = {**cluster.env(), "RAY_ADDRESS": cluster.address, "PYTHONPATH": str(REPO)}
        log = tmp_path / "launcher.log"
        t1 = time.monotonic()
        with TrainerWatch() as watch, open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                rc = proc.wait(LAUNCH_TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
        t_launch = time.monotonic() - t1
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])

        assert rc == 0, f"launcher exited {rc} after {t_launch:.0f}s:\n{tail}"
        assert sorted(watch.seen.values()) == sorted([head.sid, worker.sid]), (
            f"expected one trainer rank on each node {head.sid, worker.sid}, saw pid->session {watch.seen}"
        )
        rank0 = (exp / "logs" / "training.log").read_text(errors="replace")
        rank1 = (exp / "logs" / "training-1.log").read_text(errors="replace")
        assert "Train step 1/" in rank0
        assert "world_size=2" in rank0 and "world_size=2" in rank1
        assert asyncio.run(served_version(server.address)) == 1
        # the ranks' groups had different numbers of rows (turns): the case AReaL's redistribution failed on
        rows = []
        for name in ("rollouts.jsonl", "rollouts-rank1.jsonl"):
            episodes = [json.loads(x) for x in (exp / name).read_text().splitlines()]
            first = episodes[0]["group"]
            rows.append(sum(len(e["turns"]) for e in episodes if e["group"] == first))
        assert rows[0] != rows[1], f"rows per rank: {rows}"
        assert left_in_session(proc.pid) == [], "the launcher left processes behind"
    finally:
        t2 = time.monotonic()
        left = cluster.stop()
        t_stop = time.monotonic() - t2
        restore_weights(server.address, MODELS["untied"], tmp_path, version=2)
    assert left == [], f"processes of the Ray nodes survived their stop: {left}"
    boxes = make_backend("docker").list_boxes()
    assert [b for b in boxes if b["labels"].get("cua.owner_pid") in {str(p) for p in watch.seen}] == []
    print(
        f"\nRay: 2 nodes started in {t_cluster:.0f}s, launcher (1 step, FSDP d2 across the nodes) "
        f"{t_launch:.0f}s, nodes stopped in {t_stop:.0f}s"
    )
