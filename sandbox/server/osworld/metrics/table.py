"""Spreadsheets: OSWorld's `compare_table`, read with openpyxl from the saved file. Rules: `sheet_name`,
`sheet_data` (values the application stored with the file: a formula's cached result, as OSWorld's pandas
reading gives), `check_cell` (the value, or a style: CELL_PROPS), `freeze` (the frozen rows and columns,
not the scroll position) and `zoom`."""

from __future__ import annotations

import operator
import os
import re
from typing import Any

RULES = frozenset({"sheet_name", "sheet_data", "sheet_print", "check_cell", "freeze", "zoom"})
# A cell's style as OSWorld reads it; a style of an empty cell reads as None ("merge" and the fill apart).
_STYLES = {
    "number_format": lambda c: c.number_format if c.data_type == "n" else None,
    "font_name": lambda c: c.font.name,
    "font_family": lambda c: c.font.family,
    "font_color": lambda c: c.font.color.rgb if c.font.color is not None else None,
    "font_bold": lambda c: c.font.bold,
    "font_italic": lambda c: c.font.italic,
    "font_underline": lambda c: c.font.underline,
    "font_size": lambda c: c.font.size,
    "hyperlink": lambda c: c.hyperlink or "",
}
CELL_PROPS = frozenset({"value", "merge", "fill_type", "bgcolor", "fgcolor", *_STYLES})
METHODS = ("eq", "ne", "lt", "le", "gt", "ge", "approx:", "re", "str_list_eq", "str_set_eq")


def _load(path: str | None) -> Any:
    import openpyxl

    if not path:
        return None
    try:
        return openpyxl.load_workbook(path, data_only=True)
    except Exception:
        return None  # not a workbook (or none saved): the attempt failed


def _sheet(idx: int | str, result: Any, expected: Any) -> Any:
    """OSWorld's sheet index: 0 (result's first), "RI0"/"EI0" (result/expected by position),
    "RNname"/"ENname" (by name). None when absent."""
    if isinstance(idx, int):
        book, key = result, idx
    else:
        book = result if idx[0] == "R" else expected
        key = int(idx[2:]) if idx[1] == "I" else idx[2:]
    if book is None:
        return None
    names = book.sheetnames
    if isinstance(key, int):
        return book[names[key]] if 0 <= key < len(names) else None
    return book[key] if key in names else None


def _printed(
    idx: int | str, result: str, expected: str | None, book_r: Any, book_e: Any, ignore_case: bool
) -> Any:
    """A sheet as printed: the CSV the task's postconfig exported beside its workbook (`<book>-<sheet>.csv`),
    its lines stripped, trailing empty ones dropped. None when absent."""
    ws = _sheet(idx, book_r, book_e)
    path = result if ws is not None and ws.parent is book_r else expected
    if ws is None or path is None:
        return None
    try:
        with open(f"{os.path.splitext(path)[0]}-{ws.title}.csv", encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f.read().splitlines()]
    except OSError:
        return None
    while lines and not lines[-1]:
        lines.pop()
    return [line.lower() for line in lines] if ignore_case else lines


def _rows(ws: Any, precision: int) -> list[tuple[Any, ...]]:
    rows = []
    for row in ws.iter_rows(values_only=True):
        rows.append(tuple(round(v, precision) if isinstance(v, float) else v for v in row))
    while rows and all(v is None for v in rows[-1]):  # the used range may end in empty rows
        rows.pop()
    width = max((max((i + 1 for i, v in enumerate(r) if v is not None), default=0) for r in rows), default=0)
    return [tuple(r[:width]) + (None,) * (width - len(r[:width])) for r in rows]


def cell_prop(cell: Any, prop: str) -> Any:
    from openpyxl.cell.cell import MergedCell

    if prop == "value":
        return cell.value
    if prop == "merge":
        return isinstance(cell, MergedCell)
    if prop == "fill_type":
        return getattr(cell.fill, "tagname", None)
    if prop in ("bgcolor", "fgcolor"):
        return getattr(cell.fill.fgColor, "rgb", None)
    return _STYLES[prop](cell) if cell.value is not None else None


def _freeze_key(ws: Any) -> tuple[Any, ...]:
    """The frozen rows and columns; a pane's top-left cell moves with scrolling, so it is not compared."""
    pane = ws.sheet_view.pane
    if pane is None:
        return ("none",)
    xs, ys = int(pane.xSplit or 0), int(pane.ySplit or 0)
    if (pane.state or "").lower() in ("frozen", "frozensplit"):
        return ("frozen", xs, ys)
    return ("other", xs, ys, pane.topLeftCell)


def match_value(value: Any, rule: dict[str, Any]) -> bool:
    method, ref = rule["method"], rule.get("ref")
    if method.startswith("re"):
        flags = 0
        for flag in method.split(".")[1:]:
            flags |= getattr(re, flag)
        return isinstance(value, str) and re.search(ref, value, flags) is not None
    if method in ("eq", "ne", "lt", "le", "gt", "ge"):
        try:
            return bool(getattr(operator, method)(value, ref))
        except TypeError:
            return False
    if method.startswith("approx:"):
        try:
            return abs(float(value) - ref) <= float(method.split(":")[1])
        except (TypeError, ValueError):
            return False
    if method in ("str_list_eq", "str_set_eq"):
        kind = list if method == "str_list_eq" else set
        return isinstance(value, str) and kind(value.strip("\"'").split(",")) == kind(ref)
    raise ValueError(f"check_cell: method {method!r} is not supported")


def compare_table(result: str | None, expected: str | None = None, rules: list[dict[str, Any]] = ()) -> float:
    book_r = _load(result)
    if book_r is None:
        return 0.0
    book_e = _load(expected)
    for r in rules:
        kind = r["type"]
        if kind == "sheet_name":
            ok = book_e is not None and book_r.sheetnames == book_e.sheetnames
        elif kind == "sheet_data":
            a, b = _sheet(r["sheet_idx0"], book_r, book_e), _sheet(r["sheet_idx1"], book_r, book_e)
            precision = r.get("precision", 4)
            ok = a is not None and b is not None and _rows(a, precision) == _rows(b, precision)
        elif kind == "sheet_print":
            case = bool(r.get("ignore_case", False))
            a = _printed(r["sheet_idx0"], result, expected, book_r, book_e, case)  # type: ignore[arg-type]
            b = _printed(r["sheet_idx1"], result, expected, book_r, book_e, case)  # type: ignore[arg-type]
            ok = a is not None and a == b
        elif kind == "check_cell":
            ws = _sheet(r["sheet_idx"], book_r, book_e)
            ok = ws is not None and all(
                match_value(cell_prop(ws[r["coordinate"]], prop), rule) for prop, rule in r["props"].items()
            )
        elif kind == "freeze":
            a, b = _sheet(r["sheet_idx0"], book_r, book_e), _sheet(r["sheet_idx1"], book_r, book_e)
            ok = a is not None and b is not None and _freeze_key(a) == _freeze_key(b)
        elif kind == "zoom":
            ws = _sheet(r["sheet_idx"], book_r, book_e)
            ok = ws is not None and match_value(ws.sheet_view.zoomScale or 100.0, r)
        else:
            raise ValueError(f"compare_table: rule {kind!r} is not supported")
        if not ok:
            return 0.0
    return 1.0
