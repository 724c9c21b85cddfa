"""A run's or an evaluation's recorded episodes, read as they are written.

Each rollouts file is scanned once into a small summary per episode and then again only from where the
last scan stopped, so a run in progress shows its new episodes on reload and a large run is never held in
memory: an episode's turns are read from its byte offset when a page shows it. A line that is not a JSON
episode (a torn write, a hand edit) is skipped and counted, with its line number, instead of failing the
page."""

from __future__ import annotations

import json
import logging
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cua_agent.rollout.outcomes import reward_succeeded

log = logging.getLogger(__name__)

EPISODE_ID = re.compile(r"^[0-9a-f]{6,64}$")  # the recorder's uuid4 prefixes: safe as a path part


@dataclass(frozen=True)
class EpisodeSummary:
    source: str  # the rollouts file it came from, relative to the run's folder
    offset: int  # byte offset of its line
    episode: str
    group: str  # the GRPO group; an evaluation's episode is a group of its own
    task_id: str
    seed: int | None
    status: str
    task_reward: float | None
    advantage: float | None
    turns: int
    format_failures: int
    versions: tuple[int, ...]  # weight versions that produced its turns
    time: float  # when it was recorded

    @property
    def success(self) -> bool:
        return reward_succeeded(self.task_reward)


@dataclass
class RolloutsFile:
    path: Path
    name: str
    episodes: list[EpisodeSummary] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # line numbers that were not episodes
    _pos: int = 0
    _lines: int = 0

    def refresh(self) -> None:
        """Read the lines appended since the last call; a last line without its newline is still being
        written and waits for the next call."""
        if not self.path.is_file():
            return
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            while True:
                offset = f.tell()
                line = f.readline()
                if not line.endswith(b"\n"):
                    break
                self._pos = f.tell()
                self._lines += 1
                summary = self._summary(line, offset)
                if summary is None:
                    self.skipped.append(self._lines)
                    log.warning("%s:%d: not an episode record, skipped", self.path, self._lines)
                else:
                    self.episodes.append(summary)

    def _summary(self, line: bytes, offset: int) -> EpisodeSummary | None:
        try:
            r = json.loads(line)
            episode = str(r["episode"])
            if not EPISODE_ID.match(episode):
                return None
            turns = r.get("turns") or []
            return EpisodeSummary(
                source=self.name,
                offset=offset,
                episode=episode,
                group=str(r.get("group") or episode),
                task_id=str(r.get("task_id")),
                seed=r.get("seed"),
                status=str(r.get("status")),
                task_reward=_number(r.get("task_reward")),
                advantage=_number(r.get("advantage")),
                turns=len(turns),
                format_failures=int(r.get("format_failures") or 0),
                versions=tuple(sorted({t["version"] for t in turns if isinstance(t.get("version"), int)})),
                time=float(r.get("time") or 0.0),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def read(self, offset: int) -> dict[str, Any]:
        """The full record of the episode whose line starts at `offset`."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            return json.loads(f.readline())

    def screenshot(self, episode: str, turn: int) -> Path | None:
        """The screenshot the model saw at that turn, when the run kept it."""
        if not EPISODE_ID.match(episode):
            return None
        path = self.path.parent / "screenshots" / episode / f"turn{turn:02d}.png"
        return path if path.is_file() else None


class Run:
    """A training run's folder (outputs/<experiment>: its rollouts and its held-out evaluations under
    eval/step<N>) or an evaluation's (python -m cua_agent.evaluate --out DIR)."""

    def __init__(self, root: Path):
        if not root.is_dir():
            raise FileNotFoundError(f"no run folder at {root}")
        self.root = root
        self.files: dict[str, RolloutsFile] = {}

    def refresh(self) -> None:
        found = sorted(self.root.glob("rollouts*.jsonl")) + sorted(
            self.root.glob("eval/*/rollouts*.jsonl"), key=lambda p: _step_of(p.parent.name)
        )
        for path in found:
            name = str(path.relative_to(self.root))
            if name not in self.files:
                self.files[name] = RolloutsFile(path, name)
        for f in self.files.values():
            f.refresh()

    def episodes(self) -> list[EpisodeSummary]:
        return [e for f in self.files.values() for e in f.episodes]

    def trials(self) -> dict[str, Path]:
        """Each trial's steps.jsonl (logs/<user>/<experiment>/<trial>/steps.jsonl), the newest first: a
        folder holds one per trial (make local starts a new trial each run), and their steps must not mix."""
        logs = self.root / "logs"
        found = sorted(logs.glob("**/steps.jsonl"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        return {str(p.parent.relative_to(logs)): p for p in found} if logs.is_dir() else {}


def _number(value: Any) -> float | None:
    """A reward or advantage as a float (None stays None); anything else makes the line malformed."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _step_of(name: str) -> int:
    digits = "".join(c for c in name if c.isdigit())
    return int(digits) if digits else 0


def png_size(path: Path) -> tuple[int, int] | None:
    """Width and height from a PNG's header, without decoding it."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])
