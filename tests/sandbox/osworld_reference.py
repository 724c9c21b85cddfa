"""The harness of the differential tests against OSWorld's published evaluator (desktop-env 1.0.2, in the
test-only venv `scripts/setup_sandbox.sh osworld_ref` builds): a driver script run by that venv's Python,
files saved again by the office image's LibreOffice, and the agreement every generated pair must show."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
    out = subprocess.run(
        [reference_python(), "-c", driver, str(tmp_path), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def libreoffice_saves(image: str, folder: Path, suffix: str = "xlsx") -> None:
    """Every `.suffix` file of `folder`/in opened and saved again in its format by the image's LibreOffice,
    into `folder`/out (CSVs beside them copied along)."""
    out = folder / "out"
    out.mkdir()
    folder.chmod(0o755)  # the image's user reads the workbooks and writes the saved ones
    out.chmod(0o777)
    engine = os.environ.get("CUA_CONTAINER_ENGINE", "podman")
    files = sorted(p.name for p in (folder / "in").glob(f"*.{suffix}"))
    log = b""
    for start in range(0, len(files), 50):  # one LibreOffice for a few hundred files may stop half-way
        done = subprocess.run(
            [engine, "run", "--rm", "--network", "none", "--entrypoint", "soffice", "-e", "HOME=/tmp"]
            + ["-v", f"{folder}:/lo", image, "--headless", "--convert-to", suffix, "--outdir", "/lo/out"]
            + [f"/lo/in/{name}" for name in files[start : start + 50]],
            check=True,
            capture_output=True,
            timeout=300,
        )
        log += done.stdout + done.stderr
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
