"""The trainer and the vLLM CPU server run their OpenMP threads sleeping, not spinning, while they wait
(cua_agent/openmp.py: spinning threads stalled a 6 s update to ~60 s beside another torch process on 2 cores).
libgomp reads the policy once, when it loads, so what counts is what it read: with OMP_DISPLAY_ENV=verbose it
prints GOMP_SPINCOUNT, 0 when threads sleep at once (300000 by default). The suite sets the policy for its own
processes (tests/conftest.py), so each process here starts from an environment without it, as a user's does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from cua_agent.inference.local_server import MODELS, REPO, free_port


def bare_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    return {**env, "OMP_DISPLAY_ENV": "verbose", "PYTHONPATH": str(REPO), **extra}


def spincount(text: str) -> str:
    found = re.search(r"GOMP_SPINCOUNT = '(\d+)'", text)
    assert found, f"libgomp printed no settings:\n{text[-2000:]}"
    return found.group(1)


@pytest.mark.parametrize(("user_setting", "expected"), [({}, "0"), ({"OMP_WAIT_POLICY": "ACTIVE"}, None)])
def test_a_trainer_process_loads_torch_with_sleeping_threads_unless_the_user_chose(user_setting, expected):
    out = subprocess.run(
        [sys.executable, "-c", "import train_areal, torch; torch.ones(4).add_(1)"],
        cwd=REPO, env=bare_env(**user_setting), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    count = spincount(out.stderr)
    assert count == expected if expected is not None else int(count) > 0


def test_plain_torch_spins_by_default():
    """What the setting changes: the same process without train_areal.py's import first."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; torch.ones(4).add_(1)"],
        env=bare_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert int(spincount(out.stderr)) > 0


@pytest.mark.slow
def test_the_vllm_cpu_server_loads_with_sleeping_threads(tmp_path):
    log = tmp_path / "vllm.log"
    # stopped as soon as libgomp has printed its settings, long before the server is up
    env = bare_env(VLLM_MODEL=str(MODELS["untied"]), VLLM_PORT=str(free_port()))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "run_vllm_cpu.sh")],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "GOMP_SPINCOUNT" not in log.read_text(errors="replace") and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        assert spincount(log.read_text(errors="replace")) == "0"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
