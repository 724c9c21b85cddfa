"""The office suite: tasks in LibreOffice Calc, Writer and Impress, the text editor, the terminal and the
browser, generated from a seed as OSWorld tasks.

Each task makes, from its seed, the file the agent edits (values, names and text vary with the seed), the
OSWorld task that opens it and scores the result, and what the scripted oracles need: the edit that solves
it and a plausible wrong one (sandbox/oracles/office.py). Files are made with openpyxl, python-docx and
python-pptx; the verifiers read what the application saved, its profile (the browser's bookmarks) or what is on disk
(sandbox/server/osworld/metrics), never the screen. A gold file is made only when the episode is scored.
"""

from __future__ import annotations

import random
import shlex
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
ADJECTIVES = ("green", "quiet", "early", "bright", "small", "round", "warm", "clear", "steady", "gentle")


@dataclass
class Generated:
    osworld: dict[str, Any]  # the task in OSWorld's format
    path: str  # the file the agent edits, or the folder it works in (OSWorld's /home/user path)
    files: dict[str, Callable[[Path], None]]  # path -> writer, made before `config` runs
    gold: dict[str, Callable[[Path], None]]  # URL -> writer of the expected file, made when scored
    solution: dict[str, Any]  # for the oracles: the right edit and a wrong one, in the app's terms


def _file_task(
    instruction: str, path: str, metric: str, options: dict[str, Any], gold_url: str
) -> dict[str, Any]:
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


# -- Calc: cells typed from A1 by arrow keys ------------------------------------------------------------


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
        _file_task(instruction, path, "compare_table", rules, url),
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


# -- Writer: the document retyped paragraph by paragraph ------------------------------------------------


def _doc(paragraphs: list[str]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import docx

        d = docx.Document()
        for p in paragraphs:
            d.add_paragraph(p)
        d.save(path)

    return write


def _sentence(rng: random.Random) -> str:
    adj, nouns = rng.sample(ADJECTIVES, 2), rng.sample(WORDS, 2)
    return f"The {adj[0]} {nouns[0]} and the {adj[1]} {nouns[1]} wait for {rng.randint(2, 99)} days."


def _writer(what: str, stem: str, paras: list[str], gold: list[str], wrong: list[str]) -> Generated:
    path, url = f"/home/user/Documents/{stem}.docx", f"{GOLD}{stem}.docx"
    instruction = f"In {stem}.docx (open in LibreOffice Writer), {what}, and save the file in its format."
    return Generated(
        _file_task(instruction, path, "compare_docx_files", {}, url),
        path,
        {path: _doc(paras)},
        {url: _doc(gold)},
        {"paragraphs": gold, "wrong_paragraphs": wrong},
    )


def _paragraphs(rng: random.Random, lo: int = 2, hi: int = 4) -> tuple[str, list[str]]:
    return rng.choice(NAMES), [_sentence(rng) for _ in range(rng.randint(lo, hi))]


def writer_append(seed: int) -> Generated:
    rng = random.Random(f"writer-append:{seed}")
    (stem, paras), extra = _paragraphs(rng), _sentence(rng)
    return _writer(
        f'add a last paragraph that reads exactly "{extra}"', stem, paras, [*paras, extra], [extra, *paras]
    )


def writer_title(seed: int) -> Generated:
    rng = random.Random(f"writer-title:{seed}")
    stem, paras = _paragraphs(rng)
    title = f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(WORDS)} {stem}"
    return _writer(
        f'insert a new first paragraph that reads exactly "{title}"',
        stem,
        paras,
        [title, *paras],
        [*paras, title],
    )


def writer_replace_word(seed: int) -> Generated:
    rng = random.Random(f"writer-replace-word:{seed}")
    stem = rng.choice(NAMES)
    old, new = rng.sample([w for w in WORDS if len(w) > 4], 2)
    paras = [_sentence(rng).replace("wait", f"{old} wait") for _ in range(rng.randint(2, 4))]
    gold = [p.replace(old, new) for p in paras]
    return _writer(f'replace every "{old}" with "{new}"', stem, paras, gold, [gold[0], *paras[1:]])


def writer_delete_paragraph(seed: int) -> Generated:
    rng = random.Random(f"writer-delete-paragraph:{seed}")
    stem, paras = _paragraphs(rng, 3, 5)
    k = rng.randrange(len(paras))
    ordinal = ("first", "second", "third", "fourth", "fifth")[k]
    j = (k + 1) % len(paras)  # the wrong attempt deletes its neighbour
    return _writer(
        f"delete the {ordinal} paragraph", stem, paras, paras[:k] + paras[k + 1 :], paras[:j] + paras[j + 1 :]
    )


def writer_swap_paragraphs(seed: int) -> Generated:
    rng = random.Random(f"writer-swap-paragraphs:{seed}")
    stem, paras = _paragraphs(rng, 3, 4)
    gold = [paras[1], paras[0], *paras[2:]]
    return _writer(
        "swap the first two paragraphs", stem, paras, gold, [paras[0], paras[2], paras[1], *paras[3:]]
    )


def writer_fix_number(seed: int) -> Generated:
    rng = random.Random(f"writer-fix-number:{seed}")
    stem, paras = _paragraphs(rng)
    k = rng.randrange(len(paras))
    old = paras[k].split(" for ")[1].split()[0]
    new = str(rng.choice([v for v in range(2, 100) if str(v) != old]))
    gold = list(paras)
    gold[k] = paras[k].replace(f"for {old} days", f"for {new} days")
    wrong = list(gold)
    wrong[k] = paras[k].replace(f"for {old} days", f"for {new} weeks")
    return _writer(
        f'the {("first", "second", "third", "fourth")[k]} paragraph should say "{new} days", not "{old} days": '
        "correct it",
        stem,
        paras,
        gold,
        wrong,
    )


def writer_uppercase(seed: int) -> Generated:
    rng = random.Random(f"writer-uppercase:{seed}")
    stem, paras = _paragraphs(rng)
    k = rng.randrange(len(paras))
    gold, wrong = list(paras), list(paras)
    gold[k], wrong[k] = paras[k].upper(), paras[k].title()
    ordinal = ("first", "second", "third", "fourth")[k]
    return _writer(f"write the {ordinal} paragraph in capital letters", stem, paras, gold, wrong)


# -- Impress: a slide's title --------------------------------------------------------------------------


def _deck(titles: list[str]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        from pptx import Presentation

        prs = Presentation()
        for t in titles:
            slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
            slide.shapes.title.text = t
        prs.save(path)

    return write


def _retitle(seed: int, task: str, which: Callable[[int], int]) -> Generated:
    rng = random.Random(f"{task}:{seed}")
    stem = rng.choice(NAMES)
    titles = [f"{rng.choice(ADJECTIVES).capitalize()} {w}" for w in rng.sample(WORDS, rng.randint(2, 4))]
    k = which(len(titles))
    new = f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(WORDS)} {rng.randint(2, 99)}"
    gold = list(titles)
    gold[k] = new
    path, url = f"/home/user/Desktop/{stem}.pptx", f"{GOLD}{stem}.pptx"
    # The titles' text and the slide count: LibreOffice rewrites positions and run properties on save, and
    # writes each slide's background where the python-pptx gold inherits its master's (OSWorld's
    # compare_pptx_files gives 0 on that pair too; its golds are LibreOffice's own).
    checks = (
        "background_color",
        "shape",
        "font_name",
        "font_size",
        "font_bold",
        "font_italic",
        "font_underline",
        "color_rgb",
        "strike_through",
        "alignment",
        "run_count",
    )
    options = {f"examine_{c}": False for c in checks}
    ordinal = "the last slide" if k == len(titles) - 1 and k else f"slide {k + 1}"
    instruction = (
        f'In {stem}.pptx (open in LibreOffice Impress), change the title of {ordinal} to "{new}", and save the '
        "file in its format."
    )
    return Generated(
        _file_task(instruction, path, "compare_pptx_files", options, url),
        path,
        {path: _deck(titles)},
        {url: _deck(gold)},
        {
            "slide": k,
            "title": new,
            "wrong_slide": k,
            "wrong_title": f"{titles[k]} {new}",
        },  # typed after, not over
    )


def impress_title(seed: int) -> Generated:
    return _retitle(seed, "impress-title", lambda n: 0)


def impress_title_second(seed: int) -> Generated:
    return _retitle(seed, "impress-title-second", lambda n: 1)


def impress_title_last(seed: int) -> Generated:
    return _retitle(seed, "impress-title-last", lambda n: n - 1)


# -- The text editor: the file retyped line by line -----------------------------------------------------


def _text(lines: list[str]) -> Callable[[Path], None]:
    return lambda path: path.write_text("".join(f"{line}\n" for line in lines))


def _editor(what: str, stem: str, lines: list[str], gold: list[str], wrong: list[str]) -> Generated:
    path, url = f"/home/user/Documents/{stem}.txt", f"{GOLD}{stem}.txt"
    instruction = f"In {stem}.txt (open in the text editor), {what}, and save the file."
    return Generated(
        _file_task(instruction, path, "compare_text_file", {"ignore_blanks": True}, url),
        path,
        {path: _text(lines)},
        {url: _text(gold)},
        {"lines": gold, "wrong_lines": wrong},
    )


def _words(rng: random.Random, lo: int = 3, hi: int = 6) -> list[str]:
    return rng.sample(WORDS, rng.randint(lo, hi))


def editor_append_line(seed: int) -> Generated:
    rng = random.Random(f"editor-append-line:{seed}")
    lines, extra = _words(rng), f"{rng.choice(ADJECTIVES)} {rng.choice(WORDS)}"
    return _editor(
        f'add the line "{extra}" at the end', rng.choice(NAMES), lines, [*lines, extra], [extra, *lines]
    )


def editor_sort_lines(seed: int) -> Generated:
    rng = random.Random(f"editor-sort-lines:{seed}")
    lines = _words(rng, 4, 6)
    while lines == sorted(lines):
        rng.shuffle(lines)
    return _editor(
        "sort the lines alphabetically", rng.choice(NAMES), lines, sorted(lines), sorted(lines, reverse=True)
    )


def editor_delete_line(seed: int) -> Generated:
    rng = random.Random(f"editor-delete-line:{seed}")
    lines = _words(rng, 4, 6)
    k = rng.randrange(len(lines))
    other = (k + 1) % len(lines)
    return _editor(
        f'delete the line "{lines[k]}"',
        rng.choice(NAMES),
        lines,
        lines[:k] + lines[k + 1 :],
        lines[:other] + lines[other + 1 :],
    )


def editor_uppercase(seed: int) -> Generated:
    rng = random.Random(f"editor-uppercase:{seed}")
    lines = _words(rng)
    k = rng.randrange(len(lines))
    gold, wrong = list(lines), list(lines)
    gold[k] = lines[k].upper()
    wrong[k] = lines[k].capitalize()
    return _editor(f'write the line "{lines[k]}" in capital letters', rng.choice(NAMES), lines, gold, wrong)


def editor_replace_word(seed: int) -> Generated:
    rng = random.Random(f"editor-replace-word:{seed}")
    old, new = rng.sample(WORDS, 2)
    lines = [f"{rng.choice(ADJECTIVES)} {old}" for _ in range(rng.randint(2, 4))] + _words(rng, 1, 2)
    gold = [line.replace(old, new) for line in lines]
    return _editor(
        f'replace every "{old}" with "{new}"', rng.choice(NAMES), lines, gold, [gold[0], *lines[1:]]
    )


# -- The terminal: commands typed at a shell; scored from the file system --------------------------------


def _text_file(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _terminal(
    what: str,
    work: str,
    files: dict[str, str],
    check: str,
    include: list[str],
    exclude: list[str],
    commands: list[str],
    wrong: list[str],
) -> Generated:
    """`check` (a shell command) lists what the task leaves behind; its output must hold every `include`
    and no `exclude` line."""
    task = {
        "instruction": f"Using the terminal, {what}.",
        "config": [
            {
                "type": "launch",
                "parameters": {
                    "command": [
                        "xterm",
                        "-T",
                        "Terminal",
                        "-fa",
                        "DejaVu Sans Mono",
                        "-fs",
                        "12",
                        "-e",
                        "bash",
                        "--norc",
                    ]
                },
            },
            {"type": "sleep", "parameters": {"seconds": 1}},
        ],
        "evaluator": {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": check, "shell": True},
            "expected": {"type": "rule", "rules": {"include": include, "exclude": exclude}},
        },
    }
    writers = {f"{work}/{name}": _text_file(text) for name, text in files.items()}
    if not files:
        writers = {f"{work}/.keep": lambda p: p.write_text("")}
    return Generated(task, work, writers, {}, {"commands": commands, "wrong_commands": wrong})


def terminal_mkdir(seed: int) -> Generated:
    rng = random.Random(f"terminal-mkdir:{seed}")
    work, name = "/home/user/work", f"{rng.choice(WORDS)}-{rng.randint(10, 99)}"
    return _terminal(
        f"create a folder named {name} in {work}",
        work,
        {},
        f"cd {work} && find . -mindepth 1 -type d",
        [f"./{name}\n"],
        [],
        [f"mkdir {work}/{name}"],
        [f"touch {work}/{name}"],  # a file, not a folder
    )


def terminal_rename(seed: int) -> Generated:
    rng = random.Random(f"terminal-rename:{seed}")
    work = "/home/user/work"
    old, new = (f"{w}.txt" for w in rng.sample(WORDS, 2))
    return _terminal(
        f"rename the file {old} in {work} to {new}",
        work,
        {old: f"{rng.choice(WORDS)}\n"},
        f"ls -1 {work}",
        [f"{new}\n"],
        [f"{old}\n"],
        [f"mv {work}/{old} {work}/{new}"],
        [f"cp {work}/{old} {work}/{new}"],
    )


def terminal_count_lines(seed: int) -> Generated:
    rng = random.Random(f"terminal-count-lines:{seed}")
    work, lines = "/home/user/work", _words(rng, 3, 9)
    return _terminal(
        f"write the number of lines of data.txt in {work} into a new file count.txt there (just the number)",
        work,
        {"data.txt": "".join(f"{w}\n" for w in lines)},
        f"cat {work}/count.txt | tr -d ' \\n'; echo",
        [f"{len(lines)}\n"],
        [],
        [f"wc -l < {work}/data.txt > {work}/count.txt"],
        [f"wc -w {work}/data.txt > {work}/count.txt"],  # with the file name after the number
    )


def terminal_copy(seed: int) -> Generated:
    rng = random.Random(f"terminal-copy:{seed}")
    work, name, folder = "/home/user/work", f"{rng.choice(WORDS)}.txt", rng.choice(NAMES)
    return _terminal(
        f"copy the file {name} in {work} into a new folder {work}/{folder}",
        work,
        {name: "keep me\n"},
        f"cd {work} && find . -type f | sort",
        [f"./{name}\n", f"./{folder}/{name}\n"],
        [],
        [f"mkdir {work}/{folder} && cp {work}/{name} {work}/{folder}/"],
        [f"mkdir {work}/{folder} && mv {work}/{name} {work}/{folder}/"],  # moved: the original is gone
    )


def terminal_write_file(seed: int) -> Generated:
    rng = random.Random(f"terminal-write-file:{seed}")
    work, name, text = "/home/user/work", f"{rng.choice(WORDS)}.txt", " ".join(rng.sample(WORDS, 3))
    return _terminal(
        f'create the file {name} in {work} containing the line "{text}"',
        work,
        {},
        f"cat {work}/{name}",
        [f"{text}\n"],
        [],
        [f"echo {shlex.quote(text)} > {work}/{name}"],
        [f"echo {shlex.quote(text.upper())} > {work}/{name}"],
    )


def terminal_delete_file(seed: int) -> Generated:
    rng = random.Random(f"terminal-delete-file:{seed}")
    work = "/home/user/work"
    names = [f"{w}.txt" for w in rng.sample(WORDS, 3)]
    gone, kept = names[0], names[1:]
    return _terminal(
        f"delete the file {gone} in {work}, and nothing else",
        work,
        {n: "x\n" for n in names},
        f"ls -1 {work}",
        [f"{n}\n" for n in kept],
        [f"{gone}\n"],
        [f"rm {work}/{gone}"],
        [f"rm {work}/{kept[0]}"],
    )


# -- The browser: chromium's own bookmarks, read from its profile -----------------------------------------

BROWSER = [
    "chromium", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
    "--disable-features=Translate,MediaRouter", "--password-store=basic", "--force-device-scale-factor=1",
    "--disable-session-crashed-bubble",
]  # fmt: skip
BOOKMARKS = "/home/user/.config/chromium/Default/Bookmarks"
# Every bookmark as "name|url" lines (chromium writes its profile's Bookmarks file as JSON).
LIST_BOOKMARKS = (
    "python3 -c 'import json,sys\n"
    "def walk(n):\n"
    ' if n.get("type") == "url": print(n["name"] + "|" + n["url"])\n'
    ' for c in n.get("children", []): walk(c)\n'
    'for root in json.load(open(sys.argv[1]))["roots"].values(): walk(root)\' ' + BOOKMARKS
)


def _page(title: str) -> Callable[[Path], None]:
    return _text_file(f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{title.lower()} page.</p>\n")


def _browser(what: str, pages: dict[str, str], include: list[str], solution: dict[str, Any]) -> Generated:
    """`pages`: {file stem: title} under ~/Documents; the first is open. The check lists the bookmarks."""
    first = next(iter(pages))
    task = {
        "instruction": f"In the browser, {what}.",
        "config": [
            {
                "type": "launch",
                "parameters": {"command": [*BROWSER, f"file:///home/user/Documents/{first}.html"]},
            },
            {"type": "sleep", "parameters": {"seconds": 2}},
        ],
        "evaluator": {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": LIST_BOOKMARKS, "shell": True},
            "expected": {"type": "rule", "rules": {"include": include, "exclude": []}},
        },
    }
    files = {f"/home/user/Documents/{stem}.html": _page(title) for stem, title in pages.items()}
    return Generated(task, BOOKMARKS, files, {}, {"title": pages[first], **solution})


def _two_pages(rng: random.Random) -> dict[str, str]:
    stems = rng.sample(NAMES, 2)
    return {stem: f"{rng.choice(ADJECTIVES).capitalize()} {stem}" for stem in stems}


def browser_bookmark(seed: int) -> Generated:
    rng = random.Random(f"browser-bookmark:{seed}")
    pages = _two_pages(rng)
    first, other = pages
    return _browser(
        "bookmark the page that is open",
        pages,
        [f"/Documents/{first}.html\n"],
        {
            "url": None,
            "name": None,
            "wrong_url": f"file:///home/user/Documents/{other}.html",
            "wrong_name": None,
        },
    )


def browser_bookmark_name(seed: int) -> Generated:
    rng = random.Random(f"browser-bookmark-name:{seed}")
    pages = _two_pages(rng)
    first = next(iter(pages))
    name = f"{rng.choice(WORDS).capitalize()} {rng.randint(2, 99)}"
    return _browser(
        f'bookmark the page that is open under the name "{name}"',
        pages,
        [f"{name}|file://", f"/{first}.html\n"],
        {"url": None, "name": name, "wrong_url": None, "wrong_name": None},  # wrong: the page's own title
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
    "writer-append": writer_append,
    "writer-title": writer_title,
    "writer-replace-word": writer_replace_word,
    "writer-delete-paragraph": writer_delete_paragraph,
    "writer-swap-paragraphs": writer_swap_paragraphs,
    "writer-fix-number": writer_fix_number,
    "writer-uppercase": writer_uppercase,
    "impress-title": impress_title,
    "impress-title-second": impress_title_second,
    "impress-title-last": impress_title_last,
    "editor-append-line": editor_append_line,
    "editor-sort-lines": editor_sort_lines,
    "editor-delete-line": editor_delete_line,
    "editor-uppercase": editor_uppercase,
    "editor-replace-word": editor_replace_word,
    "terminal-mkdir": terminal_mkdir,
    "terminal-rename": terminal_rename,
    "terminal-count-lines": terminal_count_lines,
    "terminal-copy": terminal_copy,
    "terminal-write-file": terminal_write_file,
    "terminal-delete-file": terminal_delete_file,
    "browser-bookmark": browser_bookmark,
    "browser-bookmark-name": browser_bookmark_name,
}
