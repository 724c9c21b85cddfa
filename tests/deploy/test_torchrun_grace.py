"""The trainer's entry point on one node (docker-compose.areal.yml): torchrun with the stop grace the config
asks for. torchrun forwards SIGTERM to its workers and kills them 30 s later (torch 2.10, the GPU image's),
which cut every stop-time checkpoint of a big model short. Here two workers take 35 s to stop after the
SIGTERM a `docker stop` gives the container: both finish."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cua_agent.inference.local_server import REPO
from cua_agent.train.cli import LAUNCHER_MARGIN_S as MARGIN_S
from cua_agent.train.cli import read_config
from cua_agent.train.torchrun import shutdown_grace_s
from tests.deploy.slow_stop_worker import STOP_S
from tests.training.harness import Training, left_behind

pytestmark = pytest.mark.slow

TRAIN_ARGS = ["--config", "configs/local_cpu.yaml", "checkpoint.stop_timeout_s=20"]


def test_the_grace_is_the_configs_stop_timeout_plus_a_margin():
    assert shutdown_grace_s(TRAIN_ARGS) == 20 + MARGIN_S
    assert shutdown_grace_s(["--config", "configs/cua_grpo.yaml", "--resume"]) > 30


def test_the_grace_is_read_without_loading_areal_and_agrees_with_the_whole_config(tmp_path: Path):
    """The launcher reads the stop timeout before it starts the ranks: with OmegaConf alone (AReaL's loader
    cost ~4 s of CPU at every start), as the whole config has it, the config's default included."""
    shipped = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.yaml"))
    bare = tmp_path / "bare.yaml"  # sets no stop timeout: the dataclass default
    bare.write_text("\n".join(line for line in (REPO / TRAIN_ARGS[1]).read_text().splitlines()
                              if "stop_timeout_s" not in line))  # fmt: skip
    for argv in [
        *(["--config", c] for c in shipped),
        ["--config", "configs/cua_grpo.yaml", "--resume", "++checkpoint.stop_timeout_s=75"],
        ["--config", str(bare)],
    ]:
        assert shutdown_grace_s(argv) == read_config(argv).checkpoint.stop_timeout_s + MARGIN_S, argv
    probe = "import sys; from cua_agent.train.torchrun import shutdown_grace_s as g; g(sys.argv[1:]); "
    probe += "print('areal' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe, *TRAIN_ARGS], cwd=REPO, capture_output=True, text=True
    )
    assert loaded.stdout.strip() == "False", loaded.stdout + loaded.stderr


def test_workers_that_need_longer_than_30s_to_stop_are_not_killed(tmp_path: Path):
    worker = Path(__file__).with_name("slow_stop_worker.py")
    cmd = [sys.executable, "-m", "cua_agent.train.torchrun", "--standalone", "--nproc-per-node", "2",
           str(worker), *TRAIN_ARGS]  # fmt: skip
    proc = Training(cmd, tmp_path / "torchrun.log", env={"CUA_TEST_OUT": str(tmp_path)})
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "torchrun.log"
            ).read_text()
            time.sleep(0.2)
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to torchrun, as the container's init forwards it
        proc.wait(timeout=STOP_S + MARGIN_S + 60)
        took = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            proc.kill_all()
    log = (tmp_path / "torchrun.log").read_text(errors="replace")
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"], log
    assert proc.returncode == 128 + signal.SIGTERM, log
    assert took >= STOP_S, took
    assert left_behind(proc) == []
    print(f"\nboth workers stopped after {took:.0f}s (torchrun alone kills at 30s)")


def test_ranks_whose_launcher_was_killed_stop_as_if_told_to(tmp_path: Path):
    """torchrun starts each rank in a session of its own: killed itself (kill -9, the OOM killer), it left
    its ranks training on, orphaned, with their sandboxes. Each rank now gets SIGTERM when its launcher
    dies, and stops as usual (here a quick stop: what matters is that it happens)."""
    worker = Path(__file__).with_name("slow_stop_worker.py")
    cmd = [sys.executable, "-m", "cua_agent.train.torchrun", "--standalone", "--nproc-per-node", "2",
           str(worker), *TRAIN_ARGS]  # fmt: skip
    env = {"CUA_TEST_OUT": str(tmp_path), "CUA_TEST_STOP_S": "1"}
    proc = Training(cmd, tmp_path / "torchrun.log", env=env)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "torchrun.log").read_text()
        time.sleep(0.2)
    proc.kill()  # the launcher alone, as the OOM killer would
    proc.wait()
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("stopped-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"]
    deadline = time.monotonic() + 30  # their exit after the marker: interpreter shutdown
    while left_behind(proc) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left_behind(proc) == []
