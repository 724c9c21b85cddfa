"""Repository boxes: a task's own image (any image with a POSIX shell; no X server), isolated like the
desktop boxes (no network, no capabilities, limits, owner labels, reaped the same way), driven through
control.sh over a host folder: run a command with a timeout and an output cap, read and write files,
apply a patch.

Failures keep their meaning: a command that fails, hangs (cut at its timeout) or floods its output is
the agent's business (a CommandResult says so); a box that is gone or stops answering raises
(SandboxDied / SandboxTimeout), and sandbox/base.py `broken_from_inside` tells whose doing it was: a box
broken from inside is the policy's 0, one the engine killed or lost is an infrastructure failure.

Everything in a box is hostile (the model has a shell there). The host writes requests into a folder the
box can only read, and reads answers from the one it writes without following links: an answer must be a
regular file with one link, read up to a cap, opened without blocking. An answer that is not is the
command's failure (exit code TAMPERED, output saying why), never the host's: no host file is read or
written through the box's names, and the event loop never waits on the box's files.

Every box records, at its start and before anything else runs in it (control.sh runs the host's start
script, then says it is ready), its starting tree: the id of the tree git makes of the workdir as the image
left it (HEAD's tree, then the work tree added with a private index: untracked files in, ignored ones out).
Scoring takes the agent's work as its diff against that tree, not against HEAD: R2E-Gym's images change
files after their checkout (sandbox/repo/scoring.py). The id stays on the host (`RepoBox.start_tree`); the
box keeps only the tree's objects in its own repository.

A box of R2E-Gym's layout (`RepoSpec.r2e_layout`) started for an agent then hides the harness, as R2E-Gym's
runtime does before its agent starts, only more: <workdir>/run_tests.sh moves to /root and /r2e_tests, the
hidden tests, is removed (root in the box reads anything left there); a box started for scoring (inside
`scoring_boxes()`) keeps both, and the scorer moves them (scoring.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import re
import shlex
import shutil
import stat
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.aio import finish
from sandbox.base import start_polls
from sandbox.errors import BoxBroken, SandboxDied, SandboxStartError, SandboxTimeout

if TYPE_CHECKING:
    from sandbox.backends.docker import DockerBackend

CONTROL_SCRIPT = Path(__file__).with_name("control.sh")
REQUESTS_IN_BOX = "/run/cua/in"  # the host's requests: read-only in the box
ANSWERS_IN_BOX = "/run/cua/out"  # the box's answers
OUTPUT_TMPFS_IN_BOX = "/run/cua-tmp"  # a command's whole output, before the loop cuts it (control.sh)
OUTPUT_TMPFS_SIZE = "64m"  # a flood fills this, not the host's disk
CONTROL_SCRIPT_IN_BOX = "/run/cua-control/control.sh"
MAX_OUTPUT = 16_384  # characters of a command's output an agent sees by default
MAX_RC_BYTES = 16  # an exit status is a few digits
TAMPERED = -2  # the exit code of a command whose answer the box replaced (a link, a FIFO, not a number)
TRUNCATION_MARK = "\n[... output truncated at {n} bytes ...]"

# R2E-Gym's layout: the harness script in the workdir, the hidden tests at the root, both moved to its
# runtime's home (R2E-Gym's SKIP_FILES_NEW, moved by its DockerRuntime.setup_env)
R2E_TESTS = "/r2e_tests"
R2E_HOME = "/root"
R2E_HARNESS = ("run_tests.sh", "r2e_tests")  # paths in the workdir that never come from the agent
START_TIMEOUT_S = 300  # the start script: git hashes the work tree once
TREE_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# The tree git makes of the work tree, in a private index seeded from `seed` (files the seed has stay in it
# even where ignored, new ones come in unless ignored); the agent's own index, commits and hooks play no part.
# Prints "cua-tree <id>", or "cua-no-tree" and git's complaint.
TREE_SCRIPT = """t=$(mktemp -d {tmp}/cua-tree.XXXXXX) || exit 96
if tree=$( {{ GIT_INDEX_FILE="$t/index"; export GIT_INDEX_FILE; {seed} && git add -A && git write-tree; }} \
    2>"$t/err" ); then
  echo "cua-tree $tree"
else
  echo cua-no-tree; tail -c 300 "$t/err"
fi
rm -rf "$t"
"""
HEAD_SEED = "{ git read-tree HEAD 2>/dev/null || git read-tree --empty; }"  # an unborn HEAD: empty
# The box's root has no capabilities: "/" of a Debian rootfs is r-x even for it, so "/" is made writable
# (its owner may) for the move, then set back
ROOT_WRITABLE = "w=; [ -w / ] || { chmod u+w / && w=1; }"
ROOT_BACK = '[ -z "$w" ] || chmod u-w /'
MOVE_HARNESS = f"mkdir -p {R2E_HOME} && {{ [ ! -e run_tests.sh ] && [ ! -L run_tests.sh ] || mv -f run_tests.sh {R2E_HOME}/; }}"
HIDE_SCRIPT = f"""{ROOT_WRITABLE}
{MOVE_HARNESS} && {{ chmod -R u+w {R2E_TESTS} 2>/dev/null; rm -rf {R2E_TESTS}; [ ! -e {R2E_TESTS} ]; }}
rc=$?; {ROOT_BACK}
[ $rc = 0 ] || {{ echo "run_tests.sh not moved to {R2E_HOME}, or {R2E_TESTS} not removed"; exit 3; }}
"""
# R2E-Gym's runtime set-up (its DockerRuntime.setup_env), in every box of its layout before the tree is
# recorded: compiled files go from the repository and the hidden tests (a stale .pyc can stand in for its
# source), and the repository's .venv is linked where that runtime links it, its programs on ~/.local/bin.
# Its `uv pip install chardet` is left out: boxes have no network. Nothing here can fail the start.
R2E_PREPARE = f"""{{ find . {R2E_TESTS} \\( -name '*.pyc' -o -name __pycache__ \\) -prune -exec rm -rf {{}} +
if [ -d .venv ]; then
  {ROOT_WRITABLE}; mkdir -p {R2E_HOME}/.local/bin && ln -sfn "$PWD/.venv" {R2E_HOME}/.venv \\
  && find "$PWD/.venv/bin" -type f -perm -u+x -exec ln -sf {{}} {R2E_HOME}/.local/bin/ \\; \\
  && for p in python python3; do ln -sf "$PWD/.venv/bin/python" {R2E_HOME}/.local/bin/$p; done
  {ROOT_BACK}
fi; }} >/dev/null 2>&1 || :
"""
# True while the scorer starts its box (scoring.py): a box for scoring keeps the hidden tests
_SCORING_BOX: contextvars.ContextVar[bool] = contextvars.ContextVar("cua_repo_scoring_box", default=False)


@contextlib.contextmanager
def scoring_boxes() -> Iterator[None]:
    """Boxes started in here (in this task or a thread it starts) are scoring boxes: the hidden tests of
    R2E-Gym's layout stay in them. Anywhere else a box is an agent's."""
    token = _SCORING_BOX.set(True)
    try:
        yield
    finally:
        _SCORING_BOX.reset(token)


def in_scoring_boxes() -> bool:
    """Whether a box started here is a scoring box (another machine's start is told so: Ray backend)."""
    return _SCORING_BOX.get()


def parse_tree(output: str) -> tuple[str | None, str]:
    """TREE_SCRIPT's answer: (tree id, "") or (None, why not)."""
    lines = output.strip().splitlines()
    first = lines[0].split() if lines else []
    if len(first) == 2 and first[0] == "cua-tree" and TREE_ID.fullmatch(first[1]):
        return first[1], ""
    return None, " ".join(lines[1:] if first == ["cua-no-tree"] else lines)[-300:] or "no answer"


DISK_CHECK_EVERY_S = 0.5  # a box writing at disk speed overshoots its quota by about this many seconds' worth


class DiskQuotaExceeded(BoxBroken):
    """The box wrote more than its `disk_mb` to the host's disk: the policy's failure, and the box goes."""


class AnswerRefused(Exception):
    """The box's answer file is not what the control loop writes: not read."""


def read_answer(folder: Path, name: str, max_bytes: int) -> bytes:
    """At most `max_bytes` + 1 of the answer `name` in `folder`, a folder the box writes: never through a
    link (O_NOFOLLOW), never blocking on a FIFO or device (O_NONBLOCK, then it must be a regular file),
    never a hard link to another file."""
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise AnswerRefused(f"{name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AnswerRefused(f"{name}: not a regular file")
        if st.st_nlink != 1:
            raise AnswerRefused(f"{name}: {st.st_nlink} links to one file")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Mount:
    source: str  # host path
    target: str  # path in the box
    read_only: bool = True


@dataclass(frozen=True)
class RepoSpec:
    """How to start a repository box: the task's image, where its repository is, and limits."""

    image: str
    workdir: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    memory_mb: int = 1024
    cpus: float = 1.0
    pids: int = 256
    disk_mb: int = 2048  # what the box may write to the host's disk: its engine layer and answers folder
    r2e_layout: bool = False  # R2E-Gym's image layout: /r2e_tests and <workdir>/run_tests.sh (module doc)


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output: str  # stdout and stderr together, as a terminal shows them; cut at the cap
    truncated: bool
    timed_out: bool
    seconds: float

    def observation(self) -> str:
        """What the agent reads back: the output, then how the command ended."""
        tail = (
            f"[timed out after {self.seconds:.0f} s and was killed]"
            if self.timed_out
            else f"[exit code {self.exit_code}]"
        )
        return f"{self.output}\n{tail}" if self.output else tail


class RepoBox:
    """A running repository box. One request at a time (control.sh is a single loop)."""

    answer_grace_s = 15.0  # past a command's timeout, until a silent control loop is a broken box

    def __init__(
        self,
        box_id: str,
        backend: DockerBackend,
        spec: RepoSpec,
        folder: Path,
        start_tree: str | None = None,
        for_scoring: bool = False,
    ) -> None:
        self.id, self.backend, self.spec, self.folder = box_id, backend, spec, folder
        self.start_tree = start_tree  # the workdir's tree at the box's start (module doc); None: no git
        self.start_note = ""  # why there is no start_tree
        self.for_scoring = for_scoring  # started by the scorer: R2E-Gym's hidden tests are still there
        self._lock = asyncio.Lock()
        self._disk_checked = 0.0
        self.layer = backend.layer_dir(box_id)  # None: the quota counts the answers folder alone

    # -- the control channel ----------------------------------------------------------------------
    @property
    def requests(self) -> Path:
        return self.folder / "in"

    @property
    def answers(self) -> Path:
        return self.folder / "out"

    async def _request(
        self, script: str, timeout_s: float, max_bytes: int, data: bytes | None = None
    ) -> CommandResult:
        async with self._lock:
            await self._check_disk()  # what a job left running since the last request wrote
            rid = uuid.uuid4().hex
            written = [self.requests / f"{rid}{s}" for s in (".sh", ".limits", ".data")]
            answers = [f"{rid}{s}" for s in (".out", ".rc", ".rc.tmp")]
            try:
                if data is not None:
                    (self.requests / f"{rid}.data").write_bytes(data)
                (self.requests / f"{rid}.sh").write_text(
                    f"cd {shlex.quote(self.spec.workdir)} || exit 97\n{script}\n"
                )
                (self.requests / f"{rid}.limits").write_text(f"{max(1, round(timeout_s))} {max_bytes + 1}\n")
                self._send(rid)
                start = time.monotonic()
                await self._wait(f"{rid}.rc", start + timeout_s + self.answer_grace_s)
                seconds = time.monotonic() - start
                try:
                    exit_code = _exit_status(read_answer(self.answers, f"{rid}.rc", MAX_RC_BYTES))
                    raw = read_answer(self.answers, f"{rid}.out", max_bytes)
                except AnswerRefused as refused:
                    why = f"[the box replaced this command's answer ({refused}); nothing of it was read]"
                    return CommandResult(TAMPERED, why, False, False, seconds)
            finally:
                for p in written:
                    p.unlink(missing_ok=True)
                for name in answers:  # unlink removes a link itself, never what it points to
                    with contextlib.suppress(OSError):
                        os.unlink(self.answers / name)
        truncated = len(raw) > max_bytes
        output = raw[:max_bytes].decode("utf-8", errors="replace")
        if truncated:
            output += TRUNCATION_MARK.format(n=max_bytes)
        # timeout exits 124 (TERM) or 137 (KILL after the grace) when it cut the command
        timed_out = exit_code in (124, 137) and seconds >= timeout_s - 0.5
        return CommandResult(exit_code, output, truncated, timed_out, seconds)

    def _send(self, rid: str) -> None:
        try:  # non-blocking: with no reader (control loop gone) this fails instead of hanging
            fd = os.open(self.requests / "requests", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise SandboxDied(f"{self.id}: control loop not listening ({exc})") from exc
        try:
            os.write(fd, f"{rid}\n".encode())
        finally:
            os.close(fd)

    async def _wait(self, rc: str, deadline: float) -> None:
        while not os.path.lexists(self.answers / rc):
            if time.monotonic() > deadline:
                raise SandboxTimeout(f"{self.id}: no answer from the control loop")
            await self._check_disk()  # also: a killed box never answers
            await asyncio.sleep(0.02)

    async def _check_disk(self) -> None:
        """At most once per DISK_CHECK_EVERY_S: SandboxDied if the box is gone, DiskQuotaExceeded (the box
        removed) if its engine layer and answers folder hold more than `spec.disk_mb`. The engine has no
        size limit for a container's layer on most hosts (podman's needs XFS project quotas), so the host
        measures it, in the layer's own folder; a tmpfs counts against the box's memory instead."""
        if time.monotonic() - self._disk_checked < DISK_CHECK_EVERY_S:
            return
        self._disk_checked = time.monotonic()
        if not await asyncio.to_thread(self.backend.is_running, self.id):
            raise SandboxDied(f"{self.id}: the box is gone")
        folders = [self.answers] if self.layer is None else [self.answers, self.layer]
        total = sum([await asyncio.to_thread(_folder_bytes, f) for f in folders])
        if total > self.spec.disk_mb * 2**20:
            await asyncio.to_thread(self.backend.remove_sync, self.id)
            raise DiskQuotaExceeded(
                f"{self.id} wrote {total / 2**20:.0f} MiB to the host's disk, over its quota of "
                f"{self.spec.disk_mb} MiB (sandbox.resources.disk_mb); the box was removed"
            )

    # -- what agents and tasks use ----------------------------------------------------------------
    async def run(self, command: str, timeout_s: float = 30.0, max_bytes: int = MAX_OUTPUT) -> CommandResult:
        """A shell command in the repository; cut at `timeout_s`, its output at `max_bytes`."""
        return await self._request(command, timeout_s, max_bytes)

    async def read_file(self, path: str, max_bytes: int = MAX_OUTPUT) -> CommandResult:
        return await self._request(f"cat -- {shlex.quote(path)}", 30.0, max_bytes)

    async def write_file(self, path: str, content: str) -> CommandResult:
        data = f'{REQUESTS_IN_BOX}/$(basename "$0" .sh).data'
        q = shlex.quote(path)
        script = f'mkdir -p -- "$(dirname -- {q})" && cat -- "{data}" > {q}'
        return await self._request(script, 30.0, 4096, data=content.encode())

    async def apply_patch(self, diff: str | bytes, exclude: tuple[str, ...] = ()) -> CommandResult:
        """A unified diff, relative to the workdir: `git apply` when the image has git, else `patch -p1`.
        With `exclude` (git's --exclude patterns), git's alone, and the changes to those paths are left out."""
        data = f'{REQUESTS_IN_BOX}/$(basename "$0" .sh).data'
        skip = "".join(f" --exclude={shlex.quote(p)}" for p in exclude)
        script = f'if command -v git >/dev/null; then git apply --whitespace=nowarn{skip} -- "{data}"; ' + (
            f'else patch -p1 --forward --batch < "{data}"; fi'
            if not exclude
            else 'else echo "git is needed to leave paths out of a patch"; exit 1; fi'
        )
        return await self._request(script, 60.0, 8192, data=diff.encode() if isinstance(diff, str) else diff)

    async def close(self) -> None:
        await asyncio.to_thread(self.backend.remove_sync, self.id)


def start_repo_box(backend: DockerBackend, spec: RepoSpec, start_timeout_s: float = 60.0) -> RepoBox:
    """A repository box on a DockerBackend (blocking: call it in a thread). The image's own entrypoint
    is replaced by the control loop; its user, environment and files are the task's. Before the loop
    takes requests, it runs the start script: the starting tree recorded, R2E-Gym's harness hidden from an
    agent's box (module doc)."""
    name = f"cua-sb-{uuid.uuid4().hex[:12]}"
    folder = backend.run_dir / name
    (folder / "in").mkdir(parents=True)  # the host's alone: read-only in the box
    (folder / "out").mkdir()
    for_scoring = in_scoring_boxes()
    start = TREE_SCRIPT.format(tmp=OUTPUT_TMPFS_IN_BOX, seed=HEAD_SEED)
    if spec.r2e_layout:
        start = R2E_PREPARE + start
    if spec.r2e_layout and not for_scoring:
        start += HIDE_SCRIPT
    (folder / "in" / "start.sh").write_text(f"cd {shlex.quote(spec.workdir)} || exit 97\n{start}")
    (folder / "in" / "start.limits").write_text(f"{START_TIMEOUT_S} {MAX_OUTPUT}\n")
    (folder / "out").chmod(0o777)  # the image's user, whoever it is, writes its answers here
    os.mkfifo(folder / "in" / "requests")
    os.chmod(folder / "in" / "requests", 0o666)  # the loop opens it read-write, as whichever user
    volumes = {
        str(folder / "in"): {"bind": REQUESTS_IN_BOX, "mode": "ro"},
        str(folder / "out"): {"bind": ANSWERS_IN_BOX, "mode": "rw"},
        str(CONTROL_SCRIPT): {"bind": CONTROL_SCRIPT_IN_BOX, "mode": "ro"},
        **{m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts},
    }
    try:
        backend.run_as_nobody_on_the_host(
            spec.image,
            name=name,
            **backend.isolation(spec.memory_mb, spec.cpus, spec.pids),
            entrypoint=["/bin/sh", CONTROL_SCRIPT_IN_BOX],
            command=[],
            working_dir=spec.workdir,
            environment=dict(spec.env),
            volumes=volumes,
            tmpfs={OUTPUT_TMPFS_IN_BOX: f"size={OUTPUT_TMPFS_SIZE},mode=1777"},
        )
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise SandboxStartError(f"{name}: could not start image {spec.image!r}: {exc}") from exc
    deadline = time.monotonic() + start_timeout_s + START_TIMEOUT_S
    for ask_engine in start_polls():
        if os.path.lexists(folder / "out" / "ready"):
            break
        if time.monotonic() > deadline or (ask_engine and not backend.is_running(name)):
            logs = backend.logs(name)
            backend.remove_sync(name)
            raise SandboxStartError(f"{name}: the control loop did not start in {spec.image!r}:\n{logs}")
    try:  # written before the box took any request: nothing but the image's files ran yet
        rc = _exit_status(read_answer(folder / "out", "start.rc", MAX_RC_BYTES))
        said = read_answer(folder / "out", "start.out", MAX_OUTPUT).decode(errors="replace")
    except AnswerRefused as exc:
        backend.remove_sync(name)
        raise SandboxStartError(f"{name}: no answer from the start script in {spec.image!r}: {exc}") from None
    finally:
        for p in (folder / "in" / "start.sh", folder / "in" / "start.limits"):
            p.unlink(missing_ok=True)
        for answer in ("start.out", "start.rc"):
            with contextlib.suppress(OSError):
                os.unlink(folder / "out" / answer)
    if rc == 3:  # the agent would read the hidden tests: the task's image is not as its row says
        backend.remove_sync(name)
        raise SandboxStartError(
            f"{name}: could not hide R2E-Gym's tests and harness in {spec.image!r}: {said[-300:]}"
        )
    box = RepoBox(name, backend, spec, folder, for_scoring=for_scoring)
    box.start_tree, box.start_note = parse_tree(said) if rc == 0 else (None, f"exit {rc}: {said[-300:]}")
    return box


@contextlib.asynccontextmanager
async def repo_box(backend: DockerBackend, spec: RepoSpec) -> AsyncIterator[RepoBox]:
    """A started repository box, removed after whatever happens (a cancellation included)."""
    box = await asyncio.to_thread(start_repo_box, backend, spec)
    try:
        yield box
    finally:
        await finish(box.close())


def _folder_bytes(folder: Path) -> int:
    """Disk bytes of the files under `folder` (a folder the box writes: links are not followed; a sparse
    file counts what it holds)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _exit_status(raw: bytes) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise AnswerRefused(f"exit status {raw[:MAX_RC_BYTES]!r} is not a number") from None
