"""Documents: OSWorld's `compare_docx_files` and `compare_docx_tables`, read with python-docx from the saved
.docx file. Fuzzy scores use difflib's ratio (OSWorld's rapidfuzz ratio is the same 2*matches/length
measure on these strings up to its alignment choice)."""

from __future__ import annotations

import difflib
import re


def _paragraphs(path: str | None) -> list[str] | None:
    import docx

    if not path or not path.endswith(".docx"):
        return None
    try:
        return [p.text for p in docx.Document(path).paragraphs]
    except Exception:
        return None


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()


def compare_docx_files(
    result: str | None,
    expected: str | None,
    ignore_blanks: bool = True,
    ignore_case: bool = False,
    ignore_order: bool = False,
    content_only: bool = False,
    fuzzy_match: bool = False,
    delete_empty_lines: bool = False,
) -> float:
    a, b = _paragraphs(result), _paragraphs(expected)
    if a is None or b is None:
        return 0.0
    if ignore_order:
        a, b = sorted(a), sorted(b)
    if delete_empty_lines:
        a, b = [p for p in a if p.strip()], [p for p in b if p.strip()]
    if content_only or ignore_blanks:
        ta, tb = (re.sub(r"\s+", " ", "\n".join(x)).strip() for x in (a, b))
        if ignore_case:
            ta, tb = ta.lower(), tb.lower()
        if content_only or fuzzy_match:
            return _ratio(ta, tb)
        return float(ta == tb)
    if len(a) != len(b):
        return 0.0
    if ignore_case:
        a, b = [p.lower() for p in a], [p.lower() for p in b]
    if fuzzy_match:
        return sum(_ratio(x, y) for x, y in zip(a, b, strict=False)) / len(a) if a else 1.0
    return float(a == b)


def compare_docx_tables(result: str | None, expected: str | None) -> float:
    import docx

    if not result or not expected:
        return 0.0
    try:
        t1, t2 = docx.Document(result).tables, docx.Document(expected).tables
    except Exception:
        return 0.0
    if len(t1) != len(t2):
        return 0.0
    for x, y in zip(t1, t2, strict=False):
        if len(x.rows) != len(y.rows) or len(x.columns) != len(y.columns):
            return 0.0
        for i in range(len(x.rows)):
            for j in range(len(x.columns)):
                if x.cell(i, j).text.strip() != y.cell(i, j).text.strip():
                    return 0.0
    return 1.0
