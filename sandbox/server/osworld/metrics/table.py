"""Spreadsheets: OSWorld's `compare_table`, read from the saved file as OSWorld reads it. Rules:
`sheet_name`, `sheet_data` (each sheet as `pandas.read_excel` reads it: the stored values, the first row as
column labels, pandas' own types; then `DataFrame.round(precision).equals`), `sheet_print` (the CSV a
postconfig exported beside the workbook), `check_cell` (a cell's stored value as the file's XML holds it,
or a style of the formula workbook: CELL_PROPS), `freeze` (the frozen pane's top-left cell) and `zoom`.

Deliberate difference: where OSWorld's function raises (a second sheet or CSV that is missing, a gold file
that is not a workbook), the score is 0.
"""

from __future__ import annotations

import operator
import os
import re
import zipfile
from dataclasses import dataclass
from typing import Any

RULES = frozenset({"sheet_name", "sheet_data", "sheet_print", "check_cell", "freeze", "zoom"})
CELL_PROPS = frozenset(
    {
        "value",
        "merge",
        "fill_type",
        "bgcolor",
        "fgcolor",
        "hyperlink",
        "number_format",
        "font_name",
        "font_family",
        "font_color",
        "font_bold",
        "font_italic",
        "font_underline",
        "font_size",
    }
)
METHODS = ("eq", "ne", "lt", "le", "gt", "ge", "approx:", "re", "str_list_eq", "str_set_eq")
_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"


class _Opaque:
    """A stored value OSWorld reads as a nested dict or list (an XML element with attributes, or repeated):
    equal to nothing, a number to nothing, a text to nothing."""

    def __repr__(self) -> str:
        return "<structured cell XML>"


@dataclass
class _Book:
    path: str
    cells: Any  # openpyxl workbook with formulas (styles, panes, zoom)
    frames: Any  # pandas.ExcelFile (sheet_data)
    names: list[str]  # the worksheets (chart sheets are not among them)

    def close(self) -> None:
        self.frames.close()


def _load(path: str | None) -> _Book | None:
    if not path or not os.path.exists(path):
        return None
    import openpyxl
    import pandas as pd

    try:
        cells = openpyxl.load_workbook(path)
        frames = pd.ExcelFile(path)
    except Exception:
        return None  # not a workbook (or none saved): the attempt failed
    return _Book(path, cells, frames, list(frames.sheet_names))


def _sheet_name(idx: int | str, r: _Book, e: _Book | None) -> tuple[_Book | None, str]:
    """OSWorld's sheet index: an int (result's, by position; negative from the end), "RI0"/"EI0" (result's
    or expected's by position), "RNname"/"ENname" (by name). "" names no sheet."""
    if isinstance(idx, int):
        if idx >= len(r.names):
            return r, ""
        try:
            return r, r.names[idx]
        except IndexError:
            return r, ""
    side, how = idx[:1], idx[1:2]
    if side not in ("R", "E") or how not in ("I", "N"):
        raise ValueError(f"compare_table: sheet index {idx!r} is not RI<n>, RN<name>, EI<n> or EN<name>")
    book = r if side == "R" else e
    if how == "N":
        return book, idx[2:]
    try:
        return book, book.names[int(idx[2:])]  # type: ignore[union-attr]
    except (AttributeError, ValueError, IndexError):
        return book, ""


def _worksheet(book: _Book | None, name: str) -> Any:
    if book is None or name not in book.cells.sheetnames:
        return None
    return book.cells[name]


def _frame(book: _Book | None, name: str) -> Any:
    import pandas as pd

    if book is None:
        return None
    try:
        return pd.read_excel(book.frames, name)
    except Exception:
        return None  # no such sheet


def _printed(book: _Book | None, name: str, ignore_case: bool) -> list[str] | None:
    """A sheet as printed: the CSV the task's postconfig exported beside its workbook (`<book>-<sheet>.csv`,
    UTF-8, else Latin-1), its lines stripped, trailing empty ones dropped. None when absent."""
    if book is None:
        return None
    csv = f"{os.path.splitext(book.path)[0]}-{name}.csv"
    try:
        try:
            with open(csv, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            with open(csv, encoding="latin-1") as f:
                text = f.read()
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return [line.lower() for line in lines] if ignore_case else lines


# -- check_cell ---------------------------------------------------------------------------------------


def _xml_text(el: Any) -> Any:
    """An element's content read as OSWorld's XML-to-dict reading gives it: its text stripped (None when
    blank), or an opaque value when it has attributes or children."""
    if el is None:
        raise KeyError("absent")
    if len(el.attrib) or len(el):
        return _Opaque()
    text = (el.text or "").strip()
    return text or None


def _only(parent: Any, tag: str) -> Any:
    """The one child `tag` of `parent`: KeyError when absent, opaque when repeated."""
    found = parent.findall(_MAIN + tag)
    if not found:
        raise KeyError(tag)
    return _xml_text(found[0]) if len(found) == 1 else _Opaque()


def _shared_strings(z: zipfile.ZipFile) -> list[str]:
    from lxml import etree

    try:
        root = etree.fromstring(z.read("xl/sharedStrings.xml"))
        # Each item's text runs joined (phonetic runs too); a run without text voids the whole table.
        return ["".join(t.text for t in si.iter(_MAIN + "t")) for si in root.findall(_MAIN + "si")]
    except Exception:
        return []


def stored_value(path: str, sheet: str, coordinate: str) -> Any:
    """A cell's value as the file stores it (OSWorld's check_cell `value`): a number as float, a shared,
    inline or formula text, an error code; None for an empty cell, a boolean, a date or an unreadable one."""
    from lxml import etree

    try:
        with zipfile.ZipFile(path) as z:
            shared = _shared_strings(z)
            workbook = etree.fromstring(z.read("xl/workbook.xml"))
            ids = {
                s.get("name"): s.get("sheetId")
                for sheets in workbook.findall(_MAIN + "sheets")
                for s in sheets.findall(_MAIN + "sheet")
            }
            root = etree.fromstring(z.read(f"xl/worksheets/sheet{ids[sheet]}.xml"))
    except Exception:
        return None
    cell = next(
        (c for row in root.iter(_MAIN + "row") for c in row.findall(_MAIN + "c") if c.get("r") == coordinate),
        None,
    )
    if cell is None:
        return None
    kind = cell.get("t")
    try:
        if kind is None or kind == "n":
            return float(_only(cell, "v"))
        if kind == "s":
            return shared[int(_only(cell, "v"))]
        if kind in ("str", "e"):
            return _only(cell, "v")
        if kind == "inlineStr":
            inline = cell.findall(_MAIN + "is")
            return _only(inline[0], "t") if len(inline) == 1 else None
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    return None  # booleans, ISO dates: OSWorld reads no value


def _style(cell: Any, prop: str) -> Any:
    """A style of the formula workbook's cell, as OSWorld reads it: a font or number format of an empty
    cell is None, a formula's number format is None (its type is the formula's)."""
    from openpyxl.cell.cell import MergedCell

    if prop == "merge":
        return isinstance(cell, MergedCell)
    if prop == "hyperlink":
        return cell.hyperlink or ("" if cell.value is not None else None)
    if prop == "fill_type":
        return cell.fill.tagname
    if prop in ("bgcolor", "fgcolor"):
        return cell.fill.fgColor.rgb  # a gradient fill has none: AttributeError, read as None
    if cell.value is None:
        return None
    if prop == "number_format":
        return cell.number_format if cell.data_type == "n" else None
    if prop == "font_color":
        return cell.font.color.rgb
    return getattr(cell.font, prop.removeprefix("font_"))


def cell_prop(book: _Book, sheet: str, cell: Any, coordinate: str, prop: str) -> Any:
    if prop == "value":
        return stored_value(book.path, sheet, coordinate)
    try:
        return _style(cell, prop)
    except Exception:
        return None


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


def _check_cell(r: dict[str, Any], book_r: _Book, book_e: _Book | None) -> bool:
    book, name = _sheet_name(r["sheet_idx"], book_r, book_e)
    ws = _worksheet(book, name)
    if ws is None:
        return False
    try:
        cell = ws[r["coordinate"]]
    except Exception:
        return False  # not a cell's coordinate
    return all(
        match_value(cell_prop(book, name, cell, r["coordinate"], prop), rule)  # type: ignore[arg-type]
        for prop, rule in r["props"].items()
    )


# -- the rules --------------------------------------------------------------------------------------------


def _rule(r: dict[str, Any], book_r: _Book, book_e: _Book | None) -> bool:
    kind = r["type"]
    if kind == "sheet_name":
        return book_e is not None and book_r.names == book_e.names
    if kind == "check_cell":
        return _check_cell(r, book_r, book_e)
    if kind == "zoom":
        ws = _worksheet(*_sheet_name(r["sheet_idx"], book_r, book_e))
        return ws is not None and match_value(ws.sheet_view.zoomScale or 100.0, r)
    a = _sheet_name(r["sheet_idx0"], book_r, book_e)
    b = _sheet_name(r["sheet_idx1"], book_r, book_e)
    if kind == "sheet_data":
        precision = r.get("precision", 4)
        x, y = _frame(*a), _frame(*b)
        return x is not None and y is not None and x.round(precision).equals(y.round(precision))
    if kind == "sheet_print":
        case = bool(r.get("ignore_case", False))
        p, q = _printed(*a, case), _printed(*b, case)
        return p is not None and p == q
    if kind == "freeze":
        s, t = _worksheet(*a), _worksheet(*b)
        return s is not None and t is not None and s.freeze_panes == t.freeze_panes
    raise ValueError(f"compare_table: rule {kind!r} is not supported")


def compare_table(result: str | None, expected: str | None = None, rules: list[dict[str, Any]] = ()) -> float:
    book_r = _load(result)
    if book_r is None:
        return 0.0
    book_e = _load(expected)
    try:
        return float(all(_rule(r, book_r, book_e) for r in rules))
    finally:
        book_r.close()
        if book_e is not None:
            book_e.close()
