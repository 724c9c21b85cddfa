"""scripts/run_vllm_base.sh, the CUDA vLLM launcher, as far as it runs without a GPU: a stand-in
`nvidia-smi` and a stand-in vLLM (a python that records how it was launched) take the GPU's place; the
script itself, its model preparation (the real tied-head check) and its serving loop are real.

The server runs with vLLM's development endpoints (weight reloads), which no API key guards, so by default
it listens on loopback only; the compose stack, whose trainer is in another container, asks for its own
network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from cua_agent.inference.local_server import MODELS
from tests.deploy.stack import COMPOSE_FILE, REPO

FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *"import vllm"*) exit 0 ;;
  *vllm.entrypoints*) echo "$@" > "$(dirname "$0")/launched"; echo "$VLLM_RPC_BASE_PATH" > "$(dirname "$0")/rpc"
                     touch "$VLLM_RPC_BASE_PATH/engine-socket" "$TMPDIR/vllm_dist_x"
                     echo "$TMPDIR" > "$(dirname "$0")/tmpdir"; exit 3 ;;
  *) exec {python} "$@" ;;
esac
"""


def launch(tmp_path: Path, **env: str) -> tuple[str, str]:
    bin_dir = tmp_path / f"bin{len(list(tmp_path.iterdir()))}"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    out = subprocess.run(
        ["bash", "scripts/run_vllm_base.sh"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VLLM_PYTHON": str(bin_dir / "python"),
             "VLLM_MODEL": str(MODELS["untied"]), "VLLM_PORT": "18613", **env},
    )  # fmt: skip
    launched = (bin_dir / "launched").read_text() if (bin_dir / "launched").exists() else ""
    return launched, out.stderr + out.stdout


def test_the_gpu_launcher_listens_on_loopback_unless_told_otherwise(tmp_path: Path):
    launched, log = launch(tmp_path)
    assert "--host 127.0.0.1 --port 18613" in launched, log
    assert "exited with code 3 before becoming healthy" in log  # the stand-in vLLM ends there
    launched, log = launch(tmp_path, VLLM_HOST="127.0.0.2")  # e.g. a private network's address
    assert "--host 127.0.0.2 --port 18613" in launched, log


def test_the_servers_sockets_go_in_a_folder_of_its_own_removed_when_it_stops(tmp_path: Path):
    """vLLM's processes meet on ZMQ sockets under VLLM_RPC_BASE_PATH (default /tmp) and leave them there, with
    a `vllm_dist_*` file in TMPDIR: 2,204 sockets and 406 such files had piled up in /tmp after two days of
    test runs. Both launchers share the serving loop."""
    _, log = launch(tmp_path, TMPDIR=str(tmp_path))
    rpc = Path(next(tmp_path.glob("bin*/rpc")).read_text().strip())
    assert Path(next(tmp_path.glob("bin*/tmpdir")).read_text().strip()) == rpc, log
    assert rpc.parent == tmp_path and rpc.name.startswith("cua-vllm."), log
    assert not rpc.exists(), "the folder, and what the stand-in made in it, are removed"


def test_the_compose_stack_serves_its_trainer_container_and_publishes_on_loopback():
    vllm = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["vllm"]
    assert vllm["environment"]["VLLM_HOST"] == "0.0.0.0"  # the stack's network: the trainer's container
    assert all(p.startswith("127.0.0.1:") for p in vllm["ports"])
