"""A scripted rule agent for repository tasks, and its smoke run (like R2E-Gym's rule-agent smoke):

    python -m sandbox.repo.rule_agent [--tasks sandbox/repo/samples/tasks.jsonl] [--out DIR]

For each task with a reference `solution`, it starts the task's box, reads the files the patch touches,
applies the patch and shows the diff, all through the box's public API (what a model's tools call), then
scores its work as an episode is scored (its diff, in a fresh box, by the task's tests). It writes DIR/report.json and one line per episode to
DIR/episodes.log, and exits 1 when a task is not solved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import RepoBox, repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTask, load_repo_tasks


def touched_files(diff: str) -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)", diff, flags=re.M)


async def solve(box: RepoBox, task: RepoTask) -> list[dict[str, Any]]:
    """The rule agent's steps on `box`: what it called and how each call ended."""
    assert task.solution is not None, task.task_id
    diff = task.solution.read_text()
    steps = []
    for path in touched_files(diff):
        r = await box.read_file(path)
        steps.append({"tool": "read_file", "path": path, "exit_code": r.exit_code})
    r = await box.apply_patch(diff)
    steps.append({"tool": "apply_patch", "exit_code": r.exit_code, "output": r.output[-500:]})
    r = await box.run("git diff --stat")
    steps.append({"tool": "run", "command": "git diff --stat", "exit_code": r.exit_code})
    return steps


async def episode(backend: DockerBackend, task: RepoTask) -> dict[str, Any]:
    start = time.monotonic()
    line: dict[str, Any] = {"task_id": task.task_id}
    try:
        async with repo_box(backend, task.spec) as box:
            line["steps"] = await solve(box, task)
            verdict = await score(box, task.tests, lambda: repo_box(backend, task.spec))
        line.update(status="scored", reward=verdict.reward, verdict=verdict.reason)
    except Exception as exc:  # an infrastructure failure: reported apart, never a reward
        line.update(status="infra_error", error=f"{type(exc).__name__}: {exc}")
    line["seconds"] = round(time.monotonic() - start, 2)
    return line


async def smoke(tasks_path: Path, out: Path) -> dict[str, Any]:
    tasks = [t for t in load_repo_tasks(tasks_path) if t.solution is not None]
    out.mkdir(parents=True, exist_ok=True)
    backend = DockerBackend(run_id=f"repo-smoke-{int(time.time())}")
    start = time.monotonic()
    lines = []
    try:
        with open(out / "episodes.log", "w") as log:
            for task in tasks:
                line = await episode(backend, task)
                log.write(json.dumps(line) + "\n")
                log.flush()
                print(f"{task.task_id}: {line['status']} reward={line.get('reward')} ({line['seconds']} s)")
                lines.append(line)
    finally:
        backend.close()
    report = {
        "tasks_file": str(tasks_path),
        "tasks": len(lines),
        "solved": sum(1 for x in lines if x.get("reward") == 1.0),
        "infra_errors": sum(1 for x in lines if x["status"] == "infra_error"),
        "wall_s": round(time.monotonic() - start, 2),
        "episodes": [{k: x.get(k) for k in ("task_id", "status", "reward", "seconds")} for x in lines],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=Path, default=SAMPLE_TASKS)
    p.add_argument("--out", type=Path, default=Path("outputs/repo-smoke"))
    args = p.parse_args(argv)
    report = asyncio.run(smoke(args.tasks, args.out))
    print(
        f"solved {report['solved']}/{report['tasks']} in {report['wall_s']} s; report: {args.out / 'report.json'}"
    )
    return 0 if report["solved"] == report["tasks"] else 1


if __name__ == "__main__":
    sys.exit(main())
