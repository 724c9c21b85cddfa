"""A docker-py `containers.run` call, as podman's own (libpod) API creates it in a user namespace.

Repository boxes run as root in R2E-Gym's images; under podman each gets a user namespace, so root in the
box is an unprivileged id on the host. Docker's API takes no id mapping and podman 4.3's `userns=auto` is
not usable: starting and removing such boxes concurrently (four episodes at once, say) deadlocked the
podman service, and every later call timed out (bench/box_churn.py --userns auto: in its third round; a CI
run hung the same way); its `auto:size=N` form failed mounts. A fixed mapping passed through libpod's own
create call started and removed 2,076 boxes in 240 s of the same churn with every call answered. All boxes
share the range, as with Docker's daemon-wide `userns-remap`: none shares files or processes with another,
and none holds a host id.

Only the arguments the boxes use are translated; any other is refused, so that a setting added to
`DockerBackend.isolation` cannot be dropped here unnoticed.
"""

from __future__ import annotations

from typing import Any

from docker.utils import parse_bytes

# The box's ids 0..65535 are the host's HOST_ID_START..+65535, the start of the subordinate range that
# scripts/setup_sandbox.sh gives the user "containers" (rootful podman itself needs no such entry).
HOST_ID_START = 2147483647
ID_RANGE = 65536
CREATE_PATH = "/v4.0.0/libpod/containers/create"  # podman 4 and 5 both route any /v4.x prefix


def _mounts(volumes: dict[str, dict[str, str]], tmpfs: dict[str, str]) -> list[dict[str, Any]]:
    binds = [
        {"type": "bind", "source": src, "destination": v["bind"], "options": ["rbind", v.get("mode", "rw")]}
        for src, v in volumes.items()
    ]
    temps = [
        {"type": "tmpfs", "source": "tmpfs", "destination": dst, "options": [o for o in opts.split(",") if o]}
        for dst, opts in tmpfs.items()
    ]
    return binds + temps


def create_spec(image: str, run_kwargs: dict[str, Any]) -> dict[str, Any]:
    """libpod's container spec for `docker.containers.run(image, **run_kwargs)`, in a user namespace whose
    ids 0..65535 are the host's HOST_ID_START onwards."""
    kw = dict(run_kwargs)
    kw.pop("detach", None)
    log = kw.pop("log_config", None)
    security = kw.pop("security_opt", [])
    if set(security) - {"no-new-privileges"}:
        raise ValueError(f"security options not translated for podman: {security}")
    ids = [{"container_id": 0, "host_id": HOST_ID_START, "size": ID_RANGE}]
    spec: dict[str, Any] = {
        "image": image,
        "name": kw.pop("name"),
        "labels": kw.pop("labels", {}),
        "init": kw.pop("init", False),
        "netns": {"nsmode": kw.pop("network_mode", "bridge")},
        "cap_drop": kw.pop("cap_drop", []),
        "no_new_privileges": "no-new-privileges" in security,
        "entrypoint": kw.pop("entrypoint", None),
        "command": kw.pop("command", None),
        "work_dir": kw.pop("working_dir", None),
        "create_working_dir": True,  # as Docker does
        "env": kw.pop("environment", {}),
        "mounts": _mounts(kw.pop("volumes", {}), kw.pop("tmpfs", {})),
        "userns": {"nsmode": "private"},
        "idmappings": {"UIDMap": ids, "GIDMap": ids},
        "resource_limits": {
            "memory": {
                "limit": parse_bytes(kw.pop("mem_limit")),
                "swap": parse_bytes(kw.pop("memswap_limit")),
            },
            "cpu": {"quota": kw.pop("nano_cpus") // 10_000, "period": 100_000},
            "pids": {"limit": kw.pop("pids_limit")},
        },
    }
    if log is not None:  # docker-py's LogConfig: podman's json-file is its k8s-file
        spec["log_configuration"] = {"driver": "k8s-file", "size": parse_bytes(log.config.get("max-size", 0))}
    if kw:
        raise ValueError(f"run arguments not translated for podman: {sorted(kw)}")
    return {k: v for k, v in spec.items() if v is not None}
