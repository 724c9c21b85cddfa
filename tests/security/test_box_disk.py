"""A desktop box filling disks, from a shell inside it (what desktop/terminal-file gives the agent: a process of
the server's own user; here `podman exec`, as that user). Real boxes of the sandbox image under podman.

Before: the box's root filesystem was the engine's writable layer on the host's disk, and its control
folder a host folder it could write, so a `dd` in the box wrote to the host's disk until it was full (the
engines' own quotas, `--storage-opt size`, need XFS with project quotas). Now the root filesystem is
read-only, /tmp, /var/tmp and the user's home are RAM folders of at most half the box's memory (counted
against its memory limit), and the control folder is read-only once the server serves
(sandbox/backends/docker.py)."""

from __future__ import annotations

import os
import re

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec
from tests.security.box_shell import box_shell

pytestmark = pytest.mark.slow

MEMORY_MB = 768  # RAM folders of 384 MB each


async def test_a_box_cannot_write_to_the_hosts_disk_and_its_ram_folders_are_capped(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-disk-{os.getpid()}")
    sb = await backend.start(SandboxSpec(memory_mb=MEMORY_MB))
    try:
        shell = box_shell(backend, sb.id)
        control = os.path.dirname(sb.meta["socket"])
        for target in ("/run/cua/fill", "/opt/cua/fill", "/etc/fill", "/run/fill", "/fill"):
            out = shell(f"dd if=/dev/zero of={target} bs=1M count=64 2>&1")
            assert re.search(r"Permission denied|Read-only file system", out), (target, out)
        assert os.listdir(control) == ["control.sock"], "the control folder holds the socket alone"

        for folder in ("/tmp", "/var/tmp", "$HOME"):
            out = shell(f"dd if=/dev/zero of={folder}/fill bs=1M count=2000 2>&1; du -sm {folder}/fill")
            assert "No space left on device" in out, (folder, out)
            written = int(out.split()[-2])
            assert MEMORY_MB // 2 - 8 <= written <= MEMORY_MB // 2, (folder, out)
            shell(f"rm -f {folder}/fill")
        (listed,) = backend.docker.api.containers(all=True, size=True, filters={"name": f"^{sb.id}$"})
        layer = listed.get("SizeRw") or 0
        assert layer < 2**20, f"{layer} bytes reached the engine's writable layer"

        await sb.reset("miniwob/click-test", 0)  # the box still serves
        assert (await sb.evaluate(wait_s=0.1))["reward"] == 0.0
    finally:
        await sb.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        assert not os.path.exists(backend.run_dir / sb.id), "the locked control folder is removed too"
        backend.close()
