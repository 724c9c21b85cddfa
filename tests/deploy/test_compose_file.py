"""docker-compose.areal.yml: valid against the Compose Specification's JSON schema, and the layout of the card
(vLLM tensor-parallel 4 on GPUs 0-3, the trainer on GPUs 4-7) with its env-var defaults and overrides, plus
the paths that two containers must see identically (weight sync, sandbox sockets)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft201909Validator, FormatChecker

from cua_agent.train.cli import LAUNCHER_MARGIN_S as MARGIN_S
from sandbox.base import cua_home
from tests.deploy.stack import (
    COMPOSE_FILE,
    REPO,
    SCHEMA,
    SCRIPT,
    compose_variables,
    env_example_sections,
    load_compose,
    strings,
)

OVERRIDES = {
    "VLLM_GPU0": "4",
    "VLLM_GPU1": "5",
    "VLLM_GPU2": "6",
    "VLLM_GPU3": "7",
    "TRAINER_GPU0": "0",
    "TRAINER_GPU1": "1",
    "TRAINER_GPU2": "2",
    "TRAINER_GPU3": "3",
    "VLLM_TP_SIZE": "2",
    "TRAINER_NPROC": "2",
    "VLLM_HOST_PORT": "18000",
    "CUA_MODEL": "Qwen/Qwen3-VL-4B-Instruct",
    "CUA_OUTPUT_DIR": "/data/cua-outputs",
    "CUA_RUN_HOME": "/var/tmp/cua",
}


@pytest.fixture(scope="module")
def validator() -> Draft201909Validator:
    assert SCHEMA.is_file(), f"{SCHEMA} missing: run scripts/setup.sh deploy"
    checker = FormatChecker()

    @checker.checks("duration")
    def is_duration(value: object) -> bool:  # Go durations, what compose accepts (e.g. 30m, 1h30m, 15s)
        return isinstance(value, str) and re.fullmatch(r"(\d+(\.\d+)?(ns|us|ms|s|m|h))+", value) is not None

    return Draft201909Validator(json.loads(SCHEMA.read_text()), format_checker=checker)


def errors(validator: Draft201909Validator, doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def devices(service: dict[str, Any]) -> dict[str, Any]:
    (request,) = service["deploy"]["resources"]["reservations"]["devices"]
    return request


@pytest.mark.parametrize("env", [{}, OVERRIDES], ids=["defaults", "overrides"])
def test_validates_against_the_compose_spec(validator, env):
    assert errors(validator, load_compose(env)) == []


def test_the_validator_catches_what_compose_would_reject(validator):
    """A control: the schema check is not vacuous."""
    doc = load_compose()
    bad_key = copy.deepcopy(doc)
    devices(bad_key["services"]["vllm"])["device_id"] = ["0"]  # typo of device_ids
    bad_duration = copy.deepcopy(doc)
    bad_duration["services"]["vllm"]["healthcheck"]["start_period"] = "30 minutes"
    bad_type = copy.deepcopy(doc)
    bad_type["services"]["trainer"]["depends_on"]["vllm"]["condition"] = "healthy"
    for broken in (bad_key, bad_duration, bad_type):
        assert errors(validator, broken), "a broken file passed the schema check"


def test_gpu_layout_and_tensor_parallel_size_of_the_card():
    services = load_compose()["services"]
    vllm, trainer = services["vllm"], services["trainer"]
    for service in (vllm, trainer):
        assert devices(service)["driver"] == "nvidia" and devices(service)["capabilities"] == ["gpu"]
        assert "count" not in devices(service)  # explicit ids, never "all GPUs"
    assert devices(vllm)["device_ids"] == ["0", "1", "2", "3"]
    assert devices(trainer)["device_ids"] == ["4", "5", "6", "7"]
    assert vllm["environment"]["VLLM_TP_SIZE"] == "4"
    assert trainer["entrypoint"][:6] == [
        "python", "-m", "cua_agent.train.torchrun", "--standalone", "--nproc-per-node", "4"
    ]  # fmt: skip
    # the default config trains with as many FSDP processes as the trainer starts
    config = yaml.safe_load((REPO / "configs" / "cua_grpo.yaml").read_text())
    assert trainer["command"] == ["--config", "configs/cua_grpo.yaml"]
    assert config["actor"]["backend"] == "fsdp:d4" and config["allocation_mode"] == "fsdp:d4"


def test_gpu_layout_follows_the_environment():
    services = load_compose(OVERRIDES)["services"]
    vllm, trainer = services["vllm"], services["trainer"]
    assert devices(vllm)["device_ids"] == ["4", "5", "6", "7"]
    assert devices(trainer)["device_ids"] == ["0", "1", "2", "3"]
    assert vllm["environment"]["VLLM_TP_SIZE"] == "2"
    assert trainer["entrypoint"][5] == "2"
    assert vllm["ports"] == ["127.0.0.1:18000:8000"]
    assert vllm["environment"]["VLLM_MODEL"] == trainer["environment"]["CUA_MODEL"] == OVERRIDES["CUA_MODEL"]


def test_trainer_waits_for_a_healthy_vllm_it_can_reach():
    services = load_compose()["services"]
    vllm, trainer = services["vllm"], services["trainer"]
    assert trainer["depends_on"] == {"vllm": {"condition": "service_healthy"}}
    health = vllm["healthcheck"]
    assert "start_period" in health and health["start_period"].endswith("m"), "model downloads take minutes"
    port = vllm["environment"]["VLLM_PORT"]
    assert health["test"] == ["CMD", "curl", "-fsS", f"http://127.0.0.1:{port}/health"]
    # the trainer reaches the server by its service name on the stack's network, at the port it serves on
    assert trainer["environment"]["AREAL_LLM_SERVER_ADDRS"] == f"vllm:{port}"
    assert vllm["ports"] == [f"127.0.0.1:8000:{port}"], "published on the host's loopback only"


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """target -> (source, mode)"""
    out = {}
    for spec in service["volumes"]:
        source, target, *mode = spec.split(":")
        out[target] = (source, mode[0] if mode else "rw")
    return out


def test_weight_sync_directory_is_the_same_path_in_both_containers():
    """The trainer writes weight_update_v<N> under cluster.fileroot (relative to its working directory) and
    tells vLLM to load that path: both must mount the outputs at the same place."""
    services = load_compose()["services"]
    workdir = re.search(r"^WORKDIR (\S+)$", (REPO / "Dockerfile").read_text(), re.M).group(1)
    fileroot = yaml.safe_load((REPO / "configs" / "cua_grpo.yaml").read_text())["cluster"]["fileroot"]
    trainer_outputs = Path(workdir) / fileroot.split("/")[0]
    trainer_mounts, vllm_mounts = mounts(services["trainer"]), mounts(services["vllm"])
    assert trainer_mounts[str(trainer_outputs)] == ("./outputs", "rw")
    assert vllm_mounts[str(trainer_outputs)] == ("./outputs", "ro")
    # one model cache: vLLM downloads, the trainer reads it offline
    assert vllm_mounts["/models"] == ("model-cache", "rw") and trainer_mounts["/models"] == (
        "model-cache",
        "ro",
    )
    assert "model-cache" in load_compose()["volumes"]
    hf_home = services["trainer"]["environment"]["HF_HOME"]
    assert hf_home == services["vllm"]["environment"]["HF_HOME"] and hf_home.startswith("/models/")


def test_sandbox_sockets_and_docker_api(monkeypatch):
    """Sandboxes have no network; their control sockets live in a host directory the Docker daemon mounts
    into each box, so the trainer must see that directory at its host path: the one DockerBackend uses."""
    trainer = load_compose(OVERRIDES)["services"]["trainer"]
    monkeypatch.setenv("CUA_HOME", trainer["environment"]["CUA_HOME"])
    run_dir = str(cua_home() / "sandbox" / "run")  # DockerBackend's default run_dir
    assert run_dir == "/var/tmp/cua/sandbox/run"
    assert mounts(trainer)[run_dir] == (run_dir, "rw")
    socket = trainer["environment"]["DOCKER_HOST"].removeprefix("unix://")
    assert mounts(trainer)[socket] == ("/var/run/docker.sock", "rw")
    assert trainer["env_file"] == ".env" and trainer["init"] is True


def test_every_compose_and_script_variable_is_documented_with_the_same_default():
    """env.example's deployment section lists exactly what docker-compose.areal.yml and
    docker_train_areal.sh read; where both read a variable, their defaults agree."""
    compose_vars = compose_variables("\n".join(strings(yaml.safe_load(COMPOSE_FILE.read_text()))))
    # the script's settings are its upper-case ${NAME:-default} reads (its own variables are lower case)
    code = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    script_vars = {k: v for k, v in compose_variables(code).items() if k.isupper() and v is not None}
    settings, deployment = env_example_sections()
    # Not .env material: the env file's own path; podman's socket of the CPU variant (scripts/setup_sandbox.sh);
    # CUA_HOME is a Settings variable (first section).
    not_in_env_file = {"CUA_ENV_FILE", "CUA_PODMAN_SOCKET"}
    read = (set(compose_vars) | set(script_vars)) - not_in_env_file - set(settings)
    assert set(deployment) == read, f"env.example vs compose/script: {sorted(set(deployment) ^ read)}"
    assert not set(deployment) & set(settings)
    same = {"VLLM_TP_SIZE", "TRAINER_NPROC", "VLLM_HOST_PORT", "VLLM_HEALTH_TIMEOUT", "CUA_RUN_HOME"}
    same |= {f"VLLM_GPU{i}" for i in range(4)} | {f"TRAINER_GPU{i}" for i in range(4)}
    for name in sorted(same):
        assert compose_vars[name] == script_vars[name], f"{name}: compose and script defaults differ"


def seconds(duration: str) -> float:
    """A compose duration such as '17m' or '30s'."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)([hms])", duration))


def test_a_stopping_trainer_gets_the_time_every_shipped_config_asks_for():
    """`docker compose stop/down` kills the trainer after stop_grace_period: it must outlast the ranks' own
    deadline (checkpoint.stop_timeout_s) and torchrun's margin after it, or the stop-time checkpoint is cut."""
    grace = seconds(load_compose()["services"]["trainer"]["stop_grace_period"])
    for path in sorted((REPO / "configs").glob("cua_grpo*.yaml")):
        stop = yaml.safe_load(path.read_text())["checkpoint"]["stop_timeout_s"]
        assert grace >= stop + MARGIN_S, f"{path.name}: stop_timeout_s {stop} + {MARGIN_S} > {grace}"
