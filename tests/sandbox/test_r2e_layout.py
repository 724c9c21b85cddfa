"""Repository rows in R2E-Gym's real image layout (issue 40): images that are not clean at HEAD. Their
Dockerfiles clone the repository into /testbed at its old commit, then add an untracked run_tests.sh,
change tracked files and put the hidden tests in /r2e_tests. The agent's work is its diff against the
image's starting tree (recorded at box start, recomputed and checked in the scoring box), the hidden tests
never reach the agent's box, and neither its run_tests.sh nor an r2e_tests of its own reaches scoring.

The image (tests/fixtures/r2e/layout) is built here with podman, without network, FROM the sample
repositories' image (python3 and git), with pytest copied from this interpreter's own packages."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.errors import SandboxError
from sandbox.repo import rule_agent
from sandbox.repo.box import RepoBox, repo_box, scoring_boxes, start_repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTask, load_repo_tasks, parse_repo_task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "r2e"
LAYOUT = FIXTURES / "layout"
TASKS_FILE = FIXTURES / "layout_tasks.jsonl"
IMAGE = "localhost/cua-r2e-sample"  # the entry's docker_image is IMAGE:latest
BASE = "localhost/cua-repo-samples:latest"
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")  # pure Python
GOLD = (FIXTURES / "layout_gold.diff").read_text()
WRONG = GOLD.replace("return a + b", "return a * b")  # applies; add(2, 3) is 6
# what a forged harness prints: every expected test passing
FORGED = (
    "echo '=== short test summary info ==='\n"
    "for t in TestArith::test_add TestArith::test_mul 'test_join[a b]' 'test_join[c d]'; do\n"
    '  echo "PASSED r2e_tests/test_1.py::$t"\ndone\nexit 0\n'
)


def _context(dst: Path) -> None:
    """The build context: the layout, and pytest's packages (pure Python) from this interpreter."""
    shutil.copytree(LAYOUT, dst)
    site = dst / "site"
    site.mkdir()
    for name in PYTEST_PACKAGES:
        origin = Path(importlib.util.find_spec(name).origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(origin, site / origin.name)
    for dist in ("pytest", "pluggy", "iniconfig", "packaging", "pygments"):  # versions pytest reads
        files = importlib.metadata.distribution(dist).files or []
        info = Path(next(f for f in files if f.name == "METADATA").locate()).parent  # its *.dist-info
        shutil.copytree(info, site / info.name)


@pytest.fixture(scope="session")
def r2e_image(sandbox_setup, tmp_path_factory) -> str:
    """IMAGE:latest, built once a session (podman's layer cache makes a rebuild of unchanged inputs quick)."""
    ctx = tmp_path_factory.mktemp("r2e-layout") / "ctx"
    _context(ctx)
    digest = hashlib.sha256()
    for f in sorted(p for p in ctx.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(ctx)).encode() + b"\0" + f.read_bytes())
    key = digest.hexdigest()[:12]
    if subprocess.run(["podman", "image", "exists", f"{IMAGE}:{key}"]).returncode != 0:
        subprocess.run(
            [
                "podman",
                "build",
                "-q",
                "--layers",
                "--build-arg",
                f"BASE={BASE}",
                "-t",
                f"{IMAGE}:{key}",
                str(ctx),
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    subprocess.run(["podman", "tag", f"{IMAGE}:{key}", f"{IMAGE}:latest"], check=True)
    return f"{IMAGE}:latest"


@pytest.fixture(scope="session")
def task(r2e_image) -> RepoTask:
    (found,) = load_repo_tasks(TASKS_FILE)
    assert found.spec.image == r2e_image
    return found


@pytest.fixture
async def agent_box(task, docker_backend):
    """An agent's box of the task (started as the terminal loop starts one), removed after the test."""
    box = await asyncio.to_thread(start_repo_box, docker_backend, task.spec)
    yield box
    await box.close()


def fresh(backend, task: RepoTask):
    return lambda: repo_box(backend, task.spec)


async def _score(box: RepoBox, task: RepoTask, backend):
    return await score(box, task.tests, fresh(backend, task))


# -- the task row --------------------------------------------------------------------------------------


def test_an_r2e_row_defaults_to_r2e_gyms_test_command_and_layout(tmp_path):
    """A row naming an R2E-Gym entry needs no `tests`: R2E-Gym's command, its rule, its layout."""
    row = json.loads(TASKS_FILE.read_text())
    t = parse_repo_task(row, "row", FIXTURES)
    assert t.tests.command == "bash /root/run_tests.sh" and t.tests.report == "r2e"
    assert t.tests.expected == {
        "TestArith.test_add": "PASSED",
        "TestArith.test_mul": "PASSED",
        "test_join[a b]": "PASSED",
        "test_join[c d]": "PASSED",
    }
    assert t.spec.workdir == "/testbed" and t.spec.r2e_layout
    assert t.issue.strip() == "mathx.add(2, 3) returns -1 instead of 5."
    own = parse_repo_task({**row, "tests": {"command": "bash /root/run_tests.sh -x"}}, "row", FIXTURES)
    assert own.tests.command.endswith("-x") and own.tests.report == "r2e"
    plain = parse_repo_task(json.loads(SAMPLE_TASKS.read_text().splitlines()[0]), "row", SAMPLE_TASKS.parent)
    assert not plain.spec.r2e_layout


# -- scoring in the R2E-Gym layout -----------------------------------------------------------------------

slow = pytest.mark.slow  # real podman boxes


@slow
def test_the_image_is_laid_out_as_r2e_gyms(r2e_image):
    """What the fix is about: untracked and changed files at HEAD, hidden tests outside the repository."""
    out = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network=none",
            r2e_image,
            "sh",
            "-c",
            "git status --porcelain; ls /r2e_tests",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [
        "M",
        "Makefile",
        "??",
        "mathx/__pycache__/",
        "??",
        "run_tests.sh",
        "__pycache__",
        "test_1.py",
    ]


@slow
async def test_boxes_are_prepared_as_r2e_gyms_runtime_prepares_them(agent_box, task, docker_backend):
    """No compiled file left in the repository or the hidden tests; the repository's .venv linked into the
    runtime's home, its python first on ~/.local/bin."""
    said = await agent_box.run(
        "find /testbed -name '*.pyc'; readlink /root/.venv; /root/.local/bin/python -m pytest --version"
    )
    assert said.output.split()[:2] == ["/testbed/.venv", "pytest"], said.output
    with scoring_boxes():
        async with repo_box(docker_backend, task.spec) as box:
            said = await box.run("find /testbed /r2e_tests -name '*.pyc' -o -name __pycache__")
    assert said.exit_code == 0 and said.output.strip() == ""


@slow
async def test_the_gold_patch_scores_1_through_the_rule_agent(task, docker_backend):
    line = await rule_agent.episode(docker_backend, task)
    assert line["status"] == "scored" and line["reward"] == 1.0, line
    assert "all 4 tests as expected" in line["verdict"]


@slow
async def test_an_empty_change_scores_0_for_its_failing_test_not_for_a_diff_that_does_not_apply(
    agent_box, task, docker_backend
):
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 0.0 and "does not apply" not in verdict.reason, verdict.reason
    assert "TestArith.test_add: expected PASSED, got FAILED" in verdict.reason
    assert "PASSED r2e_tests/test_1.py::TestArith::test_mul" in verdict.result.output
    assert "PASSED r2e_tests/test_1.py::test_join[a b]" in verdict.result.output


@slow
async def test_a_wrong_patch_scores_0(agent_box, task, docker_backend):
    assert (await agent_box.apply_patch(WRONG)).exit_code == 0
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 0.0 and "TestArith.test_add: expected PASSED, got FAILED" in verdict.reason


@slow
async def test_the_agents_box_cannot_read_the_hidden_tests(agent_box):
    for command in (
        "cat /r2e_tests/test_1.py",
        "ls /r2e_tests",
        "cat r2e_tests/test_1.py",
        "cat /root/r2e_tests/*",
    ):
        assert (await agent_box.run(command)).exit_code != 0, command
    places = "/root /testbed /tmp /var /opt /home /srv /usr/local"
    found = await agent_box.run(
        f"find / -xdev -name test_1.py 2>/dev/null; grep -rl 'def test_join' {places} 2>/dev/null; :", 60
    )
    assert found.output.strip() == "", found.output
    ours = await agent_box.run("git status --porcelain; cat /root/run_tests.sh")
    assert ours.output.split() == [
        "M",
        "Makefile",
        ".venv/bin/python",
        "-W",
        "ignore",
        "-m",
        "pytest",
        "-rA",
        "r2e_tests",
    ]


@slow
@pytest.mark.parametrize("harness", ["run_tests.sh", "/root/run_tests.sh"])
async def test_an_agent_that_forges_run_tests_sh_does_not_score_1(agent_box, task, docker_backend, harness):
    assert (await agent_box.write_file(harness, FORGED)).exit_code == 0
    assert "PASSED" in (await agent_box.run(f"bash {harness}")).output  # it forges in its own box
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 0.0 and "TestArith.test_add: expected PASSED, got FAILED" in verdict.reason


@slow
async def test_an_agent_that_writes_its_own_r2e_tests_does_not_score_1(agent_box, task, docker_backend):
    """Tests of its own where scoring links the hidden ones: not in the tree the tests run on."""
    always = (
        "class TestArith:\n    def test_add(self):\n        pass\n    def test_mul(self):\n        pass\n"
    )
    assert (await agent_box.write_file("r2e_tests/test_1.py", always)).exit_code == 0
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 0.0 and "TestArith.test_add: expected PASSED, got FAILED" in verdict.reason


@slow
@pytest.mark.parametrize(
    "git",
    [
        "git add -A && git -c user.name=a -c user.email=a@b commit -qm fix",  # its own commit
        "git add mathx && git rm -q --cached README.md",  # index changes
        "git config diff.external /bin/false && git config diff.python.textconv false"
        " && echo '*.py diff=python' > .git/info/attributes",
        "git checkout -q -b other && git -c user.name=a -c user.email=a@b commit -qam fix",
    ],
)
async def test_the_agents_git_state_does_not_change_its_diff(agent_box, task, docker_backend, git):
    assert (await agent_box.apply_patch(GOLD)).exit_code == 0
    assert (await agent_box.run(git)).exit_code == 0
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 1.0, verdict.reason


@slow
async def test_an_agent_that_deletes_its_git_repository_scores_0_with_the_reason(
    agent_box, task, docker_backend
):
    assert (await agent_box.apply_patch(GOLD)).exit_code == 0
    assert (await agent_box.run("rm -rf .git")).exit_code == 0
    verdict = await _score(agent_box, task, docker_backend)
    assert verdict.reward == 0.0 and "no diff of the agent's work" in verdict.reason, verdict.reason


@slow
async def test_a_scoring_box_whose_start_differs_from_the_agents_is_an_error_not_a_reward(
    agent_box, task, docker_backend
):
    """The same image gives the same starting tree: a difference is the task's or the engine's fault."""
    agent_box.start_tree = "0" * 40
    with pytest.raises(SandboxError, match="starting tree"):
        await _score(agent_box, task, docker_backend)


@slow
async def test_a_box_of_an_image_clean_at_head_starts_from_heads_tree(docker_backend):
    calc = next(t for t in load_repo_tasks(SAMPLE_TASKS) if t.task_id == "repo/calc-add")
    async with repo_box(docker_backend, calc.spec) as box:
        head = await box.run("git rev-parse 'HEAD^{tree}'")
        assert box.start_tree == head.output.strip() and len(box.start_tree) == 40
