"""What every application's tasks share: the generated task, the OSWorld task that opens and scores one
file, and the seeded vocabulary the files are made of."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.server.words import WORDS

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


def file_task(
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


def text_file(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def sample_words(rng: random.Random, lo: int = 3, hi: int = 6) -> list[str]:
    return rng.sample(WORDS, rng.randint(lo, hi))
