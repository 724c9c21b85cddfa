"""Attacks on a repository box's control channel (sandbox/repo/box.py, control.sh), run by a real box: the
model's shell runs them as its own commands, in the sample repository image under podman. Each one worked
against the first version of the channel, where requests and answers shared one folder the box could write
and the host read and wrote there by name:
- an answer replaced by a link made the host read a host file (its own environment, API keys included) and
  hand it back as the command's output;
- the request folder or FIFO replaced by a link made the host create or write files in a host folder;
- a FIFO in place of an answer blocked the host's event loop for good;
- an exit status linked to /dev/zero made the host read until it ran out of memory;
- `ulimit -f` capped every file a command wrote, not only its output: a test file over ~5 KB, copied in by
  the scorer, was cut short, and such a task scored 0 on every episode.
Now the box cannot write where the host writes, the host reads no answer that is not a plain file of its
own (at most a capped number of bytes, without blocking), and a tampered answer is the command's failure."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import TAMPERED, Mount, RepoBox, repo_box, start_repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTests, load_repo_tasks

pytestmark = pytest.mark.slow

CALC = next(t for t in load_repo_tasks(SAMPLE_TASKS) if t.task_id == "repo/calc-add")
SECRET = "cua-test-host-secret-7f3a"


def on_answer(name: str, act: str) -> str:
    """A command that does `act` to its own answer file `name` ($p): the request's id is the script's name
    ($0), and the answer sits in the old shared folder or the new one."""
    return (
        f'for d in /run/cua/req /run/cua/out; do p="$d/$(basename "$0" .sh).{name}"; {act}; done 2>/dev/null'
    )


@pytest.fixture
async def box(sandbox_setup, monkeypatch):
    monkeypatch.setenv("CUA_TEST_SECRET", SECRET)  # what a host file read through a link would show
    backend = DockerBackend(run_id=f"pytest-channel-{os.getpid()}")
    started = await asyncio.to_thread(start_repo_box, backend, CALC.spec)
    try:
        yield started
    finally:
        await started.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        backend.close()


async def still_works(box: RepoBox) -> None:
    ok = await box.run("echo still here")
    assert (ok.exit_code, ok.output) == (0, "still here\n"), ok


async def test_an_answer_linked_to_a_host_file_is_not_read(box: RepoBox):
    for target in ("/proc/self/environ", "../../../../../../../../proc/self/environ"):
        got = await box.run(on_answer("out", f'ln -sf {target} "$p"'))
        assert SECRET not in got.output
        assert got.exit_code == TAMPERED and "nothing of it was read" in got.output, got
    await still_works(box)


async def test_the_box_cannot_redirect_where_the_host_writes(box: RepoBox, tmp_path: Path):
    """The requests' folder and FIFO replaced by links to a host folder and file: the host would write the
    next request's files there, or the request line into the file."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("untouched\n")
    attack = (
        f"for d in /run/cua/req /run/cua/in; do rm -rf $d; ln -s {tmp_path / 'folder'} $d; done; "
        f"for f in /run/cua/requests /run/cua/in/requests; do rm -f $f; ln -s {tmp_path / 'file'} $f; done"
    )
    tried = await box.run(attack)
    assert "Read-only file system" in tried.output or "Device or resource busy" in tried.output, tried
    await still_works(box)
    assert list((tmp_path / "folder").iterdir()) == []
    assert (tmp_path / "file").read_text() == "untouched\n"


async def test_a_fifo_in_place_of_an_answer_never_blocks_the_host(box: RepoBox):
    """(Against the first channel this test never returned: the host's open() of the FIFO blocked the event
    loop, so not even the 30 s wait_for fired; pytest's own timeout ended it.)"""
    beats: list[float] = []

    async def pulse() -> None:  # the event loop's heartbeat while the host reads the answer
        while True:
            beats.append(time.monotonic())
            await asyncio.sleep(0.05)

    heart = asyncio.create_task(pulse())
    await asyncio.sleep(0)
    try:
        got = await asyncio.wait_for(box.run(on_answer("out", 'rm -f "$p"; mkfifo "$p"')), 30)
    finally:
        beats.append(time.monotonic())
        heart.cancel()
    assert got.exit_code == TAMPERED and "not a regular file" in got.output, got
    longest = max(b - a for a, b in itertools.pairwise(beats))
    assert longest < 1.0, f"the event loop stalled for {longest:.1f}s"
    await still_works(box)


async def test_an_exit_status_linked_to_dev_zero_is_not_read(box: RepoBox):
    """The loop writes the status to <id>.rc.tmp and renames it: a link planted there becomes the status."""
    got = await asyncio.wait_for(box.run(on_answer("rc.tmp", 'ln -sf /dev/zero "$p"')), 30)
    assert got.exit_code == TAMPERED, got
    await still_works(box)


async def test_files_of_any_size_are_written_whole_and_only_the_output_is_capped(box: RepoBox):
    content = "".join(f"# line {i:05d} of a large file\n" for i in range(2000))  # 60 KB
    wrote = await box.write_file("big/file.py", content)
    assert wrote.exit_code == 0, wrote
    size = await box.run("wc -c < big/file.py; tail -n 1 big/file.py")
    assert size.output == f"{len(content)}\n# line 01999 of a large file\n", size
    made = await box.run("python3 -c \"open('made.bin', 'wb').write(b'x' * 200_000)\" && wc -c < made.bin")
    assert (made.exit_code, made.output) == (0, "200000\n"), made
    flood = await box.run("yes | head -c 3000000; echo done", max_bytes=1000)
    assert flood.truncated and flood.exit_code == 0, flood


async def test_a_patch_to_a_large_file_applies_whole(box: RepoBox):
    lines = [f"VALUE_{i} = {i}\n" for i in range(1200)]  # ~17 KB
    assert (await box.write_file("big.py", "".join(lines))).exit_code == 0
    patch = (
        "--- a/big.py\n+++ b/big.py\n@@ -1000,3 +1000,3 @@\n"
        f" {lines[999]}-{lines[1000]}+VALUE_1000 = -1\n {lines[1001]}"
    )
    applied = await box.apply_patch(patch)
    assert applied.exit_code == 0, applied
    check = await box.run("wc -l < big.py; grep -c . big.py; grep 'VALUE_1000 ' big.py; tail -n 1 big.py")
    assert check.output == "1200\n1200\nVALUE_1000 = -1\nVALUE_1199 = 1199\n", check


async def test_a_test_file_of_50_kb_scores_the_fix(box: RepoBox, tmp_path: Path):
    big = tmp_path / "test_ops.py"
    padding = "".join(f"# padding line {i:05d} ............................\n" for i in range(1000))
    big.write_text(padding + CALC.tests.files[0][1].read_text())
    assert big.stat().st_size > 50_000
    tests: RepoTests = replace(CALC.tests, files=((CALC.tests.files[0][0], big),))
    fresh = lambda: repo_box(box.backend, CALC.spec)  # noqa: E731
    assert (await score(box, tests, fresh)).reward == 0.0, "the planted bug fails the tests"
    assert (await box.apply_patch(CALC.solution.read_text())).exit_code == 0
    verdict = await score(box, tests, fresh)
    assert verdict.reward == 1.0, verdict.result.output


async def test_root_in_a_repository_box_is_nobody_on_the_host(box: RepoBox, tmp_path: Path):
    """R2E-Gym's images run as root. Before, root in the box was root on the host: through a folder the row
    mounts writable, it wrote as root where the host's root writes (here a root-owned 0755 folder), and
    what it wrote in its answers folder was root's. Now the box has a user namespace (podman, a fixed
    mapping): still root inside, an unprivileged id outside."""
    inside = await box.run("id -u; cat /proc/self/uid_map")
    uid, mapping = inside.output.split("\n", 1)
    assert uid == "0", "root inside, as the image says"
    outside_start = int(mapping.split()[1])
    assert outside_start != 0, f"root in the box maps to host uid {outside_start}"

    wrote = await box.run("touch /run/cua/out/mine && echo ok")
    assert wrote.output == "ok\n"
    assert (box.answers / "mine").stat().st_uid == outside_start, "the box's files are not root's on the host"


async def test_a_box_cannot_write_as_root_through_a_writable_mount(sandbox_setup, tmp_path: Path):
    host = tmp_path / "host-owned"
    host.mkdir(mode=0o755)
    backend = DockerBackend(run_id=f"pytest-userns-{os.getpid()}")
    spec = replace(CALC.spec, mounts=(Mount(str(host), "/data", read_only=False),))
    try:
        async with repo_box(backend, spec) as box:
            tried = await box.run("touch /data/planted 2>&1; ls /data")
        assert "Permission denied" in tried.output, tried
        assert not (host / "planted").exists()
    finally:
        backend.close()
