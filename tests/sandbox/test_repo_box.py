"""Repository boxes (sandbox/repo): real podman containers of the locally built sample image, driven
through the control loop; the task rows' validation; the rule-agent smoke."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox.errors import SandboxDied
from sandbox.repo import rule_agent, scoring
from sandbox.repo.box import RepoSpec, repo_box, start_repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTests, load_repo_tasks
from sandbox.tasks import TaskSpecError

TASKS = {t.task_id: t for t in load_repo_tasks(SAMPLE_TASKS)}


@pytest.fixture
def fresh(docker_backend):
    """fresh(task_id): what scores an episode of that task, a fresh box of its image."""
    return lambda task_id: lambda: repo_box(docker_backend, TASKS[task_id].spec)


@pytest.fixture
async def box_of(docker_backend):
    """Starts boxes of sample tasks; removes them at the end and checks that none is left."""
    boxes = []

    async def start(task_id: str):
        box = await asyncio.to_thread(start_repo_box, docker_backend, TASKS[task_id].spec)
        boxes.append(box)
        return box

    yield start
    for box in boxes:
        await box.close()
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == []


def test_the_rule_agent_solves_every_sample_task_and_writes_a_report(tmp_path, sandbox_setup, docker_backend):
    assert rule_agent.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["tasks"] == len(TASKS) >= 3 and report["solved"] == report["tasks"]
    lines = [json.loads(x) for x in (tmp_path / "episodes.log").read_text().splitlines()]
    assert sorted(x["task_id"] for x in lines) == sorted(TASKS)
    assert all(x["reward"] == 1.0 and x["steps"][-2]["tool"] == "apply_patch" for x in lines)
    assert not [b for b in docker_backend.list_boxes() if b["labels"]["cua.run_id"].startswith("repo-smoke-")]


@pytest.mark.parametrize("task_id", sorted(TASKS))
async def test_the_planted_bug_fails_the_tests_until_fixed(task_id, box_of, fresh):
    """Each sample task's tests fail on the repository as shipped: the reward comes from the fix."""
    verdict = await score(await box_of(task_id), TASKS[task_id].tests, fresh(task_id))
    assert verdict.reward == 0.0 and verdict.result.exit_code != 0, verdict.result.output
    assert "tests not as expected" in verdict.reason and "expected PASSED, got FAILED" in verdict.reason


async def test_a_wrong_patch_scores_0_and_overwriting_the_tests_does_not_help(box_of, fresh):
    box = await box_of("repo/calc-add")
    wrong = TASKS["repo/calc-add"].solution.read_text().replace("a + b", "b - a")
    assert (await box.apply_patch(wrong)).exit_code == 0
    assert "b - a" in (await box.read_file("calc/ops.py")).output
    await box.write_file("tests/test_ops.py", "")  # an empty test module passes: the scorer copies its own
    assert (await box.run("python3 -m unittest -q tests.test_ops")).exit_code == 0
    verdict = await score(box, TASKS["repo/calc-add"].tests, fresh("repo/calc-add"))
    assert verdict.reward == 0.0 and "FAILED" in verdict.result.output
    assert "tests.test_ops.TestOps.test_add: expected PASSED, got FAILED" in verdict.reason


async def test_an_r2e_row_reads_pytests_summary_from_the_tail_of_an_output_over_the_cap(
    box_of, fresh, monkeypatch
):
    """R2E-Gym's rule in a real box: the whole output goes to the box's output tmpfs, its tail comes back,
    and the summary at the end of a long log decides."""
    monkeypatch.setattr(scoring, "MAX_REPORT_BYTES", 200_000)
    summary = "short test summary info\nPASSED r2e_tests/test_1.py::TestK::test_x[a b]\n"
    command = f"head -c 1000000 /dev/zero | tr '\\0' x; echo; printf '%s' {shlex.quote(summary)}; exit 1"
    box = await box_of("repo/calc-add")
    right = RepoTests(command=command, expected={"TestK.test_x[a b]": "PASSED"}, report="r2e")
    verdict = await score(box, right, fresh("repo/calc-add"))
    assert verdict.reward == 1.0, verdict.reason
    wrong = replace(right, expected={"TestK.test_x[a b]": "FAILED"})
    verdict = await score(box, wrong, fresh("repo/calc-add"))
    assert verdict.reward == 0.0 and "cut at its size cap; its tail was read" in verdict.reason, (
        verdict.reason
    )


async def test_a_hanging_command_is_cut_at_its_timeout_and_the_box_keeps_working(box_of):
    box = await box_of("repo/calc-add")
    t0 = time.monotonic()
    hung = await box.run("echo started; sleep 600", timeout_s=2)
    assert hung.timed_out and hung.output == "started\n" and time.monotonic() - t0 < 6
    assert "timed out after 2 s" in hung.observation()
    background = await box.run("sleep 600 & echo left running", timeout_s=5)  # no pipe holds the loop
    assert background.exit_code == 0 and background.seconds < 2
    flood = await box.run("yes", timeout_s=10, max_bytes=1000)
    assert flood.truncated and flood.seconds < 5 and flood.output.endswith("truncated at 1000 bytes ...]")
    ok = await box.run("python3 -c 'print(6 * 7)'")
    assert (ok.exit_code, ok.output, ok.timed_out) == (0, "42\n", False)


async def test_a_box_killed_by_the_engine_is_an_infrastructure_failure_not_a_reward(
    box_of, docker_backend, fresh
):
    """Killed through the engine (an operator, a reaper): not the policy's doing, so no reward at all."""
    box = await box_of("repo/calc-add")
    running = asyncio.create_task(box.run("sleep 60", timeout_s=50))
    await asyncio.sleep(0.5)
    await asyncio.to_thread(docker_backend.docker.containers.get(box.id).kill)
    with pytest.raises(SandboxDied):
        await asyncio.wait_for(running, 10)
    with pytest.raises(SandboxDied):
        await score(box, TASKS["repo/calc-add"].tests, fresh("repo/calc-add"))


async def test_an_engine_kill_is_told_while_other_boxes_come_and_go(box_of, docker_backend):
    """The engine's event log is read while other boxes' events are written: a read could come back short
    and miss the kill (7 of 150 reads under this churn, podman 4.3), and the operator's kill was scored as
    the policy breaking its box (CI: the test above, 'DID NOT RAISE')."""
    box = await box_of("repo/calc-add")
    await asyncio.to_thread(docker_backend.docker.containers.get(box.id).kill)
    stop = asyncio.Event()

    async def churn() -> None:
        while not stop.is_set():
            async with repo_box(docker_backend, TASKS["repo/calc-add"].spec):
                pass

    churning = asyncio.create_task(churn())
    try:
        told = []
        for _ in range(80):
            told.append((await asyncio.to_thread(docker_backend.state, box.id)).killed_through_engine)
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await churning
    assert all(told), f"the kill was missed in {told.count(False)} of {len(told)} reads"


async def test_repo_boxes_are_isolated_and_labelled_like_desktop_boxes(box_of, docker_backend):
    box = await box_of("repo/calc-add")
    attrs = docker_backend.docker.containers.get(box.id).attrs
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["PidsLimit"] == TASKS["repo/calc-add"].spec.pids
    assert host["Memory"] == TASKS["repo/calc-add"].spec.memory_mb * 2**20
    assert host["NanoCpus"] == TASKS["repo/calc-add"].spec.cpus * 1e9
    assert "no-new-privileges" in " ".join(host["SecurityOpt"])
    labels = attrs["Config"]["Labels"]
    assert labels["cua.sandbox"] == "1" and labels["cua.owner_pid"] == str(os.getpid())
    egress = await box.run(
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)'", timeout_s=10
    )
    assert egress.exit_code != 0 and "Network is unreachable" in egress.output
    caps = await box.run("grep CapEff /proc/self/status")
    assert caps.output.split()[-1] == "0000000000000000"
    # its engine log is capped: 30 MB written to the init's stdout (the log's pipe) keep at most ~10 MB. In
    # its own user namespace (podman) the box cannot even open that pipe: it is the host root's
    flood = await box.run(
        "head -c 30000000 /dev/zero | tr '\\0' x | fold -w 100 > /proc/1/fd/1", timeout_s=60
    )
    assert flood.exit_code == 0 or "Permission denied" in flood.output, flood
    log = await asyncio.to_thread(lambda: docker_backend.docker.api.inspect_container(box.id)["LogPath"])
    assert os.path.getsize(log) < 12_000_000, os.path.getsize(log)


async def test_a_box_whose_image_is_missing_fails_to_start_naming_it(docker_backend):
    from sandbox.errors import SandboxStartError

    with pytest.raises(SandboxStartError, match="no-such-image"):
        await asyncio.to_thread(start_repo_box, docker_backend, RepoSpec(image="localhost/no-such-image:1"))
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == []


async def test_a_box_created_but_never_started_is_removed(docker_backend):
    """A memory limit the engine cannot set: it creates the box, then fails to start it. Before, the
    created box stayed in the engine's list for good (a hung start left one the same way)."""
    from sandbox.errors import SandboxStartError

    spec = replace(TASKS["repo/calc-add"].spec, memory_mb=1)
    with pytest.raises(SandboxStartError, match="memory limit"):
        await asyncio.to_thread(start_repo_box, docker_backend, spec)
    assert docker_backend.list_boxes(run_id=docker_backend.run_id) == []


# -- task rows -----------------------------------------------------------------------------------------
def _row(**over) -> dict:
    row = {
        "task_id": "repo/x",
        "split": "train",
        "max_steps": 4,
        "issue": "fix it",
        "sandbox": {"docker_image": "img:1", "workdir": "/w"},
        "tests": {"command": "true"},
    }
    row.update(over)
    return row


def _load(tmp_path: Path, *rows: dict) -> list:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_repo_tasks(path)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"task_id": "miniwob/x"}, "tasks.jsonl:2: field 'task_id': must look like 'repo/<name>'"),
        ({"tests": {}}, "tasks.jsonl:2: field 'tests.command': is required"),
        (
            {"tests": {"command": "t", "files": {"a.py": "missing.py"}}},
            "field 'tests.files.a.py': no such file",
        ),
        ({"sandbox": {"workdir": "/w"}}, "field 'sandbox.docker_image': is required"),
        (
            {"sandbox": {"docker_image": "i", "workdir": "rel"}},
            "field 'sandbox.workdir': must be an absolute",
        ),
        ({"sandbox": {"docker_image": "i", "backend": "gbox"}}, "field 'sandbox.backend': repository boxes"),
        (
            {"sandbox": {"docker_image": "i", "mounts": [{"source": "/nope", "target": "/d"}]}},
            "mounts[0].source",
        ),
        ({"sandbox": {"docker_image": "i", "mounts": [{"source": 3, "target": "/d"}]}}, "mounts[0]': paths"),
        ({"sandbox": {"docker_image": "i", "gpu": 1}}, "field 'sandbox.gpu': unknown field"),
        ({"max_steps": 0}, "field 'max_steps': must be a positive integer"),
        ({"solution": "nope.diff"}, "field 'solution': no such file"),
        (
            {"sandbox": {"docker_image": "i", "resources": {"disk_mb": 0}}},
            "field 'sandbox.resources.disk_mb': must be a positive integer",
        ),
    ],
)
def test_bad_task_rows_are_named_by_file_line_and_field(tmp_path, over, message):
    with pytest.raises(TaskSpecError, match=message.replace("[", r"\[").replace("(", r"\(")):
        _load(tmp_path, _row(task_id="repo/ok"), _row(**over))


def test_rows_reach_only_files_beside_them_and_mount_no_socket_device_or_root(tmp_path, monkeypatch):
    """A third-party task file must not make a box of the host: copied files stay under the task file's
    folder, links followed; mounts come from that folder or CUA_TASK_MOUNT_ROOTS, never `/` or a socket."""
    tasks = tmp_path / "tasks"
    (tasks / "data").mkdir(parents=True)
    (tmp_path / "secret.py").write_text("host file")
    (tasks / "leak.py").symlink_to(tmp_path / "secret.py")
    os.mkfifo(tasks / "data" / "pipe")

    def refused(message: str, **over) -> None:
        with pytest.raises(TaskSpecError, match=message):
            _load(tasks, _row(**over))

    for path in ("../secret.py", "leak.py"):
        refused(
            "field 'tests.files.t.py': .* is outside the task file's folder",
            tests={"command": "t", "files": {"t.py": path}},
        )
        refused("field 'solution': .* is outside", solution=path)
        refused("field 'r2e_ds_json': .* is outside", r2e_ds_json=path)
    mount = lambda source: {"docker_image": "i", "mounts": [{"source": source, "target": "/d"}]}  # noqa: E731
    refused(r"mounts\[0\].source': / is outside the allowed roots", sandbox=mount("/"))
    refused(r"mounts\[0\].source': /etc is outside the allowed roots", sandbox=mount("/etc"))
    refused(r"mounts\[0\].source': .*pipe is a socket, device or FIFO", sandbox=mount("data/pipe"))
    refused(r"mounts\[0\].source': /dev/null is a socket, device", sandbox=mount("/dev/null"))
    with socket.socket(socket.AF_UNIX) as engine:  # what an engine's API socket is
        engine.bind(str(tasks / "data" / "engine.sock"))
        refused(r"mounts\[0\].source': .*engine.sock is a socket", sandbox=mount("data/engine.sock"))
    monkeypatch.setenv("CUA_TASK_MOUNT_ROOTS", "/:/etc")  # the operator's own data roots; "/" is never one
    refused(r"mounts\[0\].source': / is outside the allowed roots", sandbox=mount("/"))
    assert _load(tasks, _row(sandbox=mount("/etc")))[0].spec.mounts[0].source == "/etc"
    (task,) = _load(tasks, _row(sandbox=mount("data")))
    assert task.spec.mounts[0].source == str((tasks / "data").resolve())


def test_an_r2e_gym_entry_gives_the_image_issue_and_testbed(tmp_path):
    entry = {
        "repo_name": "orange3",
        "commit_hash": "abc123",
        "docker_image": "namanjain12/orange3_final:abc123",
        "problem_statement": "Table.from_numpy drops the domain",
    }
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    row = _row(r2e_ds_json="entry.json", tests={"command": "bash run_tests.sh"})
    del row["issue"]
    row["sandbox"] = {}
    (task,) = _load(tmp_path, row)
    assert (task.spec.image, task.issue, task.spec.workdir) == (
        entry["docker_image"],
        entry["problem_statement"],
        "/testbed",
    )
    assert task.source == {k: entry[k] for k in ("repo_name", "commit_hash", "docker_image")}
    with pytest.raises(TaskSpecError, match=r"field 'r2e_ds_json': .* has no 'docker_image'"):
        (tmp_path / "entry.json").write_text("{}")
        _load(tmp_path, row)


OWNER = """
import sys, time
from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import start_repo_box
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTests, load_repo_tasks
box = start_repo_box(DockerBackend(run_id=sys.argv[1]), load_repo_tasks(SAMPLE_TASKS)[0].spec)
print("READY", box.id, flush=True)
time.sleep(600)
"""


def test_the_box_of_a_killed_owner_is_reaped_like_a_desktop_box(docker_backend):
    run_id = f"pytest-repo-orphan-{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, run_id],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    box_id = line.split()[1]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [b["id"] for b in docker_backend.list_boxes(run_id=run_id)] == [box_id]  # an orphan now
    assert box_id in docker_backend.reap()
    assert docker_backend.list_boxes(run_id=run_id) == []
    assert not (docker_backend.run_dir / box_id).exists()  # its control folder too


async def test_a_row_can_pin_its_image_by_digest(docker_backend, tmp_path):
    """A tag names whatever the engine has under it at the time; `image@sha256:...` names one image."""
    spec = TASKS["repo/calc-add"].spec
    (pinned,) = docker_backend.docker.images.get(spec.image).attrs["RepoDigests"][:1]
    row = _row(task_id="repo/pinned", sandbox={"docker_image": pinned, "workdir": spec.workdir})
    (task,) = _load(tmp_path, row)
    box = await asyncio.to_thread(start_repo_box, docker_backend, task.spec)
    try:
        ok = await box.run("git rev-parse --is-inside-work-tree")
        assert (ok.exit_code, ok.output) == (0, "true\n"), ok
    finally:
        await box.close()
