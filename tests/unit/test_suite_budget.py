"""The suite's time budget (tests/conftest.py, CUA_SUITE_BUDGET_S): a run past it fails with a message that
says so and starts no new test, a run within it keeps its own status; either says how long it took and how
fast the machine was. A failure is named as it happens, for a run that CI stops before its summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cua_agent.inference.local_server import REPO

ONE_FAST_TEST = (
    "tests/unit/test_r2e_differential.py::test_the_corpus_is_the_one_the_reference_was_recorded_on"
)

PROBE_LINE = r"^suite: \d+ s \(.* min\); CPU probe .*: (\d+\.\d\d) s before it, (\d+\.\d\d) s after it$"


# Fast tests of as many modules, so as many work units of `make test`'s scheduling (a unit per module)
MODULES_TESTS = (
    "tests/unit/test_settings.py::test_dotenv_is_read_and_environment_wins",
    "tests/unit/test_console.py::test_the_terminal_shows_the_job_the_steps_and_the_warnings_only",
    "tests/unit/test_display_input.py::test_a_move_the_x_server_applies_late_is_waited_for",
    "tests/unit/test_logger_names.py::test_every_areal_logger_name_is_used_once",
    "tests/unit/test_step_progress.py::test_a_waiting_step_prints_its_episodes_since_the_last_step_and_a_short_step_prints_nothing",
    "tests/unit/test_text_rows.py::test_a_text_row_and_a_screenshot_row_concatenate",
    "tests/unit/test_screenshot_budget.py::test_the_oldest_episodes_screenshots_go_first_past_the_budget",
    "tests/unit/test_libpod_spec.py::test_every_isolation_setting_reaches_the_spec",
    "tests/unit/test_runner_reports.py::test_unittest_verbose_output_gives_each_tests_outcome_by_its_dotted_id",
)
# A plugin that fails the first of them and errors the second in its setup, whatever the code under test does
PLANT_FAILURE = f"""
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if item.nodeid == {MODULES_TESTS[0]!r}:
        raise AssertionError("planted failure")

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.nodeid == {MODULES_TESTS[1]!r}:
        raise RuntimeError("planted error")
"""


def _pytest(budget_s: str, workers: str, *args: str, plugins: str = "") -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO), plugins]))
    env = {**os.environ, "CUA_SUITE_BUDGET_S": budget_s, "PYTHONPATH": path}
    distributed = ["-n", workers]  # as `make test` runs it
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *distributed, *(args or [ONE_FAST_TEST])],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_past_the_budget_fails_naming_the_budget(workers: str):
    over = _pytest("0", workers)
    assert over.returncode == 1, over.stdout
    assert "over its budget of 0 s (CUA_SUITE_BUDGET_S)" in over.stdout and "1 passed" in over.stdout
    within = _pytest("3600", workers)
    assert within.returncode == 0 and "budget" not in within.stdout, within.stdout
    for run in (over, within):
        probe = re.search(PROBE_LINE, run.stdout, re.M)
        assert probe and all(0 < float(seconds) < 60 for seconds in probe.groups()), run.stdout


@pytest.mark.parametrize("workers", ["0", "2"])
def test_past_the_budget_no_new_test_starts_and_a_failure_is_named_when_it_happens(workers: str, tmp_path):
    (tmp_path / "plant_failure.py").write_text(PLANT_FAILURE)
    run = _pytest("0", workers, "-p", "plant_failure", *MODULES_TESTS, plugins=str(tmp_path))
    out = run.stdout
    assert run.returncode == 1, out
    assert "budget of 0 s (CUA_SUITE_BUDGET_S) is spent: no new test starts" in out, out
    assert "over its budget of 0 s (CUA_SUITE_BUDGET_S)" in out, out
    ran = sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed|errors?)", out.splitlines()[-1]))
    # one test without workers; with two, the units each worker was sent before the stop (two apiece)
    assert 1 <= ran <= (1 if workers == "0" else 4), out
    named = re.search(
        rf"^FAILED {re.escape(MODULES_TESTS[0])} \(call, \d+ s\): AssertionError: planted failure$", out, re.M
    )
    summary = out.index("short test summary info")
    assert named and named.start() < summary, out  # before the summary, which a killed run never prints
    if workers == "2":  # the second test is the second worker's first: it ran before the stop
        errored = re.search(
            rf"^ERROR {re.escape(MODULES_TESTS[1])} \(setup, \d+ s\): RuntimeError: planted error$", out, re.M
        )
        assert errored and errored.start() < summary, out
