"""The harness of the differential tests against OSWorld's published evaluator (desktop-env 1.0.2, in the
test-only venv `scripts/setup_sandbox.sh osworld_ref` builds): a driver script run by that venv's Python,
files saved again by the office image's LibreOffice, and the agreement every generated pair must show."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox.base import cua_home

REPO = Path(__file__).resolve().parents[2]


def reference_python() -> str:
    pointer = cua_home() / "sandbox" / "osworld-ref-python"
    if not pointer.exists():
        pytest.fail("no OSWorld reference venv: run `bash scripts/setup_sandbox.sh osworld_ref`")
    return pointer.read_text().strip()


def run_driver(driver: str, tmp_path: Path, *args: str) -> dict:
    return _results(_start(driver, tmp_path, *args))


def run_sharded(driver: str, tmp_path: Path, n: int, shards: int = 2) -> dict:
    """A driver whose seed loops take `seed in range(shard, n, shards)` run as `shards` processes at once
    (one per core), their rows put together. Shard 0 also plays the one-off cases and gives every other
    key; the other shards print only their rows. Each shard writes its files in a folder of its own."""
    folders = [tmp_path / f"shard{shard}" for shard in range(shards)]
    for folder in folders:
        folder.mkdir()
    running = [_start(driver, f, str(n), str(shard), str(shards)) for shard, f in enumerate(folders)]
    try:
        results = [_results(p) for p in running]
    finally:
        for p in running:  # a shard that failed leaves none of the others running
            p.kill()
    return {**results[0], "rows": [row for result in results for row in result["rows"]]}


# A sharded driver's pieces (driver text): its shard from argv, before its seed loops; and where the one-off
# cases begin, the other shards' end.
SHARD_ARGS = "shard, shards = int(sys.argv[3]), int(sys.argv[4])  # run_sharded: seeds shard::shards\n"
ONE_OFFS_ON_SHARD_0 = (
    'if shard:  # the one-off cases below are shard 0\'s\n    print(json.dumps({"rows": rows})); sys.exit()\n'
)


def _start(driver: str, tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [reference_python(), "-c", driver, str(tmp_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
    )


def _results(process: subprocess.Popen) -> dict:
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.splitlines()[-1])


def libreoffice_saves(image: str, folder: Path, suffix: str = "xlsx") -> None:
    """Every `.suffix` file of `folder`/in opened and saved again in its format by the image's LibreOffice,
    into `folder`/out (CSVs beside them copied along)."""
    out = folder / "out"
    out.mkdir()
    folder.chmod(0o755)  # the image's user reads the workbooks and writes the saved ones
    out.chmod(0o777)
    engine = os.environ.get("CUA_CONTAINER_ENGINE", "podman")
    files = sorted(p.name for p in (folder / "in").glob(f"*.{suffix}"))

    def save(batch: list[str]) -> bytes:
        done = subprocess.run(
            [engine, "run", "--rm", "--network", "none", "--entrypoint", "soffice", "-e", "HOME=/tmp"]
            + ["-v", f"{folder}:/lo", image, "--headless", "--convert-to", suffix, "--outdir", "/lo/out"]
            + [f"/lo/in/{name}" for name in batch],
            check=True,
            capture_output=True,
            timeout=300,
        )
        return done.stdout + done.stderr

    # One LibreOffice for a few hundred files may stop half-way: batches of 50, two at a time (one per core).
    with ThreadPoolExecutor(2) as batches:
        log = b"".join(batches.map(save, [files[i : i + 50] for i in range(0, len(files), 50)]))
    for csv in (folder / "in").glob("*.csv"):
        shutil.copyfile(csv, out / csv.name)
    assert sorted(p.name for p in out.glob(f"*.{suffix}")) == files, log[-3000:]


def assert_every_pair_agrees(rows: list[dict], pairs: int) -> None:
    """Ours and OSWorld's scores equal on every generated pair, both verdicts well represented, and OSWorld
    raising on none of them."""
    assert len(rows) == pairs
    disagree = [r for r in rows if r["ours"] != r["osworld"]]
    assert disagree == [], f"{len(disagree)} of {pairs} pairs disagree; first: {disagree[:5]}"
    scores = [r["osworld"] for r in rows]
    assert scores.count(1.0) >= pairs // 5 and scores.count(0.0) >= pairs // 5
    assert all(isinstance(s, float) for s in scores)
