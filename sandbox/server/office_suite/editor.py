"""Text editor tasks: a file of words; the oracle retypes it line by line, the verifier compares the
saved text with the gold one."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from sandbox.server.office_suite.common import ADJECTIVES, GOLD, NAMES, Generated, file_task, sample_words
from sandbox.server.runtimes.desktop import WORDS


def _text(lines: list[str]) -> Callable[[Path], None]:
    return lambda path: path.write_text("".join(f"{line}\n" for line in lines))


def _editor(what: str, stem: str, lines: list[str], gold: list[str], wrong: list[str]) -> Generated:
    path, url = f"/home/user/Documents/{stem}.txt", f"{GOLD}{stem}.txt"
    instruction = f"In {stem}.txt (open in the text editor), {what}, and save the file."
    return Generated(
        file_task(instruction, path, "compare_text_file", {"ignore_blanks": True}, url),
        path,
        {path: _text(lines)},
        {url: _text(gold)},
        {"lines": gold, "wrong_lines": wrong},
    )


def editor_append_line(seed: int) -> Generated:
    rng = random.Random(f"editor-append-line:{seed}")
    lines, extra = sample_words(rng), f"{rng.choice(ADJECTIVES)} {rng.choice(WORDS)}"
    return _editor(
        f'add the line "{extra}" at the end', rng.choice(NAMES), lines, [*lines, extra], [extra, *lines]
    )


def editor_sort_lines(seed: int) -> Generated:
    rng = random.Random(f"editor-sort-lines:{seed}")
    lines = sample_words(rng, 4, 6)
    while lines == sorted(lines):
        rng.shuffle(lines)
    return _editor(
        "sort the lines alphabetically", rng.choice(NAMES), lines, sorted(lines), sorted(lines, reverse=True)
    )


def editor_delete_line(seed: int) -> Generated:
    rng = random.Random(f"editor-delete-line:{seed}")
    lines = sample_words(rng, 4, 6)
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
    lines = sample_words(rng)
    k = rng.randrange(len(lines))
    gold, wrong = list(lines), list(lines)
    gold[k] = lines[k].upper()
    wrong[k] = lines[k].capitalize()
    return _editor(f'write the line "{lines[k]}" in capital letters', rng.choice(NAMES), lines, gold, wrong)


def editor_replace_word(seed: int) -> Generated:
    rng = random.Random(f"editor-replace-word:{seed}")
    old, new = rng.sample(WORDS, 2)
    lines = [f"{rng.choice(ADJECTIVES)} {old}" for _ in range(rng.randint(2, 4))] + sample_words(rng, 1, 2)
    gold = [line.replace(old, new) for line in lines]
    return _editor(
        f'replace every "{old}" with "{new}"', rng.choice(NAMES), lines, gold, [gold[0], *lines[1:]]
    )


TASKS: dict[str, Callable[[int], Generated]] = {
    "editor-append-line": editor_append_line,
    "editor-sort-lines": editor_sort_lines,
    "editor-delete-line": editor_delete_line,
    "editor-uppercase": editor_uppercase,
    "editor-replace-word": editor_replace_word,
}
