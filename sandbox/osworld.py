"""OSWorld-format task files on the host: which of a folder's tasks the boxes can run, what the others lack,
and task rows that play the runnable ones.

    python -m sandbox.osworld check EXAMPLES_DIR [--assets DIR | --assume-assets] [--json OUT]
    python -m sandbox.osworld rows EXAMPLES_DIR --assets DIR --out tasks/osworld.jsonl [--split test]
    python -m sandbox.osworld gate EXAMPLES_DIR --assets DIR [--parallel N] [--json OUT]   (sandbox/osworld_gate.py)

A task file is OSWorld's JSON (`id`, `instruction`, `config`, `evaluator`; sandbox/server/osworld). Nothing is
downloaded: a task's URLs map to files under the assets folder, laid out as `<assets>/<host>/<path>` (what
`wget -x URL` writes), and a URL without its file makes the task refused. Files that are not tasks (OSWorld's
index files such as test_all.json) are skipped. The report gives, per file, whether it runs and what it
lacks, and per folder (OSWorld's domains) how many run.

A row plays one file: `{"task_id": "osworld/<id>", "osworld": {"file": F, "assets": A}, ...}` with F and A
relative to the row's task file; sandbox/tasks.py refuses a row whose task lacks something, and the
episode sends the task with its files at reset (`reset_source`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sandbox.server.osworld.support import lacks

TASK_KEYS = ("id", "instruction", "evaluator")
OFFICE_IMAGE = "cua-sandbox-office:latest"
OSWORLD_SCREEN = "1920x1080"  # OSWorld's VM screen: its set-up's literal clicks land where its authors saw


class OSWorldTaskError(ValueError):
    """A task file that is not valid OSWorld JSON (the message names the file and the field)."""


@dataclass(frozen=True)
class TaskCheck:
    file: str
    task_id: str
    domain: str
    lacks: list[str]

    @property
    def runs(self) -> bool:
        return not self.lacks


def asset_path(assets: Path, url: str) -> Path:
    """The local file that stands for `url`: <assets>/<host>/<path>."""
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise OSWorldTaskError(f"not an http(s) URL: {url!r}")
    path = (assets / u.netloc / u.path.lstrip("/")).resolve()
    if not path.is_relative_to(assets.resolve()):
        raise OSWorldTaskError(f"URL {url!r} leaves the assets folder")
    return path


def read_task(path: Path) -> dict[str, Any] | None:
    """The task in `path`, None when the file is not a task (an index file); bad JSON is an error."""
    try:
        obj = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OSWorldTaskError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(obj, dict) or not all(k in obj for k in TASK_KEYS):
        return None
    if not isinstance(obj["instruction"], str):
        raise OSWorldTaskError(f"{path}: field 'instruction': expected a string")
    if not isinstance(obj.get("config", []), list):
        raise OSWorldTaskError(f"{path}: field 'config': expected a list of steps")
    ev = obj["evaluator"]
    if not isinstance(ev, dict) or "func" not in ev:
        raise OSWorldTaskError(f"{path}: field 'evaluator': expected an object with 'func'")
    return obj


def check_folder(root: Path, assets: Path | None = None, assume_assets: bool = False) -> list[TaskCheck]:
    """Every task file under `root`, checked (`assume_assets`: as if every URL's file were provided). An
    unreadable file is listed as lacking a valid file."""

    def has_asset(url: str) -> bool:
        return assume_assets or (assets is not None and _has(assets, url))

    out = []
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root)
        domain = rel.parts[-2] if len(rel.parts) > 1 else "."
        try:
            task = read_task(path)
        except OSWorldTaskError as e:
            out.append(TaskCheck(str(rel), path.stem, domain, [f"a valid task file ({e})"]))
            continue
        if task is not None:
            out.append(TaskCheck(str(rel), str(task["id"]), domain, lacks(task, has_asset)))
    return out


def task_urls(task: dict[str, Any]) -> list[str]:
    """Every URL whose file the task needs: its downloads and its cloud files."""
    ev = task.get("evaluator") or {}
    urls = [
        f.get("url", "")
        for step in [*(task.get("config") or []), *(ev.get("postconfig") or [])]
        if step.get("type") == "download"
        for f in (step.get("parameters") or {}).get("files", [])
    ]
    for key in ("result", "expected"):
        specs = ev.get(key) if isinstance(ev.get(key), list) else [ev.get(key)]
        for spec in specs:
            if spec and spec.get("type") == "cloud_file":
                urls += spec["path"] if isinstance(spec["path"], list) else [spec["path"]]
    return list(dict.fromkeys(urls))


def check_file(file: Path, assets: Path | None) -> dict[str, Any]:
    """The task in `file`, if the boxes can run it with the files under `assets`; else OSWorldTaskError
    naming what it lacks."""
    task = read_task(file)
    if task is None:
        raise OSWorldTaskError(f"{file}: not an OSWorld task (no {', '.join(TASK_KEYS)})")
    missing = lacks(task, lambda url: assets is not None and _has(assets, url))
    if missing:
        raise OSWorldTaskError(f"{file}: the boxes lack {'; '.join(missing)}")
    return task


def _has(assets: Path, url: str) -> bool:
    try:
        return asset_path(assets, url).is_file()
    except OSWorldTaskError:
        return False


def reset_source(row: dict[str, Any]) -> dict[str, Any]:
    """What a reset of an osworld row sends: the task and its files ({url: base64})."""
    file, assets = Path(row["file"]), Path(row["assets"]) if row.get("assets") else None
    task = check_file(file, assets)
    files = {}
    for url in task_urls(task):
        assert assets is not None  # check_file: every URL has its file
        files[url] = base64.b64encode(asset_path(assets, url).read_bytes()).decode()
    return {"task": task, "assets": files}


def summary(checks: list[TaskCheck]) -> str:
    total, runs = Counter(c.domain for c in checks), Counter(c.domain for c in checks if c.runs)
    blockers = Counter(b.split(" http")[0] for c in checks for b in c.lacks)
    lines = [f"{d:24s} {runs[d]:4d} of {total[d]:4d} run" for d in sorted(total)]
    lines.append(f"{'total':24s} {sum(runs.values()):4d} of {len(checks):4d} run")
    lines.append(
        "most common blockers: " + ("; ".join(f"{b} ({n})" for b, n in blockers.most_common(12)) or "none")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox.osworld", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="which task files under a folder run here, and what the others lack")
    check.add_argument("folder", type=Path)
    check.add_argument("--assets", type=Path, help="local copies of the tasks' URLs: <assets>/<host>/<path>")
    check.add_argument("--assume-assets", action="store_true", help="count as if every URL's file were there")
    check.add_argument("--json", type=Path, help="write the per-file report here")
    rows = sub.add_parser("rows", help="task rows (JSON lines) that play the folder's runnable tasks")
    rows.add_argument("folder", type=Path)
    rows.add_argument("--assets", type=Path, required=True)
    rows.add_argument("--out", type=Path, required=True)
    rows.add_argument("--split", default="test", choices=("train", "val", "test"))
    rows.add_argument("--max-turns", type=int, default=15)
    rows.add_argument("--image", default=OFFICE_IMAGE, help="the boxes' image (default: %(default)s)")
    gate = sub.add_parser(
        "gate",
        help="reset each runnable task in a box, act not at all, score: report what scores or fails set-up",
    )
    gate.add_argument("folder", type=Path)
    gate.add_argument("--assets", type=Path, required=True)
    gate.add_argument("--parallel", type=int, default=2, help="boxes at once (default: %(default)s)")
    gate.add_argument("--json", type=Path, help="write the report here")
    gate.add_argument("--image", help="the boxes' image (default: the rows')")
    args = ap.parse_args(argv)
    if args.cmd == "gate":
        from sandbox.osworld_gate import run_gate  # it imports this module

        return run_gate(args.folder, args.assets, args.parallel, args.json, args.image)
    if not args.folder.is_dir():
        ap.error(f"{args.folder}: not a folder")
    checks = check_folder(args.folder, args.assets, getattr(args, "assume_assets", False))
    for c in checks:
        print(
            f"{'runs   ' if c.runs else 'refused'} {c.file}"
            + ("" if c.runs else f": lacks {'; '.join(c.lacks)}")
        )
    print(summary(checks))
    if args.cmd == "check" and args.json:
        args.json.write_text(json.dumps([{**asdict(c), "runs": c.runs} for c in checks], indent=1))
    if args.cmd == "rows":
        here = args.out.resolve().parent
        runnable = [c for c in checks if c.runs]
        with args.out.open("w") as f:
            for c in runnable:
                one = row(args.folder / c.file, args.assets, here, args.split, args.max_turns, args.image)
                f.write(json.dumps(one) + "\n")
        print(f"wrote {len(runnable)} rows to {args.out}")
    return 0


def row(
    file: Path, assets: Path, here: Path, split: str, max_turns: int, image: str = OFFICE_IMAGE
) -> dict[str, Any]:
    """A task row for `file`, its paths relative to the row file's folder `here`."""
    task = read_task(file)
    assert task is not None
    return {
        "task_id": f"osworld/{task['id']}",
        "instruction": None,
        "osworld": {
            "file": os.path.relpath(file.resolve(), here),
            "assets": os.path.relpath(assets.resolve(), here),
        },
        "sandbox": {
            "image": image,
            "resources": {"memory_mb": 2048, "screen": OSWORLD_SCREEN},  # a row may say otherwise
        },
        "max_turns": max_turns,
        "seeds": [0, 1],
        "split": split,
        "tags": ["osworld", file.parent.name],
    }


if __name__ == "__main__":
    sys.exit(main())
