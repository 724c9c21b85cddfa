"""The suite's time budget (tests/conftest.py, CUA_SUITE_BUDGET_S): a run past it fails with a message that
says so, a run within it keeps its own status; either says how long it took and how fast the machine was."""

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


def _pytest(budget_s: str, workers: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUA_SUITE_BUDGET_S": budget_s, "PYTHONPATH": str(REPO)}
    distributed = ["-n", workers]  # as `make test` runs it
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *distributed, ONE_FAST_TEST],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
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
