"""R2E-Gym's scoring rule for rows that name an R2E-Gym dataset entry (sandbox/repo/r2e.py, wired in
sandbox/repo/scoring.py): the keys R2E-Gym's expected maps use, its reward rule, the quirks we decided
on, and the tests' output read from its tail when it is over the size cap."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.repo import r2e, scoring
from sandbox.repo.box import CommandResult
from sandbox.repo.tasks import RepoTests

LOG = """\
============================= test session starts ==============================
r2e_tests/test_1.py ..F.E
PASSED r2e_tests/test_1.py::test_printed_by_a_test
=========================== short test summary info ============================
PASSED r2e_tests/test_1.py::test_plain
PASSED r2e_tests/test_1.py::TestK::test_method
PASSED r2e_tests/test_1.py::test_p[a b]
\x1b[31mFAILED\x1b[0m r2e_tests/test_1.py::test_q[x::y] - AssertionError: 1 != 2
PASSED r2e_tests/test_1.py::test_torn
ERROR r2e_tests/test_1.py::test_torn - RuntimeError: teardown
SKIPPED [1] r2e_tests/test_1.py:12: no network
==================== 1 failed, 4 passed, 1 error in 0.10s =====================
"""

EXPECTED = {
    "test_plain": "PASSED",
    "TestK.test_method": "PASSED",
    "test_p[a b]": "PASSED",
    "test_q[x.y]": "FAILED",
    "test_torn": "ERROR",
}


def test_keys_are_r2e_gyms_class_dot_name_read_after_the_summary_header_only():
    assert r2e.outcomes(LOG, exit_code=1) == EXPECTED  # the test's own PASSED line before it is not read


def test_the_rule_is_equal_maps_after_decolouring_and_cutting_keys_at_dash():
    raw = {**EXPECTED, "\x1b[1mtest_plain\x1b[0m": "PASSED", "test_p[a b] - why": "PASSED"}
    del raw["test_plain"], raw["test_p[a b]"]
    expected = r2e.expected_map(raw)
    assert r2e.mismatches(expected, r2e.outcomes(LOG, 1)) == []
    # one more test in the report than expected is a 0 (R2E-Gym compares the lengths), never a crash
    more = LOG.replace("SKIPPED", "PASSED r2e_tests/test_1.py::test_new\nSKIPPED")
    assert r2e.mismatches(expected, r2e.outcomes(more, 1)) == ["test_new: not expected, got PASSED"]
    less = {k: v for k, v in expected.items() if k != "test_plain"}
    assert r2e.mismatches(less, r2e.outcomes(LOG, 1)) == ["test_plain: not expected, got PASSED"]
    flipped = {**expected, "test_torn": "PASSED"}
    assert r2e.mismatches(flipped, r2e.outcomes(LOG, 1)) == ["test_torn: expected PASSED, got ERROR"]
    assert r2e.mismatches(expected, r2e.outcomes(LOG.replace("short test summary", "x"), 1)) == [
        f"{k}: expected {v}, got no outcome" for k, v in expected.items()
    ]


def test_the_unittest_custom_runners_lines_key_class_dot_method():
    log = "....\n==================== short test summary info ====================\n"
    log += "PASSED test_mod::TestA::test_one\nFAILED test_mod::TestA::test_two\nERROR unittest.suite::_ErrorHolder\n"
    assert r2e.outcomes(log, 1) == {
        "TestA.test_one": "PASSED",
        "TestA.test_two": "FAILED",
        "_ErrorHolder": "ERROR",
    }


def test_a_failure_whose_message_says_passed_is_a_failure():
    """Deliberate: R2E-Gym counts any summary line that holds "PASSED" as a pass, so code under test that
    raises an exception saying PASSED would turn its failures into passes."""
    log = "== short test summary info ==\nFAILED t.py::test_a - ValueError: PASSED\nERROR t.py::test_b - FAILED\n"
    assert r2e.outcomes(log, 1) == {"test_a": "FAILED", "test_b": "ERROR"}


def test_hostile_logs_of_the_size_cap_score_in_linear_time_without_raising():
    header = "short test summary info\n"
    worst = [
        header + "PASSED " + "a::" * 1_300_000,
        header + ("FAILED " + " - " * 1300 + "::\n") * 1000,
        header + ("\x1b[" * 2000 + "\n") * 500,
        header * 100_000,
        header + "PASSED x::y\x00\ud800\n" + "\x1b[31m" * 100_000,
    ]
    for text in worst:
        t0 = time.thread_time()  # CPU time: a loaded machine's pauses do not count
        r2e.mismatches({"y": "PASSED"}, r2e.outcomes(text, 0))
        assert time.thread_time() - t0 < 2.0, text[:60]


class LocalBox:
    """A scoring box's `run`, `apply_patch` and `write_file` done by a local /bin/sh in a folder, its
    output cut at `max_bytes` as the box's control loop cuts it (its head)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def run(self, command: str, timeout_s: float = 30.0, max_bytes: int = 16384) -> CommandResult:
        done = await asyncio.to_thread(
            subprocess.run, ["sh", "-c", command], cwd=self.folder, capture_output=True, timeout=timeout_s
        )
        raw = done.stdout
        return CommandResult(
            done.returncode, raw[:max_bytes].decode(errors="replace"), len(raw) > max_bytes, False, 1.0
        )

    async def apply_patch(self, diff: bytes) -> CommandResult:
        raise AssertionError("no diff in these tests")

    async def write_file(self, path: str, content: str) -> CommandResult:
        (self.folder / path).write_text(content)
        return CommandResult(0, "", False, False, 0.0)


async def test_an_r2e_row_is_scored_by_r2e_gyms_rule_with_the_reason_naming_the_misses(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "R2E_OUTPUT_DIR", str(tmp_path))
    (tmp_path / "log.txt").write_text(LOG)
    tests = RepoTests(command="cat log.txt; exit 1", expected=EXPECTED, report="r2e")
    verdict = await scoring._test(LocalBox(tmp_path), b"", tests)
    assert verdict.reward == 1.0, verdict.reason
    wrong = RepoTests(command="cat log.txt", expected={**EXPECTED, "test_torn": "PASSED"}, report="r2e")
    verdict = await scoring._test(LocalBox(tmp_path), b"", wrong)
    assert verdict.reward == 0.0
    assert "test_torn: expected PASSED, got ERROR" in verdict.reason


async def test_an_r2e_report_over_the_size_cap_is_read_from_its_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "R2E_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setattr(scoring, "MAX_REPORT_BYTES", 100_000)
    (tmp_path / "log.txt").write_text(("x" * 99 + "\n") * 5000 + LOG)
    tests = RepoTests(command="cat log.txt", expected=EXPECTED, report="r2e")
    verdict = await scoring._test(LocalBox(tmp_path), b"", tests)
    assert verdict.reward == 1.0, verdict.reason
    assert list(tmp_path.iterdir()) == [tmp_path / "log.txt"]  # the whole output's file is removed
    verdict = await scoring._test(
        LocalBox(tmp_path), b"", RepoTests("cat log.txt", expected={"a": "PASSED"}, report="r2e")
    )
    assert verdict.reward == 0.0 and "cut at its size cap" in verdict.reason


@pytest.mark.parametrize("exit_code", [0, 1])
def test_colour_codes_are_removed_as_r2e_gyms_runtime_removes_them(exit_code):
    log = "short test summary info\nPASSED t.py::\x1b[1;32mtest_a\x1b[0m\r\n"
    assert r2e.outcomes(log, exit_code) == {"test_a": "PASSED"}
