"""The viewer and the plots on a real run: `train_areal.py` (configs/local_cpu.yaml: the warm start served by
the vLLM CPU server, podman sandboxes with MiniWoB++, AReaL's PPOTrainer) for 2 steps with screenshots and
a held-out evaluation, then the viewer's pages in a real headless chromium (Debian's, which setup installs
for the desktops)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest
from PIL import Image

from cua_agent.inference.local_server import REPO, WARM_MODEL
from cua_agent.viewer import plots
from tests.training.harness import run_training

pytestmark = pytest.mark.slow

MARKER_RGB = (0xFF, 0x17, 0x44)  # cua_agent/viewer/pages.py's marker colour


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exp = tmp_path_factory.mktemp("viewer") / "exp"
    run = run_training(
        [
            f"cluster.fileroot={exp}",
            # the embedded default's own policy and task (the harness's defaults are the random model's)
            f"actor.path={WARM_MODEL}",
            "agent.filter_equal_reward_groups=true",
            "tasks.task_ids=[miniwob/click-test]",
            "agent.max_turns=1",
            "total_train_steps=2",
            "agent.group_size=4",
            "agent.save_screenshots=true",
            "evaluation.enabled=true",
            "evaluator.freq_steps=2",
            "evaluation.seeds_per_task=2",
        ],
        exp.parent / "run.log",
        ranks=1,  # the embedded default as `make local` runs it: one rank beside the server it starts
    )
    assert run.rc == 0, f"train_areal.py exited {run.rc}:\n{run.tail()}"
    return exp


def start_viewer(folder: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """The viewer on a port of its choosing (--port 0), once it listens; with what it printed before (its
    warnings)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cua_agent.viewer", str(folder), "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    before = []
    for line in proc.stdout:
        if listening := re.match(r"viewer: (http://127\.0\.0\.1:\d+)/ ", line):
            return proc, listening.group(1), before
        before.append(line)
    raise AssertionError(f"the viewer exited {proc.wait()}:\n{''.join(before)}")


@pytest.fixture(scope="module")
def viewer(run_dir: Path):
    proc, base, _ = start_viewer(run_dir)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def browser(*args: str) -> subprocess.CompletedProcess:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is installed by scripts/setup.sh"
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def dom(url: str) -> str:
    out = browser("--dump-dom", url)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_viewer_shows_each_group_and_draws_a_click_where_it_landed(
    run_dir: Path, viewer: str, tmp_path: Path
):
    trained = records(run_dir / "rollouts.jsonl")
    index = dom(viewer + "/")
    groups = {e["group"] for e in trained}
    assert all(f"id={g}" in index for g in groups), "every trained group is listed"
    assert "eval/step2/rollouts.jsonl" in index  # the held-out evaluation's episodes too

    # a group: its episodes side by side with the advantages GRPO gave them
    group = next(iter(groups))
    members = [e for e in trained if e["group"] == group]
    page = dom(viewer + "/group?" + urlencode({"src": "rollouts.jsonl", "id": group}))
    assert page.count('class="episode"') == len(members)
    for e in members:
        assert f"advantage {e['advantage']:+.3f}" in page

    # a click away from the screenshot's edges: its turn page shows the screenshot at its own size at the
    # top left corner, so the marker drawn by the browser must be centred on the click's pixel
    click = next(
        (e, i, t["action"])
        for e in trained
        for i, t in enumerate(e["turns"])
        if (t.get("action") or {}).get("type") == "click"
        and 30 < t["action"]["x"] < 1250
        and 30 < t["action"]["y"] < 770
    )
    e, i, action = click
    shot = tmp_path / "turn.png"
    url = viewer + "/turn?" + urlencode({"src": "rollouts.jsonl", "ep": e["episode"], "turn": i})
    out = browser(f"--screenshot={shot}", "--window-size=1280,900", url)
    assert out.returncode == 0 and shot.is_file(), out.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    pixels = img.load()
    red = [
        (x, y)
        for y in range(max(0, action["y"] - 40), action["y"] + 40)
        for x in range(max(0, action["x"] - 40), action["x"] + 40)
        if all(abs(a - b) < 40 for a, b in zip(pixels[x, y], MARKER_RGB, strict=True))
    ]
    assert len(red) > 50, f"no marker drawn near {action}"
    cx, cy = sum(p[0] for p in red) / len(red), sum(p[1] for p in red) / len(red)
    assert abs(cx - action["x"]) <= 2 and abs(cy - action["y"]) <= 2, (cx, cy, action)


def test_a_missing_screenshot_is_reported_and_a_malformed_line_skipped_with_a_warning(
    run_dir: Path, tmp_path: Path
):
    damaged = tmp_path / "damaged"
    shutil.copytree(run_dir, damaged, ignore=shutil.ignore_patterns("checkpoints", "*.safetensors"))
    first = records(damaged / "rollouts.jsonl")[0]
    (damaged / "screenshots" / first["episode"] / "turn00.png").unlink()
    with open(damaged / "rollouts.jsonl", "a") as f:
        f.write('{"episode": "torn\n')
    proc, base, warnings = start_viewer(damaged)
    try:
        index = dom(base + "/")
        lines = len((damaged / "rollouts.jsonl").read_text().splitlines())
        assert "Skipped lines that are not episode records" in index and f"line {lines}" in index
        assert f"id={first['group']}" in index  # the rest of the run is still there
        page = dom(base + "/group?" + urlencode({"src": "rollouts.jsonl", "id": first["group"]}))
        assert "screenshot not kept" in page
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert any("rollouts.jsonl:" in w and "not an episode record, skipped" in w for w in warnings), warnings


def test_the_plots_command_draws_the_runs_steps(run_dir: Path, tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "cua_agent.viewer.plots", str(run_dir), "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    success = (tmp_path / "success.svg").read_text()
    # A step's training-episode figures are those scored during it: a step whose group was scored while
    # the previous one trained (asynchronous rollouts) has none, and no point.
    (steps,) = run_dir.glob("logs/*/*/*/steps.jsonl")
    scored = sum(1 for r in records(steps) if "all/success_rate" in (r.get("episodes") or {}))
    assert scored >= 1 and f'data-label="training episodes" data-points="{scored}"' in success
    assert 'data-label="held-out" data-points="1"' in success  # evaluated after step 2 only
    timing = (tmp_path / "time.svg").read_text()
    assert 'data-label="train step" data-points="2"' in timing
    assert 'data-label="mean" data-points="2"' in (tmp_path / "staleness.svg").read_text()
    assert {c.name for c in plots.CHARTS} <= {p.stem for p in tmp_path.glob("*.svg")}
    shot = tmp_path / "plots.png"
    assert (
        browser(
            f"--screenshot={shot}", "--window-size=600,900", (tmp_path / "plots.html").as_uri()
        ).returncode
        == 0
    )
    assert Image.open(shot).size == (600, 900)
