"""R2E-Gym's scoring rule, for rows that name an R2E-Gym dataset entry (`r2e_ds_json`, report "r2e").

Our own implementation of what R2E-Gym (github.com/R2E-Gym/R2E-Gym, src/r2egym) does to score an R2E
row: `DockerRuntime.run_tests` and `_calculate_reward_r2e` (agenthub/runtime/docker.py),
`parse_log_pytest` and `decolor_dict_keys` (repo_analysis/execution_log_parser.py). Its entries'
`expected_output_json` was written by that same parse, so only the same parse can match it:

- The log: colour codes (ESC [ digits/semicolons m) and carriage returns removed from the whole output,
  twice when the command exited 0 (R2E-Gym's `run` removes them, then `run_tests` again) and once
  otherwise. Lines are split at "\n" only.
- The parse reads only the text after the first "short test summary info" and before a second one (none:
  no outcomes), stripped of surrounding whitespace. A line holding "PASSED" is a pass, else one holding
  "FAILED" a failure, else one holding "ERROR" an error; other lines (SKIPPED, XFAIL, the totals) are not
  read. The key is the line's "::"-separated parts after the first, joined by "." (`PASSED
  r2e_tests/test_1.py::TestK::test_x[a b]` -> `TestK.test_x[a b]`; the unittest custom runner's `PASSED
  mod::Class::method` -> `Class.method`; a line without "::" -> ""), cut at its first " - " for failures
  and errors. A test on two lines takes the last (PASSED then a teardown ERROR: ERROR).
- Keys of both maps lose colour codes (ESC [ digits m, once), then are cut at " - " in sorted order (two
  keys that become one: the last in that order wins).
- Reward 1 iff the two maps are equal. R2E-Gym compares the lengths, then looks up each parsed key in
  the expected map; at equal lengths a parsed key the expected map lacks raises KeyError there: here it
  is a 0 whose reason names that key.

Deliberate differences, each tested (tests/unit/test_r2e_scoring.py, tests/unit/test_r2e_differential.py):

- A line that starts with "FAILED" or "ERROR" has that outcome, whatever it holds further on. R2E-Gym's
  test of "PASSED" anywhere in the line makes `FAILED r2e_tests/test_1.py::test_x - ValueError: PASSED`
  a pass: code under test that raises an exception saying PASSED (or ERROR lines saying FAILED) would
  turn its failures into passes. A row whose expected map recorded such a line (its gold run's failure
  message said PASSED) cannot score 1 here.
- The scorer (sandbox/repo/scoring.py) reads the last MAX_REPORT_BYTES of an output over that cap, where
  the summary is; R2E-Gym reads it whole. A summary longer than the cap loses its header: no outcomes.
- An entry whose `expected_output_json` is missing or {} is scored by the tests' exit status 0 (R2E-Gym
  reads a file of the image for the one, and wants an empty parse for the other).
- A test command that times out scores 0 with that reason, as in R2E-Gym (whose `run` turns exit status
  124 into a message with no summary; a command exiting 124 by itself is likewise a 0 here).

Quirks kept, since the expected maps were written by them: only the first summary section is read (text
the code under test prints as "short test summary info" before pytest's own header makes what follows it
the report, a forgery like the others docs/security.md describes); SKIPPED, XFAIL and XPASS
lines are not outcomes; keys with colour codes that hold ";" keep them in the expected map and never match.

The output comes from a box that runs the agent's code, so everything here is linear in its size (no
pattern that backtracks) and takes any text, never raising.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PASSED, FAILED, ERROR = "PASSED", "FAILED", "ERROR"
HEADER = "short test summary info"
_LOG_NOISE = re.compile(r"\x1b\[[0-9;]*m|\r")  # what R2E-Gym's runtime removes from a command's output
_KEY_COLOUR = re.compile(r"\x1b\[[0-9]+m")  # what its decolor_dict_keys removes from keys
_ISSUE = re.compile(r"\[ISSUE\](.*)\[/ISSUE\]", re.DOTALL)


def issue_text(problem_statement: str) -> str:
    """The text R2E-Gym gives its agent: what lies between the first [ISSUE] and the last [/ISSUE] of the
    entry's problem statement, else all of it (its `get_task_instruction`)."""
    found = _ISSUE.search(problem_statement)
    return found.group(1) if found else problem_statement


def clean_log(output: str, exit_code: int) -> str:
    """The output as R2E-Gym's parser sees it (colour codes and carriage returns removed)."""
    output = _LOG_NOISE.sub("", output)
    return _LOG_NOISE.sub("", output) if exit_code == 0 else output


def _line_outcome(line: str) -> str | None:
    for word in (FAILED, ERROR):  # deliberate: a leading outcome word decides (module docstring)
        if line.startswith(word):
            return word
    return next((word for word in (PASSED, FAILED, ERROR) if word in line), None)


def parse_log(text: str) -> dict[str, str]:
    """Each test's outcome in a cleaned log (`clean_log`), keyed as R2E-Gym keys it."""
    start = text.find(HEADER)
    if start < 0:
        return {}
    start += len(HEADER)
    end = text.find(HEADER, start)
    outcomes: dict[str, str] = {}
    for line in text[start : end if end >= 0 else len(text)].strip().split("\n"):
        outcome = _line_outcome(line)
        if outcome is None:
            continue
        key = ".".join(line.split("::")[1:])
        outcomes[key if outcome == PASSED else key.split(" - ")[0]] = outcome
    return outcomes


def normal_keys(outcomes: Mapping[str, str]) -> dict[str, str]:
    """Keys without colour codes, then cut at " - " in sorted order: how R2E-Gym compares both maps."""
    decoloured = {_KEY_COLOUR.sub("", key): value for key, value in outcomes.items()}
    return {key.split(" - ")[0]: decoloured[key] for key in sorted(decoloured)}


def expected_map(raw: Mapping[str, str]) -> dict[str, str]:
    """An entry's `expected_output_json` map, as the rule compares it."""
    return normal_keys(raw)


def outcomes(output: str, exit_code: int) -> dict[str, str]:
    """The tests' outcomes in a command's output, as the rule compares them."""
    return normal_keys(parse_log(clean_log(output, exit_code)))


def mismatches(expected: Mapping[str, str], found: Mapping[str, str]) -> list[str]:
    """Why the maps differ, one line per key (the expected map's order, then tests it does not name);
    empty: reward 1. Both maps as `expected_map` and `outcomes` give them."""
    missing = [
        f"{key}: expected {want}, got {found.get(key, 'no outcome')}"
        for key, want in expected.items()
        if found.get(key) != want
    ]
    extra = [f"{key}: not expected, got {got}" for key, got in found.items() if key not in expected]
    return missing + extra
