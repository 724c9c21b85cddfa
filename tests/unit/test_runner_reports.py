"""Test runners' reports read for each test's outcome (sandbox/repo/reports.py), and the task rows that
name the outcomes they expect (sandbox/repo/tasks.py). The reports come from boxes that run the agent's
code: parsing stays linear on hostile text, and a test reported two ways never counts as passed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sandbox.repo.reports import CONFLICT, parse_pytest, parse_unittest, unmet
from sandbox.repo.tasks import load_repo_tasks
from sandbox.tasks import TaskSpecError

UNITTEST = """\
test_add (tests.test_ops.TestOps.test_add) ... FAIL
test_docs (tests.test_ops.TestOps.test_docs)
The sum's docstring line ... ok
test_old (tests.test_ops.TestOps) ... ok
test_skip (tests.test_ops.TestOps.test_skip) ... skipped 'later ... maybe'
test_x (tests.test_ops.TestOps.test_x) ... expected failure
test_boom (tests.test_ops.TestOps.test_boom) ... ERROR

======================================================================
FAIL: test_add (tests.test_ops.TestOps.test_add)
----------------------------------------------------------------------
Ran 6 tests in 0.001s

FAILED (failures=1, errors=1, skipped=1, expected failures=1)
"""

PYTEST = """\
============================= short test summary info ==============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::TestK::test_two[1-2]
\x1b[31mFAILED\x1b[0m tests/test_a.py::test_three - AssertionError: 1 != 2
ERROR tests/test_b.py::test_four
SKIPPED [1] tests/test_b.py:12: no network
XFAIL tests/test_b.py::test_five - known
========================= 2 passed, 1 failed in 0.10s ==========================
"""


def test_unittest_verbose_output_gives_each_tests_outcome_by_its_dotted_id():
    assert parse_unittest(UNITTEST) == {
        "tests.test_ops.TestOps.test_add": "FAILED",
        "tests.test_ops.TestOps.test_docs": "PASSED",  # its outcome on the docstring's line
        "tests.test_ops.TestOps.test_old": "PASSED",  # Python < 3.11 leaves the method out of the brackets
        "tests.test_ops.TestOps.test_skip": "SKIPPED",
        "tests.test_ops.TestOps.test_x": "XFAIL",
        "tests.test_ops.TestOps.test_boom": "ERROR",
    }


def test_pytest_short_summary_gives_each_tests_outcome_by_its_node_id():
    assert parse_pytest(PYTEST) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::TestK::test_two[1-2]": "PASSED",
        "tests/test_a.py::test_three": "FAILED",
        "tests/test_b.py::test_four": "ERROR",
        "tests/test_b.py::test_five": "XFAIL",
    }


def test_a_forged_line_beside_the_runners_own_is_a_conflict_not_a_pass():
    forged = "test_add (tests.test_ops.TestOps.test_add) ... ok\n" + UNITTEST
    outcomes = parse_unittest(forged)
    assert outcomes["tests.test_ops.TestOps.test_add"] == CONFLICT
    assert unmet({"tests.test_ops.TestOps.test_add": "PASSED"}, outcomes) == [
        "tests.test_ops.TestOps.test_add: expected PASSED, got CONFLICT"
    ]
    assert unmet({"tests.test_ops.TestOps.test_gone": "PASSED"}, outcomes) == [
        "tests.test_ops.TestOps.test_gone: expected PASSED, got no outcome"
    ]


def test_hostile_reports_of_the_size_cap_parse_in_linear_time():
    """4 MB each (the scorer's cap): long lines without the separators the patterns look for, and many
    short lines that almost match."""
    worst = [
        "PASSED " + "a:" * 2_000_000,
        ("x" * 4000 + "\n") * 1000,
        ("FAILED " + " " * 3000 + "::\n") * 1300,
        ("t (" + "a." * 1500 + ") ... " * 100 + "\n") * 1000,
        ("test_x (a.b.test_x)" + " ... " * 700 + "\n") * 1000,
    ]
    for text in worst:
        t0 = time.thread_time()  # CPU time: a loaded machine's pauses do not count
        parse_pytest(text), parse_unittest(text)
        assert time.thread_time() - t0 < 2.0, text[:60]


def _row(tmp_path: Path, tests: dict, **extra) -> list:
    row = {"task_id": "repo/x", "split": "train", "max_steps": 4, "issue": "fix it",
           "sandbox": {"docker_image": "img:1", "workdir": "/w"}, "tests": tests, **extra}  # fmt: skip
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return load_repo_tasks(path)


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ({"command": "t", "expected": {"a": "GREEN"}}, "field 'tests.expected': must map test ids to one of"),
        ({"command": "t", "expected": ["a"]}, "field 'tests.expected': must map"),
        (
            {"command": "t", "expected": {"a": "PASSED"}, "report": "nose"},
            "field 'tests.report': must be one",
        ),
        ({"command": "t", "report": "pytest"}, "field 'tests.report': is read only with tests.expected"),
    ],
)
def test_bad_expectations_are_named_by_their_field(tmp_path, tests, message):
    with pytest.raises(TaskSpecError, match=message):
        _row(tmp_path, tests)


def test_an_r2e_gym_entry_gives_its_expected_outcomes_read_by_r2e_gyms_rule(tmp_path):
    entry = {
        "docker_image": "namanjain12/orange3_final:abc123",
        "problem_statement": "Table.from_numpy drops the domain",
        "expected_output_json": json.dumps(
            {
                "TestT.test_a": "PASSED",
                "test_b - slow case": "FAILED",
                "\x1b[1mtest_c\x1b[0m": "ERROR",
                "": "ERROR",
            }
        ),
    }
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    (task,) = _row(tmp_path, {"command": "bash run_tests.sh"}, r2e_ds_json="entry.json")
    assert task.tests.report == "r2e"
    assert dict(task.tests.expected) == {
        "TestT.test_a": "PASSED",
        "test_b": "FAILED",
        "test_c": "ERROR",
        "": "ERROR",
    }
    # a row of our own keeps the per-test rule, SWE-bench's
    (own,) = _row(tmp_path, {"command": "t", "expected": {"t.T.test_a": "PASSED"}})
    assert own.tests.report == "unittest"


@pytest.mark.parametrize(
    ("statement", "issue"),
    [
        (
            "Intro.\n[ISSUE]\nTitle: add is wrong\n\nadd(2, 3) is -1\n[/ISSUE]\nhints",
            "\nTitle: add is wrong\n\nadd(2, 3) is -1\n",
        ),
        ("no markers here", "no markers here"),
        ("[/ISSUE] only the end marker [ISSUE]", "[/ISSUE] only the end marker [ISSUE]"),
    ],
)
def test_an_r2e_gym_problem_statement_is_cut_to_its_issue_markers(tmp_path, statement, issue):
    entry = {"docker_image": "img:1", "problem_statement": statement}
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    row = {"command": "bash run_tests.sh"}
    (task,) = _row(tmp_path, row, r2e_ds_json="entry.json")  # the row's own issue wins
    assert task.issue == "fix it"
    path = tmp_path / "tasks.jsonl"
    obj = json.loads(path.read_text())
    del obj["issue"]
    path.write_text(json.dumps(obj) + "\n")
    (task,) = load_repo_tasks(path)
    assert task.issue == issue
