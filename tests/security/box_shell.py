"""A shell in a real box, as the agent gets one (desktop/terminal-file: a process of the box's own user);
here `exec` through the engine, as that user."""

from __future__ import annotations

from collections.abc import Callable

from sandbox.backends.docker import DockerBackend


def box_shell(backend: DockerBackend, box_id: str) -> Callable[[str], str]:
    """`shell(cmd)`: cmd's stdout and stderr, run by `sh -c` in the box."""
    box = backend.docker.containers.get(box_id)
    return lambda cmd: box.exec_run(["sh", "-c", cmd], demux=False).output.decode(errors="replace")
