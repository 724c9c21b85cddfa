"""OSWorld's generic metrics (names and calling conventions as OSWorld's): strings, lists, text files."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    return float(result == rules["expected"])


def match_in_list(result: Any, rules: dict[str, Any]) -> float:
    return float(result in rules["expected"])


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    return float(result is not None and rules["expected"] in result)


def literal_match(result: Any, expected: Any, type: str = "str", ignore_case: bool = False) -> float:
    def norm(v: Any) -> str:
        return str(v).lower() if ignore_case else str(v)

    if type == "str":
        return float(norm(result) == norm(expected))
    if type == "list":
        ok = (
            isinstance(result, list | tuple)
            and isinstance(expected, list | tuple)
            and len(result) == len(expected)
        )
        return float(ok and [norm(r) for r in result] == [norm(e) for e in expected])
    raise ValueError(f"literal_match: type {type!r} (expected 'str' or 'list')")


def check_include_exclude(result: str | None, rules: dict[str, list[str]]) -> float:
    if result is None:
        return 0.0
    ok = all(s in result for s in rules.get("include", [])) and not any(
        s in result for s in rules.get("exclude", [])
    )
    return float(ok)


def check_direct_json_object(result: Any, rules: dict[str, Any]) -> float:
    """OSWorld's rules (desktop-env 1.0.2): a string result is parsed as JSON after `'` -> `"`. Each key of
    `rules["expected"]` must match: by equality; with `expect_in_result`, a list of candidates matches a
    string result equal to one of them or a list result containing one, a string matches as a substring.
    An expected value "__EVALUATION_FAILED__" scores 0, and so does any error comparing (a missing key, a
    result that is not an object, an expected value of another type). Like OSWorld, `ignore_list_order`
    is read from inside `expected`, where its own value then fails the comparison.

    Deliberate difference: a result that is not valid JSON scores 0; OSWorld's function raises."""
    if isinstance(result, str):
        try:
            result = json.loads(result.strip().replace("'", '"'))
        except json.JSONDecodeError:
            return 0.0
    if result is None:
        return 0.0
    try:
        expected = rules.get("expected", {})
        if expected and any(v == "__EVALUATION_FAILED__" for v in expected.values()):
            return 0.0
        expected = rules["expected"]
        if not rules.get("expect_in_result", False):
            for key, want in expected.items():
                if expected.get("ignore_list_order", False):
                    if sorted(want) != sorted(result.get(key)):
                        return 0.0
                elif want != result.get(key):
                    return 0.0
            return 1.0
        for key, want in expected.items():
            got = result.get(key)
            if isinstance(want, list):
                if not any(
                    (isinstance(got, list) and w in got) or (isinstance(got, str) and w == got) for w in want
                ):
                    return 0.0
            elif isinstance(want, str):
                if want not in got:
                    return 0.0
            else:
                return 0.0
        return 1.0
    except Exception:  # as OSWorld: an object it cannot compare scores 0
        return 0.0


def _lines(path: str) -> list[str]:
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def _collapse_blanks(text: str) -> str:
    """OSWorld's `ignore_blanks`: tabs and newlines become spaces, the ends are stripped, and every run of
    whitespace becomes one space ("green kiwi" and "greenkiwi" differ)."""
    return re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", text).strip())


def compare_text_file(
    result: str | None, expected: str | None, ignore_blanks: bool = False, ignore_case: bool = False
) -> float:
    """OSWorld's (desktop-env 1.0.2, in its vscode metrics). Deliberate differences: a missing gold scores
    0 (OSWorld raises), and undecodable bytes are replaced rather than raising."""
    if not result or not expected:
        return 0.0
    a, b = (Path(p).read_text(errors="replace") for p in (result, expected))
    if ignore_blanks:
        a, b = _collapse_blanks(a), _collapse_blanks(b)
    if ignore_case:
        a, b = a.lower(), b.lower()
    return float(a == b)


def _csv_lines(path: str) -> list[str] | None:
    """A CSV's lines as OSWorld reads them: UTF-8, else Latin-1 (which decodes any bytes); None when the
    file cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return text.splitlines()


def compare_csv(
    result: str | None, expected: str | list[str] | None, strict: bool = True, ignore_case: bool = False
) -> float:
    """OSWorld's (desktop-env 1.0.2, in its table metrics): 1 when the result's lines equal those of the
    gold or of any of a list of golds; a gold that cannot be read is skipped. Deliberate difference: no
    gold at all scores 0 (OSWorld raises)."""
    if not result or not expected:
        return 0.0
    got = _csv_lines(result)
    if got is None:
        return 0.0
    for gold in [expected] if isinstance(expected, str) else expected:
        want = _csv_lines(gold)
        if want is None:
            continue
        got_s, want_s = got, want
        if not strict:
            got_s, want_s = [g.strip() for g in got_s], [w.strip() for w in want_s]
        if ignore_case:
            got_s, want_s = [g.lower() for g in got_s], [w.lower() for w in want_s]
        if got_s == want_s:
            return 1.0
    return 0.0


def diff_text_file(result: str | None, expected: str) -> float:
    if result is None:
        return 0.0
    return difflib.SequenceMatcher(a=_lines(result), b=_lines(expected)).ratio()


def check_list(result: str | None, rules: dict[str, list[str]]) -> float:
    """Every `expect` regex found in some line, no `unexpect` regex in any. As in OSWorld's, a line keeps
    its line end (a pattern may match it) and only newlines and carriage returns end lines."""
    if result is None:
        return 0.0
    with open(result, errors="replace") as f:
        lines = list(f)
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    found = all(any(p.search(line) for line in lines) for p in expect)
    clean = not any(p.search(line) for p in unexpect for line in lines)
    return float(found and clean)
