"""R2E-Gym's dataset export (parquet, JSONL, or a JSON list of rows, as the Hugging Face dataset saves them)
to our repository tasks: one entry file a row (the row as R2E-Gym ships it, read by `r2e_ds_json`) and a
task file of rows naming them.

    python -m sandbox.repo.r2e_import ROWS --out DIR [--split train] [--max-steps 30]

writes DIR/entries/<task>.json and DIR/tasks.jsonl. Each task is scored as R2E-Gym scores it
(sandbox/repo/r2e.py; tests.command defaults to R2E-Gym's `bash /root/run_tests.sh`). Rows the loader would
refuse (SWE-bench-style entries, no docker_image, an empty problem statement) are left out, counted by
reason; the output is checked by loading it back."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbox.repo.tasks import load_repo_tasks, swebench_style
from sandbox.tasks import SPLITS, TaskSpecError


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The export's rows: parquet (pyarrow), JSONL, or a JSON list."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
        return
    text = path.read_text()
    if text.lstrip().startswith("["):
        yield from json.loads(text)
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise TaskSpecError(f"{path}:{n}: not JSON: {exc}") from None


def task_name(row: dict[str, Any]) -> str:
    """repo/r2e-<repository>-<commit[:8]>, in the characters a task id allows."""
    repo = str(row.get("repo_name") or str(row.get("docker_image", "")).split("/")[-1].split(":")[0])
    commit = str(row.get("commit_hash") or str(row.get("docker_image", "")).rsplit(":", 1)[-1])[:8]
    slug = re.sub(r"[^a-z0-9_.-]+", "-", f"{repo}-{commit}".lower()).strip("-.") or "task"
    return f"r2e-{slug}"


def skip_reason(row: dict[str, Any]) -> str:
    if not isinstance(row, dict) or not isinstance(row.get("docker_image"), str) or not row["docker_image"]:
        return "no docker_image"
    if why := swebench_style(row):
        return f"SWE-bench-style ({why})"
    if not str(row.get("problem_statement") or "").strip():
        return "empty problem_statement"
    return ""


def convert(rows: Path, out: Path, split: str, max_steps: int) -> tuple[int, Counter[str]]:
    entries = out / "entries"
    entries.mkdir(parents=True, exist_ok=True)
    skipped: Counter[str] = Counter()
    written: set[str] = set()
    lines = []
    for row in read_rows(rows):
        if why := skip_reason(row):
            skipped[why] += 1
            continue
        name = task_name(row)
        if name in written:
            skipped["duplicate repository and commit"] += 1
            continue
        written.add(name)
        (entries / f"{name}.json").write_text(json.dumps(row, default=str))
        task = {"task_id": f"repo/{name}", "split": split, "max_steps": max_steps}
        lines.append({**task, "r2e_ds_json": f"entries/{name}.json", "sandbox": {}})
    (out / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    load_repo_tasks(out / "tasks.jsonl")  # every row written loads
    return len(lines), skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=Path, help="R2E-Gym's export: .parquet, .jsonl or a .json list of rows")
    ap.add_argument("--out", type=Path, required=True, help="folder for entries/ and tasks.jsonl")
    ap.add_argument("--split", default="train", choices=SPLITS)
    ap.add_argument("--max-steps", type=int, default=30, help="the agent's step budget per episode")
    args = ap.parse_args(argv)
    try:
        n, skipped = convert(args.rows, args.out, args.split, args.max_steps)
    except (OSError, TaskSpecError, ValueError) as exc:
        print(f"r2e_import: {exc}", file=sys.stderr)
        return 1
    print(f"{n} tasks in {args.out / 'tasks.jsonl'}")
    for why, count in skipped.most_common():
        print(f"  left out {count}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
