"""Calc tasks: a sheet of items and quantities; the oracle types cells from A1 by arrow keys, the verifier
compares the saved sheet with the gold one."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.server.office_suite.common import GOLD, ITEMS, NAMES, Generated, file_task


def _sheet(rows: list[list[Any]]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import openpyxl

        wb = openpyxl.Workbook()
        ws = wb.active
        ws.title = "Sheet1"
        for row in rows:
            ws.append(row)
        wb.save(path)

    return write


def _table(rng: random.Random, price: bool = False) -> tuple[str, list[list[Any]]]:
    items = rng.sample(ITEMS, rng.randint(3, 6))
    if price:
        return rng.choice(NAMES), [["Item", "Quantity", "Price"]] + [
            [i, rng.randint(2, 30), rng.randint(1, 20)] for i in items
        ]
    quantities = rng.sample(range(2, 100), len(items))  # distinct: a wrong function never lands on the answer
    return rng.choice(NAMES), [["Item", "Quantity"]] + [
        [i, q] for i, q in zip(items, quantities, strict=True)
    ]


def _calc(
    what: str,
    stem: str,
    rows: list[list[Any]],
    gold: list[list[Any]],
    cells: dict[str, str],
    wrong: dict[str, str],
) -> Generated:
    path, url = f"/home/user/Desktop/{stem}.xlsx", f"{GOLD}{stem}.xlsx"
    rules = {"rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}
    instruction = f"In {stem}.xlsx (open in LibreOffice Calc), {what}, and save the file in its format."
    return Generated(
        file_task(instruction, path, "compare_table", rules, url),
        path,
        {path: _sheet(rows)},
        {url: _sheet(gold)},
        {"cells": cells, "wrong_cells": wrong},
    )


def _summary_row(
    seed: int, task: str, label: str, fn: str, value: Callable[[list[int]], float], wrong_formula: str
) -> Generated:
    """`wrong_formula` over B2:Bn (the quantities, distinct) never equals `fn`'s."""
    rng = random.Random(f"{task}:{seed}")
    stem, rows = _table(rng)
    n = len(rows)
    quantities = [r[1] for r in rows[1:]]
    cells = {f"A{n + 1}": label, f"B{n + 1}": f"={fn}(B2:B{n})"}
    wrong = {f"A{n + 1}": label, f"B{n + 1}": wrong_formula.format(n=n)}
    return _calc(
        f'put the {label.lower()} of the quantities of all items in cell B{n + 1}, with "{label}" in A{n + 1}',
        stem,
        rows,
        [*rows, [label, value(quantities)]],
        cells,
        wrong,
    )


def calc_total(seed: int) -> Generated:
    return _summary_row(
        seed, "calc-total", "Total", "SUM", sum, "=SUM(B2:B{n})-B{n}"
    )  # the last row left out


def calc_average(seed: int) -> Generated:
    return _summary_row(
        seed, "calc-average", "Average", "AVERAGE", lambda q: sum(q) / len(q), "=SUM(B2:B{n})"
    )


def calc_max(seed: int) -> Generated:
    return _summary_row(seed, "calc-max", "Maximum", "MAX", max, "=MIN(B2:B{n})")


def calc_min(seed: int) -> Generated:
    return _summary_row(seed, "calc-min", "Minimum", "MIN", min, "=MAX(B2:B{n})")


def calc_fix_value(seed: int) -> Generated:
    rng = random.Random(f"calc-fix-value:{seed}")
    stem, rows = _table(rng)
    row = rng.randrange(1, len(rows))
    new = rng.choice([v for v in range(2, 100) if v != rows[row][1]])
    gold = [list(r) for r in rows]
    gold[row][1] = new
    other = 1 + (row % (len(rows) - 1))  # another item's row
    return _calc(
        f"the quantity of {rows[row][0]} is wrong: change it to {new}",
        stem,
        rows,
        gold,
        {f"B{row + 1}": str(new)},
        {f"B{other + 1}": str(new)},
    )


def calc_add_row(seed: int) -> Generated:
    rng = random.Random(f"calc-add-row:{seed}")
    stem, rows = _table(rng)
    item = rng.choice([i for i in ITEMS if i not in {r[0] for r in rows}])
    qty, n = rng.randint(2, 99), len(rows)
    return _calc(
        f'add a row after the last one for {qty} {item} (item "{item}", quantity {qty})',
        stem,
        rows,
        [*rows, [item, qty]],
        {f"A{n + 1}": item, f"B{n + 1}": str(qty)},
        {f"A{n + 1}": item, f"B{n + 1}": str(qty + 1)},
    )


def calc_clear_value(seed: int) -> Generated:
    rng = random.Random(f"calc-clear-value:{seed}")
    stem, rows = _table(rng)
    row = rng.randrange(1, len(rows))
    gold = [list(r) for r in rows]
    gold[row][1] = None
    return _calc(
        f"the quantity of {rows[row][0]} is not known: empty its cell",
        stem,
        rows,
        gold,
        {f"B{row + 1}": ""},
        {f"B{row + 1}": "0"},  # a zero is not an empty cell
    )


def calc_rename_header(seed: int) -> Generated:
    rng = random.Random(f"calc-rename-header:{seed}")
    stem, rows = _table(rng)
    new = rng.choice(("Count", "Amount", "Units", "Stock", "Number"))
    gold = [list(r) for r in rows]
    gold[0][1] = new
    return _calc(
        f'rename the column header "Quantity" to "{new}"',
        stem,
        rows,
        gold,
        {"B1": new},
        {"B1": new.lower()},
    )


def calc_line_total(seed: int) -> Generated:
    rng = random.Random(f"calc-line-total:{seed}")
    stem, rows = _table(rng, price=True)
    n = len(rows)
    gold = [[*rows[0], "Total"]] + [[*r, r[1] * r[2]] for r in rows[1:]]
    cells = {"D1": "Total", **{f"D{i}": f"=B{i}*C{i}" for i in range(2, n + 1)}}
    wrong = {"D1": "Total", **{f"D{i}": f"=B{i}*C{i}" for i in range(2, n)}}  # the last item left out
    return _calc(
        'add a column "Total" in D with each item\'s quantity times its price',
        stem,
        rows,
        gold,
        cells,
        wrong,
    )


TASKS: dict[str, Callable[[int], Generated]] = {
    "calc-total": calc_total,
    "calc-average": calc_average,
    "calc-max": calc_max,
    "calc-min": calc_min,
    "calc-fix-value": calc_fix_value,
    "calc-add-row": calc_add_row,
    "calc-clear-value": calc_clear_value,
    "calc-rename-header": calc_rename_header,
    "calc-line-total": calc_line_total,
}
