"""Writer tasks: a document of seeded sentences; the oracle retypes it paragraph by paragraph, the
verifier compares the saved document with the gold one."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from sandbox.server.office_suite.common import ADJECTIVES, GOLD, NAMES, Generated, file_task
from sandbox.server.runtimes.desktop import WORDS


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
        file_task(instruction, path, "compare_docx_files", {}, url),
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


TASKS: dict[str, Callable[[int], Generated]] = {
    "writer-append": writer_append,
    "writer-title": writer_title,
    "writer-replace-word": writer_replace_word,
    "writer-delete-paragraph": writer_delete_paragraph,
    "writer-swap-paragraphs": writer_swap_paragraphs,
    "writer-fix-number": writer_fix_number,
    "writer-uppercase": writer_uppercase,
}
