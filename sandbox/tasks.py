"""Task specs: one JSON object per line (in the spirit of R2E-Gym's dataset entries).

    {"task_id": "miniwob/click-test", "instruction": null,
     "sandbox": {"resources": {"memory_mb": 1536, "cpus": 1.0, "pids": 512, "screen": "1280x800"}},
     "max_turns": 5, "seeds": [0, 1000], "split": "train", "tags": ["click"]}

`instruction` null means the box writes it at reset (MiniWoB utterances depend on the seed); a string
overrides it. `seeds` is a half-open range [lo, hi). Errors name the file, line and field.

`osworld` (rows of the osworld family only) names an OSWorld task file and the folder of its URLs' files,
relative to the task file: {"file": "examples/libreoffice_calc/<id>.json", "assets": "assets"}
(sandbox/osworld.py). A file whose task the boxes cannot run is refused here, naming what it lacks.

`sandbox` is what this task's box needs, over the run's defaults (`TaskSpec.sandbox_spec`): `backend` (where
it runs: one of sandbox.backends.BACKENDS; absent: the run's `sandbox.backend`), `image` (absent: the run's
image) and `resources` (absent ones: the run's); a row without `sandbox` takes the run's box.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.backends import BACKENDS
from sandbox.base import SandboxSpec
from sandbox.osworld import OSWorldTaskError, check_file
from sandbox.server.task_families import TASK_FAMILIES, TASK_ID

SPLITS = ("train", "val", "test")
TOP_FIELDS = {"task_id", "instruction", "sandbox", "max_turns", "seeds", "split", "tags", "osworld"}
SANDBOX_FIELDS = {"backend", "image", "resources"}
RESOURCE_FIELDS = {"memory_mb", "cpus", "pids", "screen"}


class TaskSpecError(ValueError):
    pass


@dataclass(frozen=True)
class TaskSpec:
    task_id: str
    # The row's `sandbox` block as written (validated): only what the task overrides of the run's defaults.
    sandbox: dict[str, Any] = field(hash=False)
    max_turns: int
    seeds: tuple[int, int]
    split: str
    instruction: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    # osworld rows: {"file": absolute path, "assets": absolute path}; what the box gets at reset
    osworld: dict[str, str] | None = field(default=None, hash=False)

    def seed_list(self) -> range:
        return range(*self.seeds)

    def sandbox_spec(self, defaults: SandboxSpec | None = None) -> SandboxSpec:
        """The spec this task's box is started with: its `sandbox` block over the run's `defaults`."""
        return SandboxSpec.from_dict(self.sandbox, base=defaults)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "instruction": self.instruction,
            "sandbox": copy.deepcopy(self.sandbox),
            "max_turns": self.max_turns,
            "seeds": list(self.seeds),
            "split": self.split,
            "tags": list(self.tags),
            **({"osworld": dict(self.osworld)} if self.osworld else {}),
        }


def _check(cond: bool, where: str, fieldname: str, msg: str) -> None:
    if not cond:
        raise TaskSpecError(f"{where}: field '{fieldname}': {msg}")


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _osworld(obj: dict[str, Any], tid: str, where: str, base: Path | None) -> dict[str, str] | None:
    """The row's OSWorld file and assets, absolute, once the boxes are known to run the task."""
    in_row = TASK_FAMILIES[tid.split("/", 1)[0]].task_in_row
    _check(
        ("osworld" in obj) == in_row,
        where,
        "osworld",
        "is required for osworld/... rows" if in_row else "is only for osworld/... rows",
    )
    if not in_row:
        return None
    src = obj["osworld"]
    _check(
        isinstance(src, dict) and isinstance(src.get("file"), str) and isinstance(src.get("assets", ""), str),
        where,
        "osworld",
        'must be {"file": "<task>.json", "assets": "<folder>"}',
    )
    unknown = set(src) - {"file", "assets"}
    _check(not unknown, where, f"osworld.{sorted(unknown)[0] if unknown else ''}", "unknown field")
    here = base or Path.cwd()
    file = (here / src["file"]).resolve()
    assets = (here / src["assets"]).resolve() if src.get("assets") else None
    _check(file.is_file(), where, "osworld.file", f"no such file: {file}")
    try:
        task = check_file(file, assets)
    except OSWorldTaskError as e:
        raise TaskSpecError(f"{where}: field 'osworld.file': {e}") from None
    _check(f"osworld/{task['id']}" == tid, where, "task_id", f"must be osworld/{task['id']} (the file's id)")
    return {"file": str(file), **({"assets": str(assets)} if assets else {})}


def parse_task(obj: Any, where: str = "<task>", base: Path | None = None) -> TaskSpec:
    """One row; `base`: the folder its relative paths start from (the task file's)."""
    if not isinstance(obj, dict):
        raise TaskSpecError(f"{where}: a task must be a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - TOP_FIELDS
    _check(
        not unknown,
        where,
        sorted(unknown)[0] if unknown else "",
        f"unknown field (known: {sorted(TOP_FIELDS)})",
    )
    for req in ("task_id", "max_turns", "seeds", "split"):
        _check(req in obj, where, req, "is required")
    tid = obj["task_id"]
    _check(
        isinstance(tid, str) and bool(TASK_ID.match(tid)),
        where,
        "task_id",
        f"must look like '<family>/<name>' with a known family ({', '.join(sorted(TASK_FAMILIES))}), got {tid!r}",
    )
    osworld = _osworld(obj, tid, where, base)
    instr = obj.get("instruction")
    _check(
        instr is None or (isinstance(instr, str) and instr.strip() != ""),
        where,
        "instruction",
        "must be null (set by the box at reset) or a non-empty string",
    )
    sb = obj.get("sandbox", {})  # absent: the run's defaults
    _check(isinstance(sb, dict), where, "sandbox", "must be an object")
    _check(
        sb.get("backend", BACKENDS[0]) in BACKENDS,
        where,
        "sandbox.backend",
        f"must be one of {', '.join(BACKENDS)} (absent: the run's sandbox.backend), got {sb.get('backend')!r}",
    )
    unknown = set(sb) - SANDBOX_FIELDS
    _check(not unknown, where, f"sandbox.{sorted(unknown)[0] if unknown else ''}", "unknown field")
    _check(
        isinstance(sb.get("image", "x"), str) and sb.get("image", "x") != "",
        where,
        "sandbox.image",
        "must be a non-empty string",
    )
    res = sb.get("resources", {})
    _check(isinstance(res, dict), where, "sandbox.resources", "must be an object")
    unknown = set(res) - RESOURCE_FIELDS
    _check(not unknown, where, f"sandbox.resources.{sorted(unknown)[0] if unknown else ''}", "unknown field")
    for key in ("memory_mb", "pids"):
        if key in res:
            _check(
                _pos_int(res[key]),
                where,
                f"sandbox.resources.{key}",
                f"must be a positive integer, got {res[key]!r}",
            )
    if "memory_mb" in res:
        _check(res["memory_mb"] >= 256, where, "sandbox.resources.memory_mb", "must be >= 256 (chromium)")
    if "cpus" in res:
        c = res["cpus"]
        _check(
            isinstance(c, int | float) and not isinstance(c, bool) and 0 < c <= 64,
            where,
            "sandbox.resources.cpus",
            f"must be a number in (0, 64], got {c!r}",
        )
    if "screen" in res:
        _check(
            isinstance(res["screen"], str) and bool(re.match(r"^\d{3,4}x\d{3,4}$", res["screen"])),
            where,
            "sandbox.resources.screen",
            f"must look like '1280x800', got {res['screen']!r}",
        )
    _check(
        _pos_int(obj["max_turns"]),
        where,
        "max_turns",
        f"must be a positive integer, got {obj['max_turns']!r}",
    )
    seeds = obj["seeds"]
    _check(
        isinstance(seeds, list)
        and len(seeds) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        and 0 <= seeds[0] < seeds[1] < 2**31,
        where,
        "seeds",
        f"must be [lo, hi) with 0 <= lo < hi < 2^31, got {seeds!r}",
    )
    _check(obj["split"] in SPLITS, where, "split", f"must be one of {SPLITS}, got {obj['split']!r}")
    tags = obj.get("tags", [])
    _check(
        isinstance(tags, list) and all(isinstance(t, str) for t in tags),
        where,
        "tags",
        "must be a list of strings",
    )
    return TaskSpec(
        task_id=tid,
        sandbox=copy.deepcopy(sb),
        max_turns=obj["max_turns"],
        seeds=(seeds[0], seeds[1]),
        split=obj["split"],
        instruction=instr,
        tags=tuple(tags),
        osworld=osworld,
    )


def jsonl_rows(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, "file:line", object) of a task file's rows; blank and // comment lines skipped."""
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            where = f"{path}:{lineno}"
            try:
                yield lineno, where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskSpecError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None


def iter_tasks(path: str | Path) -> Iterator[TaskSpec]:
    path = Path(path)
    seen: dict[tuple[str, str], int] = {}
    for lineno, where, obj in jsonl_rows(path):
        spec = parse_task(obj, where, path.parent)
        key = (spec.task_id, spec.split)
        if key in seen:
            raise TaskSpecError(
                f"{where}: field 'task_id': {spec.task_id} ({spec.split}) already on line {seen[key]}"
            )
        seen[key] = lineno
        yield spec


def load_tasks(path: str | Path, split: str | None = None) -> list[TaskSpec]:
    return [t for t in iter_tasks(path) if split is None or t.split == split]
