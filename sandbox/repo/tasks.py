"""Repository task rows: one JSON object per line, in the shape R2E-Gym users have.

    {"task_id": "repo/calc-add", "split": "train", "max_steps": 8,
     "issue": "calc.ops.add(2, 3) returns -1 instead of 5. ...",
     "sandbox": {"backend": "docker", "docker_image": "cua-repo-samples:latest", "workdir": "/repos/calc",
                 "mounts": [{"source": "/data", "target": "/data", "read_only": true}], "env": {"K": "V"},
                 "resources": {"memory_mb": 1024, "cpus": 1.0, "pids": 256, "disk_mb": 2048}},
     "tests": {"command": "python3 -m unittest -q tests.test_ops", "timeout_s": 60,
               "files": {"tests/test_ops.py": "checks/calc-add/test_ops.py"}},
     "solution": "solutions/calc-add.diff"}

`tests` decide the reward, in a fresh box of the image with the agent's diff applied
(sandbox/repo/scoring.py): its `files` (host paths relative to the task file; box paths relative to the
workdir) are copied in over whatever the diff wrote there, then `command` runs in the workdir. Without
`expected`, exit status 0 is reward 1. With `expected` (test id -> PASSED, FAILED, ERROR, SKIPPED, XFAIL or
XPASS), `report` picks the rule:

- "unittest" (`python -m unittest -v`, the default) and "pytest" (`pytest -rA`, full node ids): every named
  test has its expected outcome in the runner's report (sandbox/repo/reports.py), SWE-bench's rule: the
  tests the fix must turn to passing, those that must keep passing, those that fail before and after it;
  tests the map does not name do not count.
- "r2e", the default of rows that name `r2e_ds_json`: R2E-Gym's own parse and rule (sandbox/repo/r2e.py,
  checked against R2E-Gym's code by tests/unit/test_r2e_differential.py): keys as R2E-Gym's
  `expected_output_json` writes them (`Class.test_name`, `test_fn[param]`), read from pytest's short test
  summary (the tail of the output), and the reward is 1 only when the report names exactly the expected
  tests with their outcomes; the deliberate differences are in that module's docstring.

The workdir must be a git repository (R2E-Gym's and SWE-bench's images are); the agent's work is its
diff against the tree the image starts with there, which may differ from its commit (scoring.py).
`solution` (optional) is a reference patch for the scripted rule agent.

`r2e_ds_json` (a path, relative to the task file, to one R2E-Gym dataset entry) fills `docker_image`,
`issue` (its `problem_statement`, cut to what lies between `[ISSUE]` and `[/ISSUE]` when it has them, as
R2E-Gym's `get_task_instruction` does) and `tests.expected` (its `expected_output_json`, read by the "r2e"
rule; an entry without one, or with {}, is scored by exit status), and defaults `workdir` to /testbed and
`tests.command` to R2E_TEST_COMMAND, R2E-Gym's own: the image's run_tests.sh, which the scoring box has
moved to /root (with the hidden tests, /r2e_tests, linked back as <workdir>/r2e_tests); such a row may
leave `tests` out. Its box is of R2E-Gym's layout (`RepoSpec.r2e_layout`): the agent's never holds the
hidden tests, and the agent's run_tests.sh or r2e_tests never reach scoring (box.py, scoring.py). The row
may name its own `issue`, `command`, `expected` or `report`. A SWE-bench-style entry (an image named
*swebench*, or FAIL_TO_PASS/PASS_TO_PASS without `expected_output_json`: R2E-Gym grades those with
SWE-bench's harness) is refused. `python -m sandbox.repo.r2e_import` writes entry files and rows from
R2E-Gym's dataset export. Errors name the file, line and field.

Task files are the operator's input, trusted but checked: the files a row copies into a box (`tests.files`,
`solution`, `r2e_ds_json`) must sit under the task file's folder (links followed), and a mount's source
under that folder or a root listed in CUA_TASK_MOUNT_ROOTS, never `/`, a socket, a device or a FIFO.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.repo import r2e
from sandbox.repo.box import Mount, RepoSpec
from sandbox.repo.reports import OUTCOMES, RUNNERS
from sandbox.tasks import SPLITS, TaskSpecError, jsonl_rows

TOP_FIELDS = {"task_id", "split", "max_steps", "issue", "sandbox", "tests", "solution", "r2e_ds_json", "tags"}
SANDBOX_FIELDS = {"backend", "docker_image", "workdir", "mounts", "env", "resources"}
RESOURCE_FIELDS = {"memory_mb", "cpus", "pids", "disk_mb"}
TEST_FIELDS = {"command", "timeout_s", "files", "expected", "report"}
REPORTS = (*RUNNERS, "r2e")  # "r2e": R2E-Gym's own parse and reward rule (sandbox/repo/r2e.py)
R2E_TEST_COMMAND = "bash /root/run_tests.sh"  # R2E-Gym's DockerRuntime.run_tests, after its setup_env's move
_TASK_ID = re.compile(r"^repo/[a-z0-9][a-z0-9_.-]*$")
MOUNT_ROOTS_ENV = "CUA_TASK_MOUNT_ROOTS"  # host folders rows may mount from, beside the task file's own


def mount_roots() -> list[Path]:
    roots = [Path(p).resolve() for p in os.environ.get(MOUNT_ROOTS_ENV, "").split(":") if p]
    return [r for r in roots if r != Path("/")]  # "/" would allow everything


@dataclass(frozen=True)
class RepoTests:
    command: str
    timeout_s: float = 120.0
    files: tuple[tuple[str, Path], ...] = ()  # (path in the box, relative to the workdir; host file)
    expected: Mapping[str, str] = field(default_factory=dict, hash=False)  # test id -> outcome; {}: exit 0
    report: str = "unittest"  # the runner whose report `expected` is read from


@dataclass(frozen=True)
class RepoTask:
    task_id: str
    split: str
    max_steps: int
    issue: str
    spec: RepoSpec
    tests: RepoTests
    backend: str = "docker"
    solution: Path | None = None
    source: dict[str, Any] = field(default_factory=dict, hash=False)  # e.g. the R2E-Gym entry's repo, commit
    tags: tuple[str, ...] = ()


class _Row:
    def __init__(self, obj: dict[str, Any], where: str, base: Path) -> None:
        self.obj, self.where, self.base = obj, where, base

    def fail(self, name: str, msg: str) -> TaskSpecError:
        return TaskSpecError(f"{self.where}: field '{name}': {msg}")

    def check(self, cond: bool, name: str, msg: str) -> None:
        if not cond:
            raise self.fail(name, msg)

    def host_file(self, value: Any, name: str) -> Path:
        self.check(isinstance(value, str) and value != "", name, "must be a path (relative to the task file)")
        path = (self.base / value).resolve()
        self.check(path.is_file(), name, f"no such file: {path}")
        self.check(
            path.is_relative_to(self.base.resolve()),
            name,
            f"{path} is outside the task file's folder {self.base.resolve()} (links followed): a row may "
            "copy into a box only files that sit beside it",
        )
        return path

    def mount_source(self, value: str, name: str) -> Path:
        """A host path a box may see: under the task file's folder or a root in CUA_TASK_MOUNT_ROOTS, and
        never a socket or a device (an engine's socket in a box is root on the host)."""
        path = (self.base / value).resolve()
        self.check(path.exists(), name, f"no such path: {path}")
        kind = path.stat().st_mode
        self.check(
            not (stat.S_ISSOCK(kind) or stat.S_ISCHR(kind) or stat.S_ISBLK(kind) or stat.S_ISFIFO(kind)),
            name,
            f"{path} is a socket, device or FIFO: never mounted into a box",
        )
        roots = [self.base.resolve(), *mount_roots()]
        self.check(
            path != Path("/") and any(path.is_relative_to(r) for r in roots),
            name,
            f"{path} is outside the allowed roots {[str(r) for r in roots]} (the task file's folder and "
            f"{MOUNT_ROOTS_ENV}, colon-separated)",
        )
        return path


def _known(row: _Row, d: dict[str, Any], allowed: set[str], prefix: str) -> None:
    unknown = sorted(set(d) - allowed)
    row.check(
        not unknown, prefix + (unknown[0] if unknown else ""), f"unknown field (known: {sorted(allowed)})"
    )


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _pos_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def swebench_style(entry: dict[str, Any]) -> str:
    """Why an R2E-Gym entry is graded by SWE-bench's rule in R2E-Gym (its runtime switches on an image
    named *swebench*; such entries carry FAIL_TO_PASS/PASS_TO_PASS), or "" for R2E-Gym's own rule."""
    if "swebench" in str(entry.get("docker_image", "")):
        return f"its image {entry['docker_image']} is a SWE-bench image"
    if "expected_output_json" not in entry and {"FAIL_TO_PASS", "PASS_TO_PASS"} & set(entry):
        return "FAIL_TO_PASS/PASS_TO_PASS and no expected_output_json"
    return ""


def _r2e_expected(row: _Row, entry: dict[str, Any], path: Path) -> dict[str, str]:
    """An R2E-Gym entry's `expected_output_json` (a JSON string, or an object), as written: its keys are
    decoloured and cut at " - " with the report's rule (sandbox/repo/r2e.py)."""
    raw = entry.get("expected_output_json")
    if raw is None:
        return {}
    try:
        found = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise row.fail("r2e_ds_json", f"{path}: expected_output_json is not JSON: {exc}") from None
    row.check(isinstance(found, dict), "r2e_ds_json", f"{path}: expected_output_json must be an object")
    return {str(k): v for k, v in found.items()}


def parse_repo_task(obj: Any, where: str, base: Path) -> RepoTask:
    if not isinstance(obj, dict):
        raise TaskSpecError(f"{where}: a task must be a JSON object, got {type(obj).__name__}")
    row = _Row(obj, where, base)
    _known(row, obj, TOP_FIELDS, "")
    for req in ("task_id", "split", "max_steps", "sandbox", *(() if "r2e_ds_json" in obj else ("tests",))):
        row.check(req in obj, req, "is required")
    tid = obj["task_id"]
    row.check(
        isinstance(tid, str) and bool(_TASK_ID.match(tid)),
        "task_id",
        f"must look like 'repo/<name>', got {tid!r}",
    )
    row.check(obj["split"] in SPLITS, "split", f"must be one of {SPLITS}, got {obj['split']!r}")
    row.check(
        _pos_int(obj["max_steps"]), "max_steps", f"must be a positive integer, got {obj['max_steps']!r}"
    )

    sb = obj["sandbox"]
    row.check(isinstance(sb, dict), "sandbox", "must be an object")
    _known(row, sb, SANDBOX_FIELDS, "sandbox.")
    backend = sb.get("backend", "docker")
    row.check(
        backend == "docker", "sandbox.backend", f"repository boxes run on 'docker' only, got {backend!r}"
    )

    source: dict[str, Any] = {}
    r2e_expected: dict[str, str] = {}
    image, issue, workdir = sb.get("docker_image"), obj.get("issue"), sb.get("workdir")
    if "r2e_ds_json" in obj:
        path = row.host_file(obj["r2e_ds_json"], "r2e_ds_json")
        try:
            entry = json.loads(path.read_text())
        except ValueError as exc:
            raise row.fail("r2e_ds_json", f"{path} is not JSON: {exc}") from None
        row.check(
            isinstance(entry, dict) and isinstance(entry.get("docker_image"), str),
            "r2e_ds_json",
            f"{path} has no 'docker_image'",
        )
        swebench = swebench_style(entry)
        row.check(
            not swebench,
            "r2e_ds_json",
            f"{path} is a SWE-bench-style entry ({swebench}): R2E-Gym grades those with SWE-bench's"
            " harness, which is not reproduced here; give the row its own tests.command and tests.expected"
            " (node ids, report 'pytest') instead of r2e_ds_json",
        )
        image = image or entry["docker_image"]
        statement = entry.get("problem_statement")
        issue = issue or (r2e.issue_text(statement) if isinstance(statement, str) else statement)
        workdir = workdir or "/testbed"
        source = {k: entry[k] for k in ("repo_name", "commit_hash", "docker_image") if k in entry}
        r2e_expected = _r2e_expected(row, entry, path)
    row.check(isinstance(image, str) and image != "", "sandbox.docker_image", "is required (or r2e_ds_json)")
    row.check(
        isinstance(issue, str) and issue.strip() != "", "issue", "must be a non-empty string (or r2e_ds_json)"
    )
    workdir = workdir or "/"
    row.check(
        isinstance(workdir, str) and workdir.startswith("/"), "sandbox.workdir", "must be an absolute path"
    )
    env = sb.get("env", {})
    row.check(
        isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
        "sandbox.env",
        "must map names to strings",
    )
    mounts = []
    raw_mounts = sb.get("mounts", [])
    row.check(isinstance(raw_mounts, list), "sandbox.mounts", "must be a list")
    for i, m in enumerate(raw_mounts):
        name = f"sandbox.mounts[{i}]"
        row.check(isinstance(m, dict) and {"source", "target"} <= set(m), name, "needs 'source' and 'target'")
        _known(row, m, {"source", "target", "read_only"}, name + ".")
        row.check(
            isinstance(m["source"], str) and isinstance(m["target"], str), name, "paths must be strings"
        )
        src = row.mount_source(m["source"], name + ".source")
        row.check(m["target"].startswith("/"), name + ".target", "must be an absolute path")
        row.check(isinstance(m.get("read_only", True), bool), name + ".read_only", "must be true or false")
        mounts.append(Mount(str(src), m["target"], m.get("read_only", True)))
    res = sb.get("resources", {})
    row.check(isinstance(res, dict), "sandbox.resources", "must be an object")
    _known(row, res, RESOURCE_FIELDS, "sandbox.resources.")
    for key in ("memory_mb", "pids", "disk_mb"):
        row.check(_pos_int(res.get(key, 1)), f"sandbox.resources.{key}", "must be a positive integer")
    row.check(_pos_num(res.get("cpus", 1)), "sandbox.resources.cpus", "must be a positive number")
    spec = RepoSpec(
        image=image,
        workdir=workdir,
        env=dict(env),
        mounts=tuple(mounts),
        r2e_layout="r2e_ds_json" in obj,
        **{k: res[k] for k in RESOURCE_FIELDS if k in res},
    )

    t = obj.get("tests", {})
    row.check(isinstance(t, dict), "tests", "must be an object")
    _known(row, t, TEST_FIELDS, "tests.")
    if "r2e_ds_json" in obj:
        t = {"command": R2E_TEST_COMMAND, **t}
    row.check(
        isinstance(t.get("command"), str) and t["command"].strip() != "", "tests.command", "is required"
    )
    row.check(_pos_num(t.get("timeout_s", 1)), "tests.timeout_s", "must be a positive number of seconds")
    files = t.get("files", {})
    row.check(isinstance(files, dict), "tests.files", "must map paths in the box to host files")
    expected = t.get("expected", r2e_expected)
    report = t.get("report", "r2e" if "r2e_ds_json" in obj else "unittest")
    row.check(report in REPORTS, "tests.report", f"must be one of {REPORTS}, got {report!r}")
    row.check(
        isinstance(expected, dict)
        and all(isinstance(k, str) and (k or report == "r2e") and v in OUTCOMES for k, v in expected.items()),
        "tests.expected",
        f"must map test ids to one of {OUTCOMES}",
    )
    if report == "r2e":  # "": a line without "::", e.g. a module that fails to import
        expected = r2e.expected_map(expected)
    row.check(
        "report" not in t or bool(expected),
        "tests.report",
        "is read only with tests.expected, which is empty",
    )
    tests = RepoTests(
        command=t["command"],
        timeout_s=float(t.get("timeout_s", 120.0)),
        files=tuple((dst, row.host_file(src, f"tests.files.{dst}")) for dst, src in files.items()),
        expected=dict(expected),
        report=report,
    )
    solution = row.host_file(obj["solution"], "solution") if "solution" in obj else None
    tags = obj.get("tags", [])
    row.check(
        isinstance(tags, list) and all(isinstance(x, str) for x in tags), "tags", "must be a list of strings"
    )
    return RepoTask(
        tid, obj["split"], obj["max_steps"], issue, spec, tests, backend, solution, source, tuple(tags)
    )


def load_repo_tasks(path: str | Path, split: str | None = None) -> list[RepoTask]:
    path = Path(path)
    tasks: list[RepoTask] = []
    seen: dict[str, int] = {}
    for lineno, where, obj in jsonl_rows(path):
        task = parse_repo_task(obj, where, path.parent)
        if task.task_id in seen:
            raise TaskSpecError(
                f"{where}: field 'task_id': {task.task_id} already on line {seen[task.task_id]}"
            )
        seen[task.task_id] = lineno
        tasks.append(task)
    return [t for t in tasks if split is None or t.split == split]


SAMPLE_TASKS = Path(__file__).with_name("samples") / "tasks.jsonl"


def is_repo_task_file(path: str | Path) -> bool:
    """Whether a task file holds repository tasks (its first row's task_id is repo/...)."""
    for _, _, obj in jsonl_rows(Path(path)):
        return isinstance(obj, dict) and str(obj.get("task_id", "")).startswith("repo/")
    return False


class RepoTaskFiles:
    """The repository tasks rows point to (`tasks_file`, `task_id`), each file read once."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, RepoTask]] = {}

    def task(self, row: Mapping[str, Any]) -> RepoTask:
        path = str(row["tasks_file"])
        if path not in self._files:
            self._files[path] = {t.task_id: t for t in load_repo_tasks(path)}
        return self._files[path][row["task_id"]]
