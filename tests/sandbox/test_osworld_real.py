"""OSWorld-format task files played in real office boxes, as a row plays them: the loader checks the file, the
reset sends it with its files, the box runs its set-up steps (download, open), the test acts through the
public action API like a policy, and the box scores it as OSWorld would (postconfig saves through pyautogui,
then getters and metrics). A right edit scores 1, a wrong one 0."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.base import cua_home
from sandbox.osworld import main
from sandbox.pool import SandboxPool
from sandbox.tasks import load_tasks
from tests.sandbox.osworld_files import HF, calc_print_task, calc_task, text_task, write, write_asset

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

TEXT_ID, CALC_ID = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-9999-aaaaaaaaaaaa"
PRINT_ID = "cccccccc-dddd-4eee-8fff-000000000000"
WORKBOOKS = """
import sys, openpyxl
for path, b2 in ((sys.argv[1], None), (sys.argv[2], 42)):
    wb = openpyxl.Workbook(); ws = wb.active; ws.title = "Sheet1"
    ws.append(["name", "value"]); ws.append(["answer", b2]); wb.save(path)
"""


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("osworld")
    write(root, "os", text_task(TEXT_ID))
    write_asset(root, f"{HF}/os/{TEXT_ID}/notes.txt", b"first line\n")
    write_asset(root, f"{HF}/os/{TEXT_ID}/notes_gold.txt", b"hello box\nfirst line\n")
    write(root, "libreoffice_calc", calc_task(CALC_ID))
    # The workbooks come from openpyxl in the in-box server's host environment (the trainer's has none).
    sheet = write_asset(root, f"{HF}/libreoffice_calc/{CALC_ID}/sheet.xlsx", b"")
    gold = write_asset(root, f"{HF}/libreoffice_calc/{CALC_ID}/sheet_gold.xlsx", b"")
    server_python = (cua_home() / "sandbox" / "host-python").read_text().strip()
    subprocess.run([server_python, "-c", WORKBOOKS, str(sheet), str(gold)], check=True)
    write(root, "libreoffice_calc", calc_print_task(PRINT_ID))
    for name in ("sheet.xlsx", "sheet_gold.xlsx"):
        shutil.copyfile(
            sheet if name == "sheet.xlsx" else gold,
            write_asset(root, f"{HF}/libreoffice_calc/{PRINT_ID}/{name}", b""),
        )
    write_asset(root, f"{HF}/libreoffice_calc/{PRINT_ID}/sheet_gold.csv", b"name,value\nanswer,42\n")
    out = root / "osworld.jsonl"
    assert main(["rows", str(root / "examples"), "--assets", str(root / "assets"), "--out", str(out)]) == 0
    return out


async def _play(pool: SandboxPool, row: dict, actions: list[dict]) -> tuple[float, dict]:
    from sandbox.osworld import reset_source

    async with pool.sandbox(timeout=120) as sb:
        info = await sb.reset(row["task_id"], 0, reset_source(row["osworld"]))
        assert info["instruction"].startswith(("Put the line", "In sheet.xlsx"))
        for a in actions:
            await sb.act(a)
        out = await sb.evaluate()
        return out["reward"], out["info"]


def _type(text: str) -> list[dict]:
    return [{"type": "type", "text": text}, {"type": "key", "keys": "Return"}]


async def test_osworld_files_play_in_boxes_and_score_as_osworld_does(office_pool, rows: Path):
    specs = {s.task_id: s.to_dict() for s in load_tasks(rows)}
    text, calc, printed = (specs[f"osworld/{i}"] for i in (TEXT_ID, CALC_ID, PRINT_ID))
    wait = [{"type": "wait", "seconds": 0.5}]
    text_edit = [*wait, {"type": "key", "keys": "ctrl+Home"}]
    cell_b2 = [
        *wait,
        {"type": "key", "keys": "ctrl+Home"},
        {"type": "key", "keys": "Down"},
        {"type": "key", "keys": "Right"},
    ]
    plays = {
        ("text", "right"): (text, text_edit + _type("hello box")),
        ("text", "wrong"): (text, text_edit + _type("hello boss")),
        ("calc", "right"): (calc, cell_b2 + _type("42")),
        ("calc", "wrong"): (calc, cell_b2 + _type("41")),
        ("print", "right"): (printed, cell_b2 + _type("42")),
        ("print", "wrong"): (printed, cell_b2 + _type("41")),
    }
    results = dict(
        zip(plays, await asyncio.gather(*(_play(office_pool, r, a) for r, a in plays.values())), strict=True)
    )
    assert results["text", "right"] == (
        1.0,
        {
            "metrics": [
                {"func": "compare_text_file", "score": 1.0},
                {"func": "check_include_exclude", "score": 1.0},
            ]
        },
    )
    assert results["text", "wrong"][0] == 0.0
    assert results["calc", "right"] == (1.0, {"metrics": [{"func": "compare_table", "score": 1.0}]})
    assert results["calc", "wrong"][0] == 0.0
    # Saved with Ctrl+S alone, exported to CSV by LibreOffice beside the open window, compared as printed.
    assert results["print", "right"] == (1.0, {"metrics": [{"func": "compare_table", "score": 1.0}]})
    assert results["print", "wrong"][0] == 0.0


def _shell_row(tmp_path: Path, task_id: str, edit=lambda task: None) -> dict:
    """text_task's row with a terminal open after set-up (a policy with a shell); `edit` changes the task."""
    task = text_task(task_id)
    task["config"] = [
        task["config"][0],  # the download of notes.txt
        {"type": "launch", "parameters": {"command": ["xterm", "-T", "Terminal", "-e", "bash", "--norc"]}},
        {"type": "sleep", "parameters": {"seconds": 1}},
    ]
    task["evaluator"]["postconfig"] = []
    edit(task)
    write(tmp_path, "os", task)
    write_asset(tmp_path, f"{HF}/os/{task_id}/notes.txt", b"first line\n")
    write_asset(tmp_path, f"{HF}/os/{task_id}/notes_gold.txt", b"hello box\nfirst line\n")
    rows = tmp_path / "rows.jsonl"
    assert (
        main(["rows", str(tmp_path / "examples"), "--assets", str(tmp_path / "assets"), "--out", str(rows)])
        == 0
    )
    return load_tasks(rows)[0].to_dict()


async def test_a_policy_with_a_shell_cannot_copy_the_gold_file_over_its_result(office_pool, tmp_path):
    """The attack: from a terminal, find OSWorld's gold file anywhere in the box and copy it over the file
    being scored. The gold is written only when the episode is scored, so the search finds nothing (the
    first metric, scored before any gold exists, reads what it found) and the forged result scores 0."""

    def score_what_it_found(task: dict) -> None:
        ev = task["evaluator"]
        ev["func"] = ["check_include_exclude", "compare_text_file"]
        ev["result"] = [
            {"type": "vm_command_line", "command": "cat /home/user/found.txt", "shell": True},
            {"type": "vm_file", "path": "/home/user/Desktop/notes.txt", "dest": "notes.txt"},
        ]
        gold = ev["expected"][0]
        ev["expected"] = [{"type": "rule", "rules": {"include": [], "exclude": ["notes_gold"]}}, gold]
        ev["options"] = [{}, {"ignore_blanks": True}]

    row = _shell_row(tmp_path, "77777777-8888-4999-aaaa-bbbbbbbbbbbb", score_what_it_found)
    attack = (
        "find / -name '*notes_gold*' -type f 2>/dev/null > ~/found.txt; "
        'cp "$(head -1 ~/found.txt)" ~/Desktop/notes.txt; ls /tmp >> ~/found.txt'
    )
    reward, info = await _play(office_pool, row, [
        {"type": "wait", "seconds": 1}, {"type": "click", "x": 640, "y": 400}, *_type(attack),
        {"type": "wait", "seconds": 3},
    ])  # fmt: skip
    assert info["metrics"][0] == {"func": "check_include_exclude", "score": 1.0}, info  # nothing found
    assert reward == 0.0 and info["metrics"][1]["score"] == 0.0, info  # so nothing to forge with


# The VM's names for the `ls` test of multi_apps/869de13e: en_US.UTF-8 sorts them case-insensitively.
NAMES = ["07-cluster", "2023_validation", "assignment", "cco-x", "DOC_a", "Family_b", "IA_c"]
TERMINAL = "import pyautogui, time; pyautogui.click({SCREEN_WIDTH_HALF}, {SCREEN_HEIGHT_HALF}); " + (
    "pyautogui.hotkey('ctrl', 'alt', 't'); time.sleep(0.5)"
)


def _vm_ways_task(task_id: str) -> dict:
    """OSWorld's os-task set-up idioms in one task: a helper script fetched to a relative path that names
    /home/user, an archive the set-up unzips, GNOME's Ctrl+Alt+T then a typed `cd`, and scoring by `ls`."""
    url = f"{HF}/os/{task_id}"
    typed = "import pyautogui, time; pyautogui.write('cd Miscellaneous'); pyautogui.press('enter')"
    return {
        "id": task_id,
        "instruction": "Write the current folder's path to where.txt in your home.",
        "related_apps": ["os", "terminal"],
        "config": [
            {"type": "download", "parameters": {"files": [{"url": f"{url}/names.sh", "path": "names.sh"}]}},
            {"type": "execute", "parameters": {"command": "bash names.sh", "shell": True}},
            {
                "type": "download",
                "parameters": {"files": [{"url": f"{url}/code.zip", "path": "/home/user/code.zip"}]},
            },
            {
                "type": "execute",
                "parameters": {"command": ["/bin/bash", "-c", "unzip /home/user/code.zip -d /home/user/"]},
            },
            {"type": "execute", "parameters": {"command": ["python", "-c", TERMINAL]}},
            {"type": "activate_window", "parameters": {"window_name": "Terminal"}},
            {"type": "execute", "parameters": {"command": ["python", "-c", typed]}},
        ],
        "evaluator": {
            "func": ["exact_match", "check_include_exclude", "check_include_exclude"],
            "result": [
                {"type": "vm_command_line", "command": "ls /home/user/Miscellaneous", "shell": True},
                {"type": "vm_command_line", "command": "cat /home/user/code/main.py", "shell": True},
                {"type": "vm_command_line", "command": "cat where.txt", "shell": True},
            ],
            "expected": [
                {"type": "rule", "rules": {"expected": "".join(f"{n}\n" for n in NAMES)}},
                {"type": "rule", "rules": {"include": ["print('unzipped')"]}},
                {"type": "rule", "rules": {"include": ["/Miscellaneous\n"]}},
            ],
        },
    }


async def test_osworld_setup_runs_as_in_its_vm(office_pool, tmp_path):
    """One box (about 15 s): the set-up's terminal is on screen after the reset, in the folder the set-up
    typed, the agent uses it, and the set-up's unzip, /home/user script and en_US `ls` score as in the VM."""
    import zipfile

    from sandbox.osworld import reset_source

    task_id = "dddddddd-eeee-4fff-8000-111111111111"
    write(tmp_path, "os", _vm_ways_task(task_id))
    write_asset(
        tmp_path,
        f"{HF}/os/{task_id}/names.sh",
        (
            "mkdir -p /home/user/Miscellaneous && cd /home/user/Miscellaneous && touch " + " ".join(NAMES)
        ).encode(),
    )
    with zipfile.ZipFile(write_asset(tmp_path, f"{HF}/os/{task_id}/code.zip", b""), "w") as z:
        z.writestr("code/main.py", "print('unzipped')\n")
    rows = tmp_path / "rows.jsonl"
    assert (
        main(["rows", str(tmp_path / "examples"), "--assets", str(tmp_path / "assets"), "--out", str(rows)])
        == 0
    )
    row = load_tasks(rows)[0].to_dict()
    async with office_pool.sandbox(timeout=120) as sb:
        await sb.reset(row["task_id"], 0, reset_source(row["osworld"]))
        assert "Terminal" in (await sb.oracle())["windows"]
        for a in _type("pwd > ~/where.txt"):
            await sb.act(a)
        await sb.act({"type": "wait", "seconds": 1})
        out = await sb.evaluate()
    assert out["info"]["metrics"] == [
        {"func": "exact_match", "score": 1.0},  # C.UTF-8 would list DOC_a, Family_b, IA_c first
        {"func": "check_include_exclude", "score": 1.0},
        {"func": "check_include_exclude", "score": 1.0},
    ], out


async def test_a_policy_that_keeps_touching_its_result_file_holds_scoring_at_most_the_settle_bound(
    office_pool, tmp_path
):
    """Scoring reads a result file once it has held still (getters.vm_file): the attack, from a terminal,
    keeps stamping the file with a future time so that it never does, to hold the box's scorer. Scoring
    waits FILE_SETTLE_MAX_S at most, then scores the file as it is (unchanged here: 0)."""
    from sandbox.osworld import reset_source
    from sandbox.server.osworld.getters import FILE_SETTLE_MAX_S

    row = _shell_row(tmp_path, "99999999-8888-4777-a666-555555555555")
    attack = "(while :; do touch -d 2099-01-01 ~/Desktop/notes.txt; sleep 0.1; done) &"
    async with office_pool.sandbox(timeout=120) as sb:
        await sb.reset(row["task_id"], 0, reset_source(row["osworld"]))
        for a in [{"type": "wait", "seconds": 1}, {"type": "click", "x": 640, "y": 400}, *_type(attack)]:
            await sb.act(a)
        await sb.act({"type": "wait", "seconds": 1})
        began = time.monotonic()
        out = await sb.evaluate()
        took = time.monotonic() - began
    assert out["reward"] == 0.0, out
    assert FILE_SETTLE_MAX_S <= took < FILE_SETTLE_MAX_S + 10, took  # it waited, and no longer than the bound
