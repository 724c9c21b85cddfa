"""Attacks on a repository episode's verdict, run by real boxes of the sample image under podman: the
policy's shell (the box's `run`) or its patched code tries to raise its reward, or to escape a 0. Scoring
(sandbox/repo/scoring.py) now takes the agent's diff into a fresh box and reads each named test's outcome,
and a box the policy breaks is the policy's failure. Each test shows the attack working where the old
scorer looked (the agent's own box, the exit status), then failing against the scorer."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from cua_agent.terminal.loop import TerminalConfig, run_terminal_episode
from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import RepoBox, repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTask, load_repo_tasks
from tests.agent.test_terminal_agent import Scripted, call

pytestmark = pytest.mark.slow

TASKS = {t.task_id: t for t in load_repo_tasks(SAMPLE_TASKS)}
CALC, WORDS = TASKS["repo/calc-add"], TASKS["repo/textstats-words"]
WRONG_FIX = CALC.solution.read_text().replace("a + b", "b - a")  # applies, and still fails test_add
# prints what a passing unittest run prints and exits 0, whatever it was asked to run
FAKE_PYTHON = "#!/bin/sh\nprintf 'Ran 2 tests in 0.001s\\n\\nOK\\n' >&2\nexit 0\n"
# answers every request that runs the tests with exit status 0, before the control loop can (the pattern is
# split so that the request starting it does not match)
FORGER = r"""cat > /tmp/forge.sh <<'EOF'
while :; do
  for f in /run/cua/in/*.sh; do
    id=$(basename "$f" .sh)
    if grep -q "m unit""test" "$f" 2>/dev/null && [ ! -e "/run/cua/out/$id.rc" ]; then
      echo OK > "/run/cua/out/$id.out"; echo 0 > "/run/cua/out/$id.rc"
    fi
  done
  sleep 0.02
done
EOF
nohup sh /tmp/forge.sh >/dev/null 2>&1 &
echo started"""


@pytest.fixture(scope="module")
def backend(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-scoring-{os.getpid()}")
    yield backend
    assert backend.list_boxes(run_id=backend.run_id) == [], "a box outlived its test"
    backend.close()


def fresh(backend: DockerBackend, task: RepoTask):
    return lambda: repo_box(backend, task.spec)


async def test_what_the_agent_leaves_in_its_box_does_not_reach_the_tests(backend):
    """A fake python3 on the PATH outside the repository, and a process that answers the tests' requests
    with exit 0: in the agent's box a wrong fix passes; scored, it is the 0 it earned."""
    async with repo_box(backend, CALC.spec) as box:
        assert (await box.apply_patch(WRONG_FIX)).exit_code == 0
        await box.write_file("/usr/local/bin/python3", FAKE_PYTHON)
        await box.run("chmod +x /usr/local/bin/python3")
        assert (await box.run(FORGER)).output == "started\n"
        in_place = await box.run(CALC.tests.command, timeout_s=30)
        assert in_place.exit_code == 0, "the old scorer's view: the tests 'pass' in the agent's box"
        verdict = await score(box, CALC.tests, fresh(backend, CALC))
    assert verdict.reward == 0.0, verdict
    assert "tests.test_ops.TestOps.test_add: expected PASSED, got FAILED" in verdict.reason


async def prepend(box: RepoBox, path: str, code: str) -> None:
    """The agent's edit: `code` at the top of `path` (what its write_file tool does)."""
    original = (await box.read_file(path)).output
    assert (await box.write_file(path, code + original)).exit_code == 0


async def test_code_that_exits_0_at_import_scores_only_by_exit_status(backend):
    """The agent's edit makes the module under test end the process with status 0 when imported: no test
    runs. Scored by exit status (a row without `tests.expected`) that is a 1, even in a fresh box; by the
    named tests' outcomes it is a 0 (the README says so)."""
    async with repo_box(backend, CALC.spec) as box:
        await prepend(box, "calc/ops.py", "import os\nos._exit(0)\n")
        by_exit_status = await score(box, replace(CALC.tests, expected={}), fresh(backend, CALC))
        by_outcomes = await score(box, CALC.tests, fresh(backend, CALC))
    assert by_exit_status.reward == 1.0, by_exit_status  # the limit of exit-status rows
    assert by_outcomes.reward == 0.0 and "got no outcome" in by_outcomes.reason, by_outcomes


async def test_an_unrelated_failing_test_does_not_hold_the_reward_at_0(backend):
    """textstats has a test of its own that fails before and after the word_count fix: the run's exit
    status is 1 either way, so exit-status scoring could never pay the fix. Its row names that test FAILED."""
    async with repo_box(backend, WORDS.spec) as box:
        assert (await box.apply_patch(WORDS.solution.read_text())).exit_code == 0
        fixed = await score(box, WORDS.tests, fresh(backend, WORDS))
        by_exit_status = await score(box, replace(WORDS.tests, expected={}), fresh(backend, WORDS))
    assert fixed.reward == 1.0 and fixed.result.exit_code == 1, fixed
    assert "TestChars.test_whitespace_is_left_out) ... FAIL" in fixed.result.output
    assert by_exit_status.reward == 0.0


# the control loop is the parent of `timeout`, the parent of the command's shell
STOP_THE_LOOP = 'read -r _ _ _ loop _ < /proc/$PPID/stat; kill -STOP "$loop"'


@pytest.mark.parametrize(
    "breaks",
    ["kill -9 -1", STOP_THE_LOOP],  # every process of the box (its loop too: the box exits); a silent loop
    ids=["kills-its-box", "silences-its-control-loop"],
)
async def test_a_policy_that_breaks_its_box_scores_0(backend, breaks):
    """Before: an infrastructure failure, so the episode was dropped and a certain 0 went unscored."""
    model = Scripted(
        [call("apply_patch", patch=WRONG_FIX), call("run", command=breaks), call("run", command="ls")]
    )
    cfg = TerminalConfig(max_turns=3, command_timeout_s=2)
    t0 = time.monotonic()
    async with repo_box(backend, CALC.spec) as box:
        box.answer_grace_s = 3.0  # a silent loop is known sooner (the default 15 s allows for a loaded host)
        ep = await run_terminal_episode(box, fresh(backend, CALC), model, CALC, 0, cfg)
    assert (ep.status, ep.task_reward) == ("box_broken", 0.0), ep
    assert "BoxBroken" in ep.error and "broke" in ep.error and ep.turns[-1].note == "box lost", ep.error
    print(f"\n{breaks!r}: {ep.error} ({time.monotonic() - t0:.0f} s)")


async def test_code_under_test_that_kills_the_scoring_box_scores_0(backend):
    """The agent's code kills every process of the box it is tested in: that box is lost to the agent's
    code, which is the agent's failure (a box the engine killed stays an infrastructure failure:
    tests/agent/test_terminal_agent.py)."""
    async with repo_box(backend, CALC.spec) as box:
        await prepend(box, "calc/ops.py", "import os, signal\nos.kill(-1, signal.SIGKILL)\n")
        verdict = await score(box, CALC.tests, fresh(backend, CALC))
    assert verdict.reward == 0.0 and verdict.reason.startswith("the tests' box:"), verdict
