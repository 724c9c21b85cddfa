"""What the deployment tests share: the compose file as compose reads it (variable interpolation), the
Compose Specification's schema (installed by scripts/setup_deploy.sh), and running docker_train_areal.sh."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

from cua_agent.inference.local_server import REPO

COMPOSE_FILE = REPO / "docker-compose.areal.yml"
SCRIPT = REPO / "docker_train_areal.sh"
CUA_HOME = Path(os.environ.get("CUA_HOME") or Path.home() / ".cache" / "cua-areal")
SCHEMA = CUA_HOME / "deploy" / "compose-spec.json"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}: the forms compose implements.
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Substitute variables in every string value (not keys), as compose does before it validates."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value
    if re.search(r"\$(?!\{|\$)", value.replace("$$", "")):
        raise ValueError(f"unsupported variable syntax in {value!r}")

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        set_, nonempty = name in env, bool(env.get(name))
        if op in (":-", "-"):
            return env[name] if (nonempty if op == ":-" else set_) else arg
        if op in (":?", "?"):
            if not (nonempty if op == ":?" else set_):
                raise KeyError(f"{name}: {arg}")
            return env[name]
        return env.get(name, "")

    return _VAR.sub(sub, value).replace("$$", "$")


def compose_variables(text: str) -> dict[str, str | None]:
    """Variables a compose or shell file reads, with their `:-` default (None when it has none)."""
    found: dict[str, str | None] = {}
    for m in _VAR.finditer(text):
        default = m.group(3) if m.group(2) == ":-" else None
        if found.get(m.group(1)) is None:
            found[m.group(1)] = default
    return found


def strings(value: Any) -> list[str]:
    """Every string value of a parsed YAML document (what compose interpolates; comments are not)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def load_compose(env: dict[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    return interpolate(yaml.safe_load(path.read_text()), env or {})


def env_example_sections() -> tuple[list[str], list[str]]:
    """Keys of env.example: (read by the trainer, deployment only), split at the deployment marker."""
    settings: list[str] = []
    deployment: list[str] = []
    current = settings
    for line in (REPO / "env.example").read_text().splitlines():
        if line.startswith("# ---- Deployment"):
            current = deployment
        elif re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            current.append(line.split("=", 1)[0])
    return settings, deployment


def write_env_file(path: Path, **values: str) -> Path:
    """An env file with every key of env.example (empty = default) and the given values."""
    settings, deployment = env_example_sections()
    lines = [f"{k}={values.pop(k, '')}" for k in settings + deployment]
    assert not values, f"not in env.example: {sorted(values)}"
    path.write_text("\n".join(lines) + "\n")
    return path


def path_without(tmp: Path, *names: str) -> str:
    """A PATH with every executable of the current PATH except `names` (to simulate missing tools)."""
    bin_dir = tmp / f"bin-without-{'-'.join(names)}"
    bin_dir.mkdir(exist_ok=True)
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            target = bin_dir / entry.name
            if entry.name in names or target.exists() or not os.access(entry.path, os.X_OK):
                continue
            target.symlink_to(entry.path)
    return str(bin_dir)


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60).stdout.strip()


TEST_PROJECT = f"cua-test-{os.getpid()}"  # the compose project of script_env


def remove_model_cache(project: str) -> None:
    """The model-cache volume compose gives a project (docker-compose.areal.yml), which a user's project
    keeps on purpose and a test's must not leave."""
    podman("volume", "rm", "-f", f"{project}_model-cache")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_script(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def script_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a script run: this process's, minus any deployment variable set outside."""
    _, deployment = env_example_sections()
    env = {k: v for k, v in os.environ.items() if k not in deployment and k != "CUA_ENV_FILE"}
    env["COMPOSE_PROJECT_NAME"] = TEST_PROJECT
    env["CUA_OUTPUT_DIR"] = str(tmp / "outputs")
    env["CUA_RUN_HOME"] = (
        f"/tmp/cua-test-{os.getpid()}"  # short: sandbox socket paths; --check creates nothing
    )
    env.update(extra)
    return env
