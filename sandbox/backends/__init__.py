"""Sandbox backends behind one async API (sandbox.base.Backend)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox.base import Backend

# Where boxes run: the one list of backend names (configs, scripts and make_backend check against it).
BACKENDS = ("docker", "local", "gbox", "ray")


def make_backend(name: str, docker_hosts: Sequence[str] = (), **kwargs: Any) -> Backend:
    """`docker_hosts`: Docker endpoints to spread boxes over; none = DOCKER_HOST or the podman default,
    one = that endpoint (both: a plain DockerBackend, the fast path), several = a MultiBackend."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r} (expected one of {', '.join(BACKENDS)})")
    if name == "docker":
        from sandbox.backends.docker import DockerBackend, check_docker_hosts

        hosts = check_docker_hosts(list(docker_hosts))
        if hosts and "docker_host" in kwargs:
            raise ValueError("pass docker_hosts or docker_host, not both")
        if len(hosts) <= 1:
            return DockerBackend(**kwargs, **({"docker_host": hosts[0]} if hosts else {}))
        from sandbox.backends.multi import MultiBackend

        run_id = kwargs.pop("run_id", None)
        return MultiBackend(
            hosts,
            lambda host, rid: DockerBackend(run_id=rid, docker_host=host, **kwargs),
            name="docker",
            run_id=run_id,
        )
    if docker_hosts:
        raise ValueError(f"docker_hosts: only for the docker backend, not {name!r}")
    if name == "gbox":
        from sandbox.backends.gbox import GboxBackend

        return GboxBackend(**kwargs)
    if name == "ray":
        from sandbox.backends.ray_hosts import RayBackend

        return RayBackend(**kwargs)
    from sandbox.backends.local import LocalBackend

    return LocalBackend(**kwargs)
