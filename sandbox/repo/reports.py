"""Test runners' reports for the per-test rule of our own rows (SWE-bench's: each named test has its
outcome): each test's outcome by its id. Rows from R2E-Gym entries use R2E-Gym's parse (sandbox/repo/r2e.py).

- "unittest": `python -m unittest -v` lines, `test_add (tests.test_ops.TestAdd.test_add) ... ok` (a test
  with a docstring puts it, and the outcome, on the next line). Ids are `tests.test_ops.TestAdd.test_add`.
- "pytest": the short summary of `pytest -rA`, `PASSED tests/test_ops.py::test_add` (`FAILED ... - why`).

The report comes from a box that runs the agent's code, so it is read as hostile text: lines longer than
MAX_LINE are skipped (every pattern is anchored and linear), and a test reported twice with different
outcomes (a line the agent's code printed, then the runner's own) counts as CONFLICT, never as passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = "PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS)
CONFLICT = "CONFLICT"  # two different outcomes for one test
RUNNERS = ("unittest", "pytest")
MAX_LINE = 4096

_UNITTEST_TEST = re.compile(r"(\w+) \(([\w.]+)\)")
_UNITTEST_OUTCOME = {
    "ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAIL, "unexpected success": XPASS
}  # fmt: skip
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours a terminal-minded runner may print
_PYTEST_SUMMARY = re.compile(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)(?: - .*)?")


def _record(outcomes: dict[str, str], test: str, outcome: str) -> None:
    outcomes[test] = outcome if outcomes.get(test, outcome) == outcome else CONFLICT


def _unittest_outcome(line: str) -> str | None:
    """The outcome a line ends with (`... ok`, `... skipped 'why'`), if it ends with one."""
    for cut in (line.rpartition(" ... ")[2], line.partition(" ... ")[2]):  # a skip reason may hold " ... "
        if cut in _UNITTEST_OUTCOME:
            return _UNITTEST_OUTCOME[cut]
        if cut.startswith("skipped"):
            return SKIPPED
    return None


def parse_unittest(text: str) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    pending: str | None = None  # a test whose outcome comes on a later line (after its docstring)
    for line in text.splitlines():
        if len(line) > MAX_LINE:
            continue
        if head := _UNITTEST_TEST.match(line):
            name, where = head.groups()
            pending = where if where.endswith(f".{name}") else f"{where}.{name}"
        if pending and (outcome := _unittest_outcome(line)):
            _record(outcomes, pending, outcome)
            pending = None
    return outcomes


def parse_pytest(text: str) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for line in text.splitlines():
        if len(line) > MAX_LINE:
            continue
        if (m := _PYTEST_SUMMARY.fullmatch(_ANSI.sub("", line))) and "::" in m.group(2):
            _record(outcomes, m.group(2), m.group(1))
    return outcomes


PARSERS = {"unittest": parse_unittest, "pytest": parse_pytest}


def unmet(expected: Mapping[str, str], outcomes: Mapping[str, str]) -> list[str]:
    """The expectations the report does not meet, one line each ("<test>: expected X, got Y")."""
    return [
        f"{test}: expected {want}, got {outcomes.get(test, 'no outcome')}"
        for test, want in expected.items()
        if outcomes.get(test) != want
    ]
