"""Documents: OSWorld's `compare_docx_files` and `compare_docx_tables`, read with python-docx from the saved
.docx file. Fuzzy scores are OSWorld's: rapidfuzz's `fuzz.ratio` / 100, the Indel similarity
2 * LCS / (len(a) + len(b)) (difflib's greedy matching finds fewer matches and scores lower)."""

from __future__ import annotations

import re
from typing import Any


def _paragraphs(path: str | None) -> list[str] | None:
    import docx

    if not path or not path.endswith(".docx"):
        return None
    try:
        return [p.text for p in docx.Document(path).paragraphs]
    except Exception:
        return None


def _ratio(a: str, b: str) -> float:
    from rapidfuzz import fuzz

    return fuzz.ratio(a, b) / 100.0


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


# -- Writer's single-purpose checks (OSWorld's names and arguments) ---------------------------------------


def _document(path: str | None) -> Any:
    import docx

    if not path:
        return None
    try:
        return docx.Document(path)
    except Exception:
        return None


def _same_text(result: str | None, expected: str | None) -> bool:
    return compare_docx_files(result, expected) == 1.0


def _runs(doc: Any) -> list[Any]:
    return [run for p in doc.paragraphs for run in p.runs]


def compare_line_spacing(result: str | None, expected: str | None) -> float:
    """The same text, and each paragraph's line spacing as in the expected document."""
    a, b = _document(result), _document(expected)
    if a is None or b is None or not _same_text(result, expected) or len(a.paragraphs) != len(b.paragraphs):
        return 0.0
    pairs = zip(a.paragraphs, b.paragraphs, strict=True)
    return float(all(x.paragraph_format.line_spacing == y.paragraph_format.line_spacing for x, y in pairs))


def contains_page_break(result: str | None, rules: dict[str, Any] | None = None) -> float:
    """At least one page break (exactly `page_break_count` when the rules give it)."""
    doc = _document(result)
    if doc is None:
        return 0.0
    from docx.oxml.ns import qn

    breaks = sum(
        1 for run in _runs(doc) for br in run.element.iter(qn("w:br")) if br.get(qn("w:type")) == "page"
    )
    want = (rules or {}).get("page_break_count")
    return float(breaks > 0 and (want is None or breaks == want))


def is_first_line_centered(result: str | None) -> float:
    from docx.enum.text import WD_ALIGN_PARAGRAPH

    doc = _document(result)
    return float(
        doc is not None and bool(doc.paragraphs) and doc.paragraphs[0].alignment == WD_ALIGN_PARAGRAPH.CENTER
    )


def check_italic_font_size_14(result: str | None, expected: str | None) -> float:
    """The same text, and every italic run set in 14 pt."""
    doc = _document(result)
    if doc is None or not _same_text(result, expected):
        return 0.0
    return float(
        all(run.font.size is not None and run.font.size.pt == 14 for run in _runs(doc) if run.italic)
    )


def compare_font_names(result: str | None, rules: dict[str, Any]) -> float:
    """Every run in the font `rules["font_name"]`."""
    doc = _document(result)
    return float(doc is not None and all(run.font.name == rules["font_name"] for run in _runs(doc)))


def has_page_numbers_in_footers(result: str | None) -> float:
    """Each section's footer starts with a paragraph holding a digit (a page number field's last value)."""
    doc = _document(result)
    if doc is None:
        return 0.0
    for section in doc.sections:
        paragraphs = section.footer.paragraphs
        if not paragraphs or not any(ch.isdigit() for ch in paragraphs[0].text):
            return 0.0
    return 1.0


def evaluate_strike_through_last_paragraph(result: str | None, expected: str | None) -> float:
    """The same text, and every run of the last paragraph struck through."""
    doc = _document(result)
    if doc is None or not doc.paragraphs or not _same_text(result, expected):
        return 0.0
    return float(all(run.font.strike for run in doc.paragraphs[-1].runs))
