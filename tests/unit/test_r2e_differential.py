"""Our R2E-Gym rule (sandbox/repo/r2e.py) against R2E-Gym's own code on a seeded corpus of logs
(tests/fixtures/r2e/corpus.py): R2E-Gym's answers are recorded in tests/fixtures/r2e/reference.json by
make_reference.py (to check them against R2E-Gym live, rerun it: reference.json must come out byte-identical,
`git diff --exit-code tests/fixtures/r2e/reference.json`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from sandbox.repo import r2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "r2e"


def _load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # make_reference imports corpus by name
    spec.loader.exec_module(module)
    return module


corpus = _load_module("corpus")
CASES = corpus.cases()
REFERENCE = json.loads((FIXTURES / "reference.json").read_text())


def _deviant_keys(case: dict) -> set[str]:
    """Keys of the summary lines our deliberate difference reads otherwise than R2E-Gym: a line that
    starts with FAILED or ERROR and holds an outcome word R2E-Gym tests first (module docstring)."""
    text = r2e.clean_log(case["log"], case["exit_code"])
    if (start := text.find(r2e.HEADER)) < 0:
        return set()
    start += len(r2e.HEADER)
    end = text.find(r2e.HEADER, start)
    lines = text[start : end if end >= 0 else len(text)].strip().split("\n")
    keys = {
        ".".join(line.split("::")[1:]).split(" - ")[0]
        for line in lines
        if (line.startswith("FAILED") and "PASSED" in line)
        or (line.startswith("ERROR") and ("PASSED" in line or "FAILED" in line))
    }
    return set(r2e.normal_keys(dict.fromkeys(keys, "")))


def _ours(case: dict) -> tuple[dict[str, str], float]:
    found = r2e.outcomes(case["log"], case["exit_code"])
    return found, float(not r2e.mismatches(r2e.expected_map(case["expected"]), found))


def test_the_corpus_is_the_one_the_reference_was_recorded_on():
    assert REFERENCE["count"] == len(CASES) == corpus.COUNT
    assert [c["digest"] for c in REFERENCE["cases"]] == [corpus.case_digest(c) for c in CASES]
    assert REFERENCE["corpus_digest"] == corpus.corpus_digest(CASES), (
        "corpus.py changed: rerun make_reference.py"
    )


def _compare(case: dict, ref: dict) -> list[str]:
    """How our answer differs from R2E-Gym's beyond the deliberate difference (empty: agrees)."""
    found, reward = _ours(case)
    theirs = r2e.normal_keys(ref["parsed"])  # R2E-Gym decolours and cuts the parse the same way
    deviant = _deviant_keys(case)
    problems = []
    if {k: v for k, v in found.items() if k not in deviant} != {
        k: v for k, v in theirs.items() if k not in deviant
    }:
        problems.append(f"parse: ours {found} theirs {theirs}")
    their_reward = 0.0 if ref["reward"] == "KeyError" else ref["reward"]  # a crash of theirs is our 0
    if reward != their_reward and not deviant:
        problems.append(f"reward: ours {reward} theirs {ref['reward']}")
    return problems


def test_our_parse_and_reward_agree_with_r2e_gyms_recorded_answers():
    disagree = {
        i: p
        for i, (c, ref) in enumerate(zip(CASES, REFERENCE["cases"], strict=True))
        if (p := _compare(c, ref))
    }
    assert disagree == {}
    # the corpus exercises both rewards, R2E-Gym's KeyError and the deliberate difference
    rewards = [ref["reward"] for ref in REFERENCE["cases"]]
    assert rewards.count(1.0) >= 50 and rewards.count(0.0) >= 50 and rewards.count("KeyError") >= 5
    differ = []  # where R2E-Gym reads a pass, we read the failure the line starts with
    for case, ref in zip(CASES, REFERENCE["cases"], strict=True):
        found, theirs = _ours(case)[0], r2e.normal_keys(ref["parsed"])
        differ += [(found[k], theirs[k]) for k in _deviant_keys(case) if found.get(k) != theirs.get(k)]
    assert len(differ) >= 10
    assert {ours for ours, _ in differ} <= {"FAILED", "ERROR"} and {theirs for _, theirs in differ} <= {
        "PASSED",
        "FAILED",
    }


def test_the_parse_agrees_exactly_where_no_line_deviates():
    """Before decolouring and cutting too: our parse_log is R2E-Gym's parse_log_pytest, key for key."""
    for case, ref in zip(CASES, REFERENCE["cases"], strict=True):
        if not _deviant_keys(case):
            assert r2e.parse_log(r2e.clean_log(case["log"], case["exit_code"])) == ref["parsed"]
