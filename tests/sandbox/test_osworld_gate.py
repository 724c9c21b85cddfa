"""The trust gate (`python -m sandbox.osworld gate`): every runnable OSWorld task file is reset in a real box, its
application must be on screen, and doing nothing must score 0. Tested on task files and assets written here in
OSWorld's layout: a faithful task passes; one whose no-op scores 1, one whose set-up fails and one that leaves
nothing on screen are reported; the exit status says which."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.osworld import main
from sandbox.osworld_gate import expected_titles, gate_with, screen_problems
from tests.sandbox.osworld_files import HF, text_task, write, write_asset

FAITHFUL = "10000000-0000-4000-8000-000000000001"
FREE_REWARD = "10000000-0000-4000-8000-000000000002"  # its gold is the file the task opens
NO_SETUP = "10000000-0000-4000-8000-000000000003"  # opens a file its set-up never writes
BLANK = "10000000-0000-4000-8000-000000000004"  # runs a program without a window: an empty screen
NOTES, GOLD = b"first line\n", b"hello box\nfirst line\n"
REPO = Path(__file__).resolve().parents[2]


def _text(root: Path, domain: str, task: dict, gold: bytes = GOLD) -> None:
    write(root, domain, task)
    write_asset(root, f"{HF}/{domain}/{task['id']}/notes.txt", NOTES)
    write_asset(root, f"{HF}/{domain}/{task['id']}/notes_gold.txt", gold)


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """The faithful task under examples/os, the three that must be reported under examples/multi_apps."""
    _text(tmp_path, "os", text_task(FAITHFUL))
    _text(tmp_path, "multi_apps", text_task(FREE_REWARD, "multi_apps"), gold=NOTES)
    no_setup = text_task(NO_SETUP, "multi_apps")
    no_setup["config"][1]["parameters"]["path"] = "/home/user/Desktop/missing.txt"
    _text(tmp_path, "multi_apps", no_setup)
    blank = text_task(BLANK, "multi_apps")
    blank["config"][1] = {"type": "launch", "parameters": {"command": ["sleep", "60"]}}
    _text(tmp_path, "multi_apps", blank)
    return tmp_path


def test_the_application_a_task_opens_must_be_on_screen():
    task = text_task(FAITHFUL)
    assert expected_titles(task) == ["notes.txt"]
    assert screen_problems(task, ["notes.txt - L3afpad"]) == []
    assert screen_problems(task, ["Terminal"]) == [
        "no window titled with 'notes.txt' after set-up (windows: ['Terminal'])"
    ]
    assert screen_problems(task, []) == ["nothing on screen after set-up (no visible window)"]
    task["config"].append({"type": "close_window", "parameters": {"window_name": "notes.txt"}})
    assert expected_titles(task) == []  # closed by its own set-up: not expected
    assert screen_problems(task, ["Terminal"]) == []
    terminal = {"type": "activate_window", "parameters": {"window_name": "Terminal", "strict": True}}
    task["config"].append(terminal)  # OSWorld's Ctrl+Alt+T idiom: the terminal it brings forward
    assert screen_problems(task, ["notes.txt"]) == [
        "no window titled with 'Terminal' after set-up (windows: ['notes.txt'])"
    ]
    assert screen_problems(task, ["user@box: ~ - terminal"]) == []


def test_unusable_gate_inputs_exit_2_naming_what_is_wrong(tasks: Path, tmp_path: Path, capsys):
    examples, assets = tasks / "examples", tasks / "assets"
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {
        "EXAMPLES_DIR .*nowhere: not a folder": [str(tmp_path / "nowhere"), "--assets", str(assets)],
        "--assets .*nothing: not a folder": [str(examples), "--assets", str(tmp_path / "nothing")],
        "EXAMPLES_DIR .*empty: no OSWorld task files": [str(empty), "--assets", str(assets)],
        "none of the 4 task files .* runs with the assets in .*empty": [
            str(examples),
            "--assets",
            str(empty),
        ],
        "--parallel 0: must be at least 1": [str(examples), "--assets", str(assets), "--parallel", "0"],
    }
    for message, argv in cases.items():
        assert main(["gate", *argv]) == 2, message
        err = capsys.readouterr().err
        assert err.startswith("error: ") and re.search(message, err), err


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="session")
async def test_the_gate_passes_a_faithful_task_and_reports_free_rewards_and_broken_set_ups(
    office_pool, tasks: Path, capsys
):
    examples, assets = tasks / "examples", tasks / "assets"
    everything, faithful_only = tasks / "all.json", tasks / "faithful.json"
    codes = await asyncio.gather(
        gate_with(office_pool, examples, assets, json_out=everything),
        gate_with(office_pool, examples / "os", assets, json_out=faithful_only),
    )
    out = capsys.readouterr().out
    assert codes == [1, 0], out
    assert "[1/4]" in out and "[4/4]" in out and "[1/1] passes" in out  # progress per task
    report = json.loads(everything.read_text())
    results = {r["task_id"]: r for r in report["results"]}
    assert (report["tasks"], report["gated"], report["passed"]) == (4, 4, 1)
    assert sorted(r["task_id"] for r in report["reported"]) == sorted([FREE_REWARD, NO_SETUP, BLANK])
    faithful = results[FAITHFUL]
    assert faithful["passes"] and faithful["noop_score"] == 0.0, faithful
    assert any("notes.txt" in t for t in faithful["windows"]), faithful
    free = results[FREE_REWARD]
    assert free["noop_score"] == 1.0 and free["problems"] == [
        "scores 1 without any action ([{'func': 'compare_text_file', 'score': 1.0}, "
        "{'func': 'check_include_exclude', 'score': 1.0}])"
    ], free
    no_setup = results[NO_SETUP]
    assert no_setup["noop_score"] is None and len(no_setup["problems"]) == 1, no_setup
    assert no_setup["problems"][0].startswith("set-up fails: ") and "missing.txt" in no_setup["problems"][0]
    blank = results[BLANK]
    assert blank["problems"] == ["nothing on screen after set-up (no visible window)"], blank
    assert blank["noop_score"] == 0.0, blank
    assert json.loads(faithful_only.read_text())["reported"] == []


@pytest.mark.slow
def test_ctrl_c_stops_the_gate_and_removes_its_boxes(docker_backend, office_image: str, tasks: Path):
    """The command run as a user runs it: interrupted once its first box exists, it exits 130 and leaves
    no box behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox.osworld", "gate", str(tasks / "examples" / "os"), "--assets",
         str(tasks / "assets"), "--image", office_image],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def boxes() -> list[dict]:
        return [b for b in docker_backend.list_boxes() if b["labels"].get("cua.owner_pid") == str(proc.pid)]

    try:
        deadline = time.monotonic() + 120
        while not boxes() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert boxes(), (
            f"no box started: {proc.poll()} {proc.stdout.read() if proc.poll() is not None else ''}"
        )
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in out, out
    assert boxes() == []
