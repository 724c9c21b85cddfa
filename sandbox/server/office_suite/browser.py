"""Browser tasks: bookmarks made in chromium, scored from the Bookmarks file of its profile."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.server.office_suite.common import ADJECTIVES, NAMES, Generated, text_file
from sandbox.server.runtimes.desktop import WORDS

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
    return text_file(f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{title.lower()} page.</p>\n")


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
    "browser-bookmark": browser_bookmark,
    "browser-bookmark-name": browser_bookmark_name,
}
