"""Sandbox backends behind one async API (sandbox.base.Backend)."""

from __future__ import annotations

from typing import Any

from sandbox.base import Backend


def make_backend(name: str, **kwargs: Any) -> Backend:
    if name == "docker":
        from sandbox.backends.docker import DockerBackend

        return DockerBackend(**kwargs)
    if name == "local":
        from sandbox.backends.local import LocalBackend

        return LocalBackend(**kwargs)
    raise ValueError(f"unknown sandbox backend {name!r} (expected 'docker' or 'local')")
