"""docker_train_areal.sh: --help, and a preflight that names each problem and what to do about it, then exits
non-zero before touching anything. GPU checks run against a PATH without nvidia-smi, or with a stand-in that
lists fewer GPUs than the layout needs (this machine has none); the rest against this machine's podman."""

from __future__ import annotations

import os
import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.stack import (
    TEST_PROJECT,
    free_port,
    path_without,
    podman,
    remove_model_cache,
    run_script,
    script_env,
    write_env_file,
)

FLAGS = ["--config", "--compose", "--resume", "--resume_from_checkpoint", "--no-build", "--cpu", "--check"]


def failures(result) -> list[str]:
    """The preflight's problem lines."""
    assert result.returncode == 2, f"expected a preflight failure, got {result.returncode}:\n{result.stderr}"
    assert "preflight failed" in result.stderr
    return [line[4:] for line in result.stderr.splitlines() if line.startswith("  - ")]


def test_help_lists_every_flag(tmp_path):
    result = run_script(["--help"], script_env(tmp_path))
    assert result.returncode == 0, result.stderr
    for flag in FLAGS:
        assert f"  {flag}" in result.stdout, f"--help does not document {flag}"


def test_unknown_argument_is_refused(tmp_path):
    result = run_script(["--gpus", "8"], script_env(tmp_path))
    assert result.returncode != 0 and "unknown argument '--gpus'" in result.stderr


def test_no_nvidia_smi(tmp_path):
    env = script_env(tmp_path, PATH=path_without(tmp_path, "nvidia-smi"))
    env["CUA_ENV_FILE"] = str(write_env_file(tmp_path / "env"))
    problems = failures(run_script(["--check"], env))
    assert any(p.startswith("nvidia-smi not found on PATH") for p in problems), problems


def fake_nvidia_smi(tmp_path: Path, n: int) -> str:
    """A stand-in for nvidia-smi -L on a machine with n GPUs; returns a PATH that finds it first."""
    bin_dir = tmp_path / "fake-gpu-bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    lines = "\\n".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-0000)" for i in range(n))
    script.write_text(f'#!/bin/sh\n[ "$1" = -L ] && printf "{lines}\\n"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}:{path_without(tmp_path, 'nvidia-smi')}"


def test_too_few_gpus_for_the_layout(tmp_path):
    env = script_env(tmp_path, PATH=fake_nvidia_smi(tmp_path, 4))
    env["CUA_ENV_FILE"] = str(write_env_file(tmp_path / "env"))
    problems = failures(run_script(["--check"], env))
    for gpu in (4, 5, 6, 7):  # the trainer's default GPUs
        assert any(p.startswith(f"GPU {gpu} is assigned") and "lists 4 GPU(s)" in p for p in problems), (
            problems
        )
    assert not any(p.startswith("GPU 0 ") for p in problems)


def test_gpu_ids_from_the_env_file_are_checked(tmp_path):
    """The script reads the same GPU variables as the compose file, from .env too."""
    env = script_env(tmp_path, PATH=fake_nvidia_smi(tmp_path, 8))
    env["CUA_ENV_FILE"] = str(write_env_file(tmp_path / "env", TRAINER_GPU0="1", VLLM_TP_SIZE="8"))
    result = run_script(["--check"], env)
    problems = failures(result)
    assert (
        "GPU 1 is assigned twice (VLLM_GPU0-3, TRAINER_GPU0-3): vLLM and the trainer each need their own GPUs"
        in problems
    )
    assert any(p.startswith("VLLM_TP_SIZE=8: must be 1-4") for p in problems), problems
    assert "GPUs: vLLM 0 1 2 3 (tensor-parallel 8), trainer 1 5 6 7" in result.stderr


def test_trainer_processes_must_match_the_config(tmp_path):
    env = script_env(tmp_path, PATH=fake_nvidia_smi(tmp_path, 8), TRAINER_NPROC="2")
    env["CUA_ENV_FILE"] = str(write_env_file(tmp_path / "env"))
    problems = failures(run_script(["--check", "--config", "configs/cua_grpo.yaml"], env))
    assert (
        "configs/cua_grpo.yaml: actor.backend=fsdp:d4 trains on 4 process(es) but TRAINER_NPROC=2" in problems
    )


# ---- the CPU variant: the rest of the preflight against this machine's podman ----------------------------------
@pytest.fixture(autouse=True, scope="module")
def _no_model_cache_left() -> Iterator[None]:
    """script_env's project gets a model-cache volume from compose too."""
    yield
    remove_model_cache(TEST_PROJECT)


def cpu_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = script_env(tmp_path, **extra)
    if "CUA_ENV_FILE" not in extra:
        env["CUA_ENV_FILE"] = str(write_env_file(tmp_path / "env"))
    env.setdefault("VLLM_HOST_PORT", str(free_port()))  # 8000 may be taken by another test's server
    return env


def project_leftovers(project: str) -> list[str]:
    """The compose project's networks and podman-compose's pod: what `compose run` creates around its
    container when the stack is not up."""
    networks = podman(
        "network", "ls", "--format", "{{.Name}}", "--filter", f"label=com.docker.compose.project={project}"
    )
    pods = podman("pod", "ls", "--format", "{{.Name}}", "--filter", f"name=^pod_{project}$")
    return networks.split() + pods.split()


def test_cpu_check_refuses_a_config_that_does_not_fit_naming_the_field(tmp_path):
    """(The check passing, in the trainer's image, is the first thing tests/deploy/test_cpu_stack.py's run
    does.)"""
    env = cpu_env(tmp_path, COMPOSE_PROJECT_NAME=f"cua-test-check-{uuid.uuid4().hex[:8]}")
    try:
        # The one check here that gets as far as the trainer's image (a compile and AReaL's imports): ~50 s,
        # and 120 s were not enough once in a whole-suite run on a host running a quarter slower
        result = run_script(["--cpu", "--check", "actor.mb_spec.max_tokens_per_mb=1024"], env, timeout=360)
    finally:
        remove_model_cache(env["COMPOSE_PROJECT_NAME"])
    assert result.returncode == 1, result.stderr
    assert "preflight passed (config configs/local_cpu.yaml" in result.stderr  # the script's own checks
    assert "  - actor.mb_spec.max_tokens_per_mb: 1024 is below the longest row" in result.stderr
    assert (
        "the config does not fit (train_areal.py --check above names the fields to change)" in result.stderr
    )
    # a check leaves nothing behind: each one used to leave the project's pod and network (one subnet each)
    assert project_leftovers(env["COMPOSE_PROJECT_NAME"]) == []


def test_missing_env_file(tmp_path):
    problems = failures(
        run_script(["--cpu", "--check"], cpu_env(tmp_path, CUA_ENV_FILE=str(tmp_path / "nope")))
    )
    assert problems == [
        f"{tmp_path / 'nope'} not found: cp env.example .env and fill it in (compose passes it to the trainer)"
    ]


def test_env_file_missing_keys(tmp_path):
    env_file = write_env_file(tmp_path / "env")
    kept = [
        line for line in env_file.read_text().splitlines() if not line.startswith(("HF_TOKEN=", "VLLM_GPU3="))
    ]
    env_file.write_text("\n".join(kept) + "\n")
    problems = failures(run_script(["--cpu", "--check"], cpu_env(tmp_path, CUA_ENV_FILE=str(env_file))))
    assert problems == [
        f"{env_file} lacks HF_TOKEN VLLM_GPU3 (copy them from env.example; an empty value means the default)"
    ]


def test_compose_client_missing(tmp_path):
    env = cpu_env(tmp_path, PATH=path_without(tmp_path, "podman-compose"), COMPOSE="podman-compose")
    problems = failures(run_script(["--cpu", "--check"], env))
    assert problems == ["podman-compose not found: run scripts/setup.sh deploy (or set COMPOSE)"]


def test_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        problems = failures(run_script(["--cpu", "--check"], cpu_env(tmp_path, VLLM_HOST_PORT=str(port))))
    assert any(p.startswith(f"port 127.0.0.1:{port} is in use (VLLM_HOST_PORT") for p in problems), problems


def test_socket_paths_too_long(tmp_path):
    deep = "/tmp/" + "d" * 70
    problems = failures(run_script(["--cpu", "--check"], cpu_env(tmp_path, CUA_RUN_HOME=deep)))
    assert problems == [
        f"CUA_RUN_HOME={deep} is too long: sandbox sockets under it would exceed the 107-byte limit of unix "
        "socket paths (use a short path such as /tmp/cua-areal)"
    ]


@pytest.mark.parametrize("how", ["writable by others", "someone else's"])
def test_a_run_home_another_user_can_write_is_refused(tmp_path, how):
    """Its boxes' control folders would be theirs to fill with requests or to swap for links (a link as
    CUA_RUN_HOME is followed: its target is what is checked)."""
    home = tmp_path / "run-home"
    home.mkdir()
    home.chmod(0o777 if how == "writable by others" else 0o700)
    if how == "someone else's":
        os.chown(home, 65534, 65534)
    problems = failures(run_script(["--cpu", "--check"], cpu_env(tmp_path, CUA_RUN_HOME=str(home))))
    assert any(p.startswith(f"CUA_RUN_HOME={home} must be a folder of yours that no one else can write")
               for p in problems), problems  # fmt: skip


def test_disk_space(tmp_path):
    problems = failures(run_script(["--cpu", "--check"], cpu_env(tmp_path, CUA_MIN_FREE_GB="100000000")))
    assert problems and all("at least 100000000 GB wanted (CUA_MIN_FREE_GB)" in p for p in problems), problems


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["sandbox.backend=local"],
            "configs/local_cpu.yaml: sandbox.backend is 'local'; the trainer container starts sandboxes through the Docker API (sandbox.backend=docker) or on GBox (gbox)",
        ),
        (
            ["sandbox.backend=gbox"],
            "configs/local_cpu.yaml: sandbox.backend is gbox but GBOX_API_KEY is empty (set it in {env})",
        ),
        (["--config", "configs/missing.yaml"], "config not found: configs/missing.yaml (--config)"),
        (
            ["--config", "/etc/hostname"],
            "config /etc/hostname is outside this repository: the trainer image and its configs/ mount hold the repository only",
        ),
        (
            ["--resume_from_checkpoint", "/tmp"],
            "--resume_from_checkpoint /tmp: must be under the outputs directory {out} (CUA_OUTPUT_DIR), the only host directory the trainer sees",
        ),
    ],
    ids=["local-backend", "gbox-without-key", "missing-config", "config-outside", "resume-outside"],
)
def test_bad_run_arguments(tmp_path, args, expected):
    env = cpu_env(tmp_path)
    problems = failures(run_script(["--cpu", "--check", *args], env))
    assert problems == [expected.format(out=tmp_path / "outputs", env=env.get("CUA_ENV_FILE", ".env"))]


def test_a_gbox_run_with_its_key_passes_the_backend_check(tmp_path):
    # A disk problem makes the preflight fail where it would otherwise go on to start containers.
    env = cpu_env(tmp_path, GBOX_API_KEY="gbox-key", CUA_MIN_FREE_GB="100000000")
    problems = failures(run_script(["--cpu", "--check", "sandbox.backend=gbox"], env))
    assert problems and not [p for p in problems if "sandbox.backend" in p], problems
