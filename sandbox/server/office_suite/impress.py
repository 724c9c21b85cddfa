"""Impress tasks: a slide's title changed; the verifier compares the titles and the slide count of the
saved deck with the gold one."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from sandbox.server.office_suite.common import ADJECTIVES, GOLD, NAMES, Generated, file_task
from sandbox.server.runtimes.desktop import WORDS


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
        file_task(instruction, path, "compare_pptx_files", options, url),
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


TASKS: dict[str, Callable[[int], Generated]] = {
    "impress-title": impress_title,
    "impress-title-second": impress_title_second,
    "impress-title-last": impress_title_last,
}
