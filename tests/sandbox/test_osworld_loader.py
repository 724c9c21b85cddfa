"""The OSWorld loader on files in OSWorld's shape: per file, whether the boxes run it and what it lacks; rows
that play the runnable ones; and load-time refusal of a row whose task cannot run."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest

from sandbox.osworld import check_folder, main, reset_source, summary
from sandbox.tasks import TaskSpecError, load_tasks
from tests.sandbox.osworld_files import HF, calc_task, text_task, write, write_asset

IDS = {name: f"00000000-0000-4000-8000-00000000000{i}" for i, name in enumerate("abcdef")}


@pytest.fixture
def osworld(tmp_path: Path) -> Path:
    """A folder of six tasks: two that run (their files present), four that do not, for four reasons."""
    ok_calc, ok_text = calc_task(IDS["a"]), text_task(IDS["b"])
    write(tmp_path, "libreoffice_calc", ok_calc)
    write(tmp_path, "os", ok_text)
    for task in (ok_calc, ok_text):
        for step in task["config"]:
            for f in step["parameters"].get("files", []):
                write_asset(tmp_path, f["url"], b"data")
        exp = task["evaluator"]["expected"]
        for spec in exp if isinstance(exp, list) else [exp]:
            if spec["type"] == "cloud_file":
                write_asset(tmp_path, spec["path"], b"gold")
    no_gold = calc_task(IDS["c"])  # its files were never fetched
    write(tmp_path, "libreoffice_calc", no_gold)
    chrome = text_task(IDS["d"], domain="chrome")
    chrome["config"] = [
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://example.com"]}},
    ]
    write(tmp_path, "chrome", chrome)
    pivot = copy.deepcopy(ok_calc)
    pivot["id"] = IDS["e"]
    pivot["evaluator"]["options"]["rules"].append(
        {"type": "pivot_table", "sheet_idx0": 0, "sheet_idx1": "EI0"}
    )
    write(tmp_path, "libreoffice_calc", pivot)
    pdf = text_task(IDS["f"])
    pdf["evaluator"]["func"] = ["compare_pdfs", "check_include_exclude"]
    write(tmp_path, "os", pdf)
    (tmp_path / "examples" / "test_all.json").write_text(json.dumps({"os": [IDS["b"]]}))  # an index: skipped
    (tmp_path / "examples" / "os" / "broken.json").write_text("{not json")
    return tmp_path


def test_each_file_is_reported_with_what_it_lacks(osworld: Path):
    checks = {c.task_id: c for c in check_folder(osworld / "examples", osworld / "assets")}
    assert set(checks) == {*IDS.values(), "broken"}  # the index file is not a task
    assert checks[IDS["a"]].runs and checks[IDS["b"]].runs
    assert checks[IDS["c"]].lacks == [
        f"asset {HF}/libreoffice_calc/{IDS['c']}/sheet.xlsx",
        f"asset {HF}/libreoffice_calc/{IDS['c']}/sheet_gold.xlsx",
    ]
    assert checks[IDS["d"]].lacks[:2] == ["application google-chrome", "step chrome_open_tabs"]
    assert checks[IDS["e"]].lacks == ["compare_table rule pivot_table"]
    assert "metric compare_pdfs" in checks[IDS["f"]].lacks  # (and its files, never fetched)
    assert (
        checks["broken"].lacks[0].startswith("a valid task file (")
        and "not valid JSON" in checks["broken"].lacks[0]
    )
    report = summary(list(checks.values()))
    assert "libreoffice_calc            1 of    3 run" in report
    assert "os                          1 of    3 run" in report
    assert "total                       2 of    7 run" in report


def test_rows_play_the_runnable_tasks_and_a_row_that_cannot_run_is_refused_at_load(osworld: Path, capsys):
    rows = osworld / "rows" / "osworld.jsonl"
    rows.parent.mkdir()
    assert (
        main(["rows", str(osworld / "examples"), "--assets", str(osworld / "assets"), "--out", str(rows)])
        == 0
    )
    assert "wrote 2 rows" in capsys.readouterr().out
    specs = load_tasks(rows)
    assert sorted(s.task_id for s in specs) == sorted(f"osworld/{IDS[k]}" for k in "ab")
    calc = next(s for s in specs if s.task_id == f"osworld/{IDS['a']}")
    assert calc.sandbox_spec().image == "cua-sandbox-office:latest" and calc.split == "test"
    assert calc.sandbox_spec().screen == (1920, 1080)  # OSWorld's VM screen: literal set-up clicks land alike
    # What the box gets at reset: the task and the file behind each of its URLs.
    source = reset_source(calc.to_dict()["osworld"])
    assert source["task"]["id"] == IDS["a"]
    assert {u: base64.b64decode(b) for u, b in source["assets"].items()} == {
        f"{HF}/libreoffice_calc/{IDS['a']}/sheet.xlsx": b"data",
        f"{HF}/libreoffice_calc/{IDS['a']}/sheet_gold.xlsx": b"gold",
    }
    # A file that went missing since: the row is refused naming it, before any box starts.
    (
        osworld / "assets" / f"huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/"
        f"libreoffice_calc/{IDS['a']}/sheet_gold.xlsx"
    ).unlink()
    with pytest.raises(
        TaskSpecError, match=r"osworld.jsonl:\d: field 'osworld.file': .*lack asset https://.*sheet_gold"
    ):
        load_tasks(rows)


def test_a_row_names_a_task_the_boxes_cannot_run_or_the_wrong_id(osworld: Path):
    base = {"instruction": None, "max_turns": 5, "seeds": [0, 1], "split": "test"}
    rows = osworld / "bad.jsonl"
    chrome = {
        **base,
        "task_id": f"osworld/{IDS['d']}",
        "osworld": {"file": f"examples/chrome/{IDS['d']}.json", "assets": "assets"},
    }
    rows.write_text(json.dumps(chrome) + "\n")
    with pytest.raises(
        TaskSpecError, match=r"bad.jsonl:1: field 'osworld.file': .*lack application google-chrome"
    ):
        load_tasks(rows)
    wrong_id = {
        **chrome,
        "task_id": f"osworld/{IDS['a']}",
        "osworld": {"file": f"examples/os/{IDS['b']}.json", "assets": "assets"},
    }
    rows.write_text(json.dumps(wrong_id) + "\n")
    with pytest.raises(TaskSpecError, match=rf"field 'task_id': must be osworld/{IDS['b']}"):
        load_tasks(rows)
    no_file = {**base, "task_id": f"osworld/{IDS['a']}"}
    rows.write_text(json.dumps(no_file) + "\n")
    with pytest.raises(TaskSpecError, match=r"field 'osworld': is required for osworld/\.\.\. rows"):
        load_tasks(rows)
    stray = {**base, "task_id": "office/calc-total", "osworld": {"file": "x.json"}}
    rows.write_text(json.dumps(stray) + "\n")
    with pytest.raises(TaskSpecError, match=r"field 'osworld': is only for osworld/\.\.\. rows"):
        load_tasks(rows)
