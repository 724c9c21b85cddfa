"""The translation of a repository box's docker-py arguments into podman's own create call
(sandbox/backends/libpod.py). That the engine applies them is tested on real boxes
(tests/sandbox/test_repo_box.py, tests/security/test_repo_box_channel.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox.backends import libpod
from sandbox.backends.docker import DockerBackend


def _run_kwargs() -> dict:
    backend = SimpleNamespace(run_id="r")  # isolation() reads its run id alone
    kwargs = DockerBackend.isolation(backend, memory_mb=700, cpus=0.5, pids=99)  # type: ignore[arg-type]
    return {
        **kwargs,
        "name": "cua-sb-x",
        "entrypoint": ["/bin/sh", "/c.sh"],
        "command": [],
        "working_dir": "/testbed",
        "environment": {"A": "1"},
        "volumes": {"/host/in": {"bind": "/run/cua/in", "mode": "ro"}},
        "tmpfs": {"/run/cua-tmp": "size=64m,mode=1777"},
    }


def test_every_isolation_setting_reaches_the_spec():
    spec = libpod.create_spec("img:1", _run_kwargs())
    assert spec["netns"] == {"nsmode": "none"} and spec["cap_drop"] == ["ALL"] and spec["no_new_privileges"]
    assert spec["resource_limits"] == {
        "memory": {"limit": 700 << 20, "swap": 700 << 20},
        "cpu": {"quota": 50_000, "period": 100_000},
        "pids": {"limit": 99},
    }
    assert spec["init"] and spec["labels"]["cua.sandbox"] == "1"
    assert spec["log_configuration"] == {"driver": "k8s-file", "size": 10 << 20}
    assert {
        "type": "bind",
        "source": "/host/in",
        "destination": "/run/cua/in",
        "options": ["rbind", "ro"],
    } in (spec["mounts"])
    assert {
        "type": "tmpfs",
        "source": "tmpfs",
        "destination": "/run/cua-tmp",
        "options": ["size=64m", "mode=1777"],
    } in spec["mounts"]
    ids = [{"container_id": 0, "host_id": libpod.HOST_ID_START, "size": libpod.ID_RANGE}]
    assert spec["idmappings"] == {"UIDMap": ids, "GIDMap": ids} and libpod.HOST_ID_START > 65535


@pytest.mark.parametrize("extra", [{"privileged": True}, {"security_opt": ["seccomp=unconfined"]}])
def test_an_argument_it_does_not_translate_is_refused(extra):
    with pytest.raises(ValueError, match="not translated"):
        libpod.create_spec("img:1", {**_run_kwargs(), **extra})
