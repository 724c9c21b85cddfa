#!/usr/bin/env python
"""What scoring a repository episode in a fresh box costs, against scoring it in the agent's own box.

For each sample task with a reference solution, `--episodes` times: a box of the task's image gets the
solution (the agent's work), then it is scored two ways, one after the other, timed apart:
- in place (the reference: what the scorer did before, and what a process the agent left could forge):
  the tests' files written into the agent's box, the command run there;
- fresh (sandbox/repo/scoring.py): a fresh box started, the agent's diff taken and applied there, the
  tests' files written, the command run, the box removed.
Prints each task's median seconds both ways, the difference (the cost per episode) and the ratio.

    python bench/repo_scoring.py [--episodes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.backends.docker import DockerBackend
from sandbox.repo.box import RepoBox, repo_box
from sandbox.repo.scoring import score
from sandbox.repo.tasks import SAMPLE_TASKS, RepoTask, load_repo_tasks


async def in_place(box: RepoBox, task: RepoTask) -> float:
    t0 = time.monotonic()
    for dst, src in task.tests.files:
        await box.write_file(dst, src.read_text())
    await box.run(task.tests.command, timeout_s=task.tests.timeout_s)
    return time.monotonic() - t0


async def fresh(backend: DockerBackend, box: RepoBox, task: RepoTask) -> float:
    t0 = time.monotonic()
    verdict = await score(box, task.tests, lambda: repo_box(backend, task.spec))
    assert verdict.reward == 1.0, f"{task.task_id}: the reference solution scored {verdict}"
    return time.monotonic() - t0


async def main(episodes: int) -> None:
    backend = DockerBackend(run_id=f"bench-repo-scoring-{int(time.time())}")
    tasks = [t for t in load_repo_tasks(SAMPLE_TASKS) if t.solution is not None]
    print(f"{'task':28} {'in place s':>10} {'fresh s':>8} {'cost s':>7} {'ratio':>6}   ({episodes} episodes)")
    costs = []
    try:
        for task in tasks:
            ref, new = [], []
            for _ in range(episodes):
                async with repo_box(backend, task.spec) as box:
                    assert (await box.apply_patch(task.solution.read_text())).exit_code == 0
                    new.append(await fresh(backend, box, task))  # first: in place writes the tests' files
                    ref.append(await in_place(box, task))
            r, n = statistics.median(ref), statistics.median(new)
            costs.append(n - r)
            print(f"{task.task_id:28} {r:10.2f} {n:8.2f} {n - r:7.2f} {n / r:6.1f}")
    finally:
        backend.close()
    print(f"fresh-box scoring costs {statistics.median(costs):.2f} s per episode (median over tasks)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=5)
    asyncio.run(main(p.parse_args().episodes))
