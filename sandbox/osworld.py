"""OSWorld-format task files on the host: which of a folder's tasks the boxes can run, and what the others lack.

    python -m sandbox.osworld check EXAMPLES_DIR [--assets DIR | --assume-assets] [--json OUT]

A task file is OSWorld's JSON (`id`, `instruction`, `config`, `evaluator`; sandbox/server/osworld). Nothing is
downloaded: a task's URLs map to files under the assets folder, laid out as `<assets>/<host>/<path>` (what
`wget -x URL` writes), and a URL without its file makes the task refused. Files that are not tasks (OSWorld's
index files such as test_all.json) are skipped. The report gives, per file, whether it runs and what it
lacks, and per folder (OSWorld's domains) how many run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sandbox.server.osworld.support import lacks

TASK_KEYS = ("id", "instruction", "evaluator")


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
        if assume_assets:
            return True
        try:
            return assets is not None and asset_path(assets, url).is_file()
        except OSWorldTaskError:
            return False

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


def summary(checks: list[TaskCheck]) -> str:
    total, runs = Counter(c.domain for c in checks), Counter(c.domain for c in checks if c.runs)
    blockers = Counter(b.split(" http")[0] for c in checks for b in c.lacks)
    lines = [f"{d:24s} {runs[d]:4d} of {total[d]:4d} run" for d in sorted(total)]
    lines.append(f"{'total':24s} {sum(runs.values()):4d} of {len(checks):4d} run")
    lines.append("most common blockers: " + "; ".join(f"{b} ({n})" for b, n in blockers.most_common(12)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox.osworld", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="which task files under a folder run here, and what the others lack")
    check.add_argument("folder", type=Path)
    check.add_argument("--assets", type=Path, help="local copies of the tasks' URLs: <assets>/<host>/<path>")
    check.add_argument("--assume-assets", action="store_true", help="count as if every URL's file were there")
    check.add_argument("--json", type=Path, help="write the per-file report here")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"{args.folder}: not a folder")
    checks = check_folder(args.folder, args.assets, args.assume_assets)
    for c in checks:
        print(
            f"{'runs   ' if c.runs else 'refused'} {c.file}"
            + ("" if c.runs else f": lacks {'; '.join(c.lacks)}")
        )
    print(summary(checks))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(c), "runs": c.runs} for c in checks], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
