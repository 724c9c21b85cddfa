"""Local vLLM CPU server processes, started through scripts/run_vllm_cpu.sh (the launcher users run) and
stopped with their whole process group. Used by the tests, the benchmarks and the local (CPU) run."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CUA_HOME = Path(os.environ.get("CUA_HOME", Path.home() / ".cache" / "cua-areal"))
MODELS = {
    "untied": CUA_HOME / "models" / "tiny-qwen2.5-vl",
    "tied": CUA_HOME / "models" / "tiny-qwen2.5-vl-tied",
}
# Tiny Qwen3-VL models (scripts/make_tiny_model.py --family qwen3-vl). Kept out of MODELS: the session fixture
# `vllm_servers` starts a server for every MODELS entry; tests/inference/test_qwen3vl_parity.py starts its own.
QWEN3_VL_MODELS = {
    "untied": CUA_HOME / "models" / "tiny-qwen3-vl",
    "tied": CUA_HOME / "models" / "tiny-qwen3-vl-tied",
}
# The untied tiny model after the warm start's supervised training (setup: python -m cua_agent.warmstart)
WARM_MODEL = CUA_HOME / "models" / "tiny-qwen2.5-vl-warm"
# Its warm start on click-test's rows at 400x300, a screen the tiny model's clicks fit (make learn's and
# tests/training/test_learning.py's; setup: python -m cua_agent.warmstart --small-screen)
SMALL_SCREEN_TASKS = REPO / "tasks" / "miniwob-400x300.jsonl"
SMALL_SCREEN_WARM_MODEL = CUA_HOME / "models" / "tiny-qwen2.5-vl-warm-400x300"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VLLMProcess:
    model_dir: Path
    port: int
    log_path: Path
    proc: subprocess.Popen

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM server for {self.model_dir} exited ({self.proc.returncode}):\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"vLLM server for {self.model_dir} not healthy in {timeout_s}s:\n{self.log_tail()}"
                )
            time.sleep(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_vllm(
    model_dir: Path,
    log_dir: Path,
    *,
    port: int | None = None,
    extra_env: dict | None = None,
    lora: tuple[int, int] | None = None,
) -> VLLMProcess:
    """`lora`: (rank, adapters) to serve up to `adapters` LoRA adapters of rank <= `rank`, loaded at runtime
    (VLLM_LORA_RANK, VLLM_MAX_LORAS of scripts/vllm_common.sh)."""
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"tiny model missing at {model_dir}: run `make setup`")
    port = port or free_port()
    log_path = Path(log_dir) / f"vllm-{model_dir.name}-{port}.log"
    lora_env = {"VLLM_LORA_RANK": str(lora[0]), "VLLM_MAX_LORAS": str(lora[1])} if lora else {}
    env = {
        **os.environ,
        "VLLM_MODEL": str(model_dir),
        "VLLM_PORT": str(port),
        **lora_env,
        **(extra_env or {}),
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "run_vllm_cpu.sh")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    return VLLMProcess(model_dir, port, log_path, proc)


_PRCTL = ctypes.CDLL(None).prctl  # resolved here: the child of a threaded fork must not dlopen


def die_with_parent() -> None:
    """A Popen preexec_fn: SIGTERM the child when the process that started it dies, even by SIGKILL (a
    session of its own keeps it out of our Ctrl-C, so nothing else would stop it); run_vllm_cpu.sh's trap
    stops its server."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def vllm_python() -> str:
    return subprocess.run(
        ["bash", "-c", "source scripts/common.sh && vllm_python"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
