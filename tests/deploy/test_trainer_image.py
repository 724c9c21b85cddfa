"""The trainer image runs a compiled function, not only imports: AReaL wraps `_gather_logprobs` in
torch.compile, which builds with the system C compiler at the first call (Triton on GPUs, inductor on CPU).
The GPU image had none, and its import-only build check passed. deploy/compile_check.py is the check the
GPU image's build and docker_train_areal.sh's preflight (the CPU variant's included, tests/deploy/
test_cpu_stack.py) run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cua_agent.inference.local_server import REPO

pytestmark = pytest.mark.slow
CHECK = REPO / "deploy" / "compile_check.py"


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK)], env=env, capture_output=True, text=True, timeout=300)


def test_the_check_runs_a_compiled_function_here(tmp_path: Path):
    done = run_check({**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert done.returncode == 0 and "torch.compile runs a compiled function" in done.stdout, done.stderr[
        -2000:
    ]


def test_without_a_c_compiler_the_check_fails_and_says_so(tmp_path: Path):
    """What the GPU image was: python, torch and AReaL, no C compiler on PATH."""
    env = {
        "HOME": str(tmp_path),
        "PATH": str(tmp_path),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    done = run_check(env)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "C compilers on PATH: none" in done.stderr and "Install gcc" in done.stderr, done.stderr[-2000:]


def test_the_gpu_image_installs_a_compiler_before_its_build_check_runs_the_compiled_function():
    dockerfile = (REPO / "Dockerfile").read_text()
    packages = re.search(r"apt-get install -y --no-install-recommends ([^\n\\&]+)", dockerfile)
    assert packages and {"gcc", "g++", "libc6-dev"} <= set(packages.group(1).split()), packages
    assert dockerfile.index("apt-get install") < dockerfile.index("python /tmp/compile_check.py")
