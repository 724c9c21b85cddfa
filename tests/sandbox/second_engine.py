"""A second podman engine beside the primary one, for tests of several engines (several endpoints on one
machine, and Ray nodes that each own an engine): one per test session, started on first use."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cua_agent.inference.local_server import die_with_parent
from sandbox.base import SandboxSpec, cua_home

SPEC = SandboxSpec()
REPO_IMAGE = "localhost/cua-repo-samples:latest"  # the sample repository tasks' (sandbox/repo/samples)
IMAGES = (SPEC.image, REPO_IMAGE)  # what boxes on the second engine run
# The second engine shares nothing with the primary one: its own containers, libpod database, runtime
# state, image store (copies of IMAGES, made once and kept) and locks. Sharing was tried and
# hung both engines in CI (podman 4.3.1): reading the primary's images as an additional image store takes
# the primary's storage locks from a second process, and both engines take container locks from the one
# SHM segment /dev/shm/libpod_lock, so a stuck request in either wedged the other. Its storage persists,
# so boxes orphaned by a killed run are found later.
ENGINE2_STATE = cua_home() / "sandbox" / "engine2"
ENGINE2_RUN = Path("/run/cua/engine2")  # runtime state, like /run/containers and /run/libpod


def _answers(url: str) -> bool:
    import docker

    try:
        client = docker.DockerClient(base_url=url, timeout=2)
    except Exception:
        return False
    client.close()
    return True


def _engine2_podman(driver: str) -> tuple[list[str], dict[str, str]]:
    """The podman command line and environment of the second engine: its own storage and file locks."""
    conf = ENGINE2_STATE / "containers.conf"
    system = Path("/etc/containers/containers.conf")
    lines = system.read_text().splitlines() if system.exists() else []
    if "[engine]" not in lines:
        lines.append("[engine]")
    lines.insert(lines.index("[engine]") + 1, 'lock_type = "file"  # under --tmpdir, not the shared SHM')
    conf.write_text("\n".join(lines) + "\n")
    cmd = [
        "podman",
        *("--root", str(ENGINE2_STATE / "storage"), "--runroot", str(ENGINE2_RUN / "run")),
        *("--tmpdir", str(ENGINE2_RUN / "tmp"), "--storage-driver", driver),
    ]
    return cmd, {**os.environ, "CONTAINERS_CONF": str(conf)}


def _image_id(image: str, cmd: list[str], env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [*cmd, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True, env=env
    )
    return out.stdout.strip() if out.returncode == 0 else ""


def _copy_image(image: str, podman2: list[str], env: dict[str, str]) -> None:
    """One of the primary's images into the second engine's store, when it is not there yet (the sandbox
    image: ~50 s)."""
    wanted = _image_id(image, ["podman"])
    assert wanted, f"no {image} on the primary engine; run `make setup`"
    if _image_id(image, podman2, env) == wanted:
        return
    save = subprocess.Popen(["podman", "save", image], stdout=subprocess.PIPE)
    subprocess.run([*podman2, "load", "--quiet"], stdin=save.stdout, check=True, env=env, capture_output=True)
    assert save.wait() == 0
    assert _image_id(image, podman2, env) == wanted
    subprocess.run([*podman2, "image", "prune", "--force"], env=env, capture_output=True)  # older copies


@pytest.fixture(scope="session")
def second_engine(sandbox_setup: None) -> Iterator[str]:
    """A second podman engine's Docker API on its own socket (per test session), stopped at the end."""
    driver = json.loads(
        subprocess.run(
            ["podman", "info", "--format", "json"], check=True, capture_output=True, text=True
        ).stdout
    )["store"]["graphDriverName"]
    ENGINE2_STATE.mkdir(parents=True, exist_ok=True)
    for stale in [*Path("/run/cua").glob("engine2-*.sock"), *ENGINE2_STATE.glob("service-*.log")]:
        if not Path(f"/proc/{stale.stem.rpartition('-')[2]}").exists():  # left by a killed test run
            stale.unlink(missing_ok=True)
    podman2, env = _engine2_podman(driver)
    for image in IMAGES:
        _copy_image(image, podman2, env)
    sock = Path(f"/run/cua/engine2-{os.getpid()}.sock")
    url, log_path = f"unix://{sock}", ENGINE2_STATE / f"service-{os.getpid()}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*podman2, "system", "service", "--time=0", url],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ENGINE2_STATE,  # conmon drops OOM markers in its cwd
            preexec_fn=die_with_parent,  # it never outlives a killed test run
        )
    try:
        deadline = time.monotonic() + 60
        while not _answers(url):
            assert proc.poll() is None and time.monotonic() < deadline, f"no second engine; see {log_path}"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        sock.unlink(missing_ok=True)
    log_path.unlink()  # kept only when the engine did not start
