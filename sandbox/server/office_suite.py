"""The office suite: tasks in LibreOffice Calc, Writer and Impress, generated from a seed as OSWorld tasks.

Each task makes, from its seed, the file the agent edits (values, names and text vary with the seed), the
OSWorld task that opens it and scores the saved result against a gold file, and what the scripted oracle
(sandbox/oracles/office.py) needs. Files are made with openpyxl, python-docx and python-pptx; the
verifiers read what LibreOffice saved (sandbox/server/osworld/metrics), never the screen.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.server.runtimes.desktop import WORDS

GOLD = "https://gold.cua.invalid/"  # the gold files' URLs: made at scoring time, never fetched
ITEMS = ("pens", "paper", "folders", "staples", "tape", "markers", "binders", "clips", "labels", "envelopes")
NAMES = (
    "budget",
    "inventory",
    "orders",
    "supplies",
    "report",
    "summary",
    "plan",
    "notes",
    "minutes",
    "draft",
)
SENTENCE_WORDS = ("green", "quiet", "early", "bright", "small", "round", "warm", "clear", "steady", "gentle")


@dataclass
class Generated:
    osworld: dict[str, Any]  # the task in OSWorld's format
    path: str  # the file the agent edits (OSWorld's /home/user path)
    files: dict[str, Callable[[Path], None]]  # path -> writer, made before `config` runs
    gold: dict[str, Callable[[Path], None]]  # URL -> writer of the expected file, made when scored
    solution: dict[str, Any]  # for the oracle


def _task(instruction: str, path: str, metric: str, options: dict[str, Any], gold_url: str) -> dict[str, Any]:
    name = path.rsplit("/", 1)[-1]
    return {
        "instruction": instruction,
        "config": [{"type": "open", "parameters": {"path": path}}],
        "evaluator": {
            "func": metric,
            "result": {"type": "vm_file", "path": path, "dest": name},
            "expected": {"type": "cloud_file", "path": gold_url, "dest": f"gold-{name}"},
            "options": options,
        },
    }


# -- Calc ----------------------------------------------------------------------------------------------


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


def _table(rng: random.Random) -> tuple[str, list[list[Any]]]:
    items = rng.sample(ITEMS, rng.randint(3, 6))
    return rng.choice(NAMES), [["Item", "Quantity"]] + [[i, rng.randint(2, 99)] for i in items]


def _calc(
    instruction: str, stem: str, rows: list[list[Any]], gold: list[list[Any]], solution: dict[str, Any]
) -> Generated:
    path = f"/home/user/Desktop/{stem}.xlsx"
    url = f"{GOLD}{stem}.xlsx"
    rules = {"rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}
    return Generated(
        _task(instruction, path, "compare_table", rules, url),
        path,
        {path: _sheet(rows)},
        {url: _sheet(gold)},
        solution,
    )


def calc_total(seed: int) -> Generated:
    rng = random.Random(f"calc-total:{seed}")
    stem, rows = _table(rng)
    n = len(rows)
    total = sum(r[1] for r in rows[1:])
    return _calc(
        f"In {stem}.xlsx (open in LibreOffice Calc), put the total quantity of all items in cell B{n + 1}, "
        f'with "Total" in A{n + 1}, and save the file in its format.',
        stem,
        rows,
        [*rows, ["Total", total]],
        {"cells": {f"A{n + 1}": "Total", f"B{n + 1}": f"=SUM(B2:B{n})"}},
    )


def calc_fix_value(seed: int) -> Generated:
    rng = random.Random(f"calc-fix-value:{seed}")
    stem, rows = _table(rng)
    row = rng.randrange(1, len(rows))
    new = rng.choice([v for v in range(2, 100) if v != rows[row][1]])
    gold = [list(r) for r in rows]
    gold[row][1] = new
    return _calc(
        f"In {stem}.xlsx (open in LibreOffice Calc), the quantity of {rows[row][0]} is wrong: change it to {new}, "
        "and save the file in its format.",
        stem,
        rows,
        gold,
        {"cells": {f"B{row + 1}": str(new)}},
    )


def calc_add_row(seed: int) -> Generated:
    rng = random.Random(f"calc-add-row:{seed}")
    stem, rows = _table(rng)
    item = rng.choice([i for i in ITEMS if i not in {r[0] for r in rows}])
    qty = rng.randint(2, 99)
    n = len(rows)
    return _calc(
        f"In {stem}.xlsx (open in LibreOffice Calc), add a row after the last one for {qty} {item} "
        f'(item "{item}", quantity {qty}), and save the file in its format.',
        stem,
        rows,
        [*rows, [item, qty]],
        {"cells": {f"A{n + 1}": item, f"B{n + 1}": str(qty)}},
    )


# -- Writer --------------------------------------------------------------------------------------------


def _doc(paragraphs: list[str]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import docx

        d = docx.Document()
        for p in paragraphs:
            d.add_paragraph(p)
        d.save(path)

    return write


def _sentence(rng: random.Random) -> str:
    words = rng.sample(SENTENCE_WORDS, 2) + rng.sample(WORDS, 2)
    return f"The {words[0]} {words[2]} and the {words[1]} {words[3]} wait for {rng.randint(2, 99)} days."


def _writer(
    instruction: str, stem: str, paras: list[str], gold: list[str], solution: dict[str, Any]
) -> Generated:
    path = f"/home/user/Documents/{stem}.docx"
    url = f"{GOLD}{stem}.docx"
    return Generated(
        _task(instruction, path, "compare_docx_files", {}, url),
        path,
        {path: _doc(paras)},
        {url: _doc(gold)},
        {"paragraphs": gold, **solution},
    )


def writer_append(seed: int) -> Generated:
    rng = random.Random(f"writer-append:{seed}")
    stem, paras, extra = rng.choice(NAMES), [_sentence(rng) for _ in range(rng.randint(2, 4))], _sentence(rng)
    return _writer(
        f'In {stem}.docx (open in LibreOffice Writer), add a last paragraph that reads exactly "{extra}", '
        "and save the file in its format.",
        stem,
        paras,
        [*paras, extra],
        {"append": extra},
    )


def writer_title(seed: int) -> Generated:
    rng = random.Random(f"writer-title:{seed}")
    stem, paras = rng.choice(NAMES), [_sentence(rng) for _ in range(rng.randint(2, 4))]
    title = f"{rng.choice(SENTENCE_WORDS).capitalize()} {rng.choice(WORDS)} {stem}"
    return _writer(
        f'In {stem}.docx (open in LibreOffice Writer), insert a new first paragraph that reads exactly "{title}", '
        "and save the file in its format.",
        stem,
        paras,
        [title, *paras],
        {"prepend": title},
    )


def writer_replace_word(seed: int) -> Generated:
    rng = random.Random(f"writer-replace-word:{seed}")
    stem = rng.choice(NAMES)
    old, new = rng.sample([w for w in WORDS if len(w) > 4], 2)
    paras = [_sentence(rng).replace("wait", f"{old} wait") for _ in range(rng.randint(2, 4))]
    return _writer(
        f'In {stem}.docx (open in LibreOffice Writer), replace every "{old}" with "{new}", and save the file in '
        "its format.",
        stem,
        paras,
        [p.replace(old, new) for p in paras],
        {"old": old, "new": new},
    )


# -- Impress -------------------------------------------------------------------------------------------


def _deck(titles: list[str]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        from pptx import Presentation

        prs = Presentation()
        for t in titles:
            slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
            slide.shapes.title.text = t
        prs.save(path)

    return write


def _impress(
    instruction: str, stem: str, titles: list[str], gold: list[str], solution: dict[str, Any]
) -> Generated:
    path = f"/home/user/Desktop/{stem}.pptx"
    url = f"{GOLD}{stem}.pptx"
    # The titles' text and the slide count: LibreOffice rewrites positions and run properties on save.
    options = {
        "examine_shape": False,
        **{
            k: False
            for k in (
                "examine_font_name",
                "examine_font_size",
                "examine_font_bold",
                "examine_font_italic",
                "examine_font_underline",
                "examine_color_rgb",
                "examine_strike_through",
                "examine_alignment",
                "examine_run_count",
            )
        },
    }
    return Generated(
        _task(instruction, path, "compare_pptx_files", options, url),
        path,
        {path: _deck(titles)},
        {url: _deck(gold)},
        {"titles": titles, **solution},
    )


def _titles(rng: random.Random) -> list[str]:
    return [f"{rng.choice(SENTENCE_WORDS).capitalize()} {w}" for w in rng.sample(WORDS, rng.randint(2, 4))]


def impress_title(seed: int) -> Generated:
    rng = random.Random(f"impress-title:{seed}")
    stem, titles = rng.choice(NAMES), _titles(rng)
    new = f"{rng.choice(SENTENCE_WORDS).capitalize()} {rng.choice(WORDS)} {rng.randint(2, 99)}"
    return _impress(
        f'In {stem}.pptx (open in LibreOffice Impress), change the title of the first slide to "{new}", and save '
        "the file in its format.",
        stem,
        titles,
        [new, *titles[1:]],
        {"slide": 0, "title": new},
    )


TASKS: dict[str, Callable[[int], Generated]] = {
    "calc-total": calc_total,
    "calc-fix-value": calc_fix_value,
    "calc-add-row": calc_add_row,
    "writer-append": writer_append,
    "writer-title": writer_title,
    "writer-replace-word": writer_replace_word,
    "impress-title": impress_title,
}
