"""OSWorld-shaped task files for the tests, written as OSWorld's repository lays them out:
examples/<domain>/<id>.json, with the files behind their URLs under assets/<host>/<path>."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HF = "https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main"
SAVE = (
    "import pyautogui; import time; pyautogui.hotkey('ctrl', 's'); time.sleep(0.5); pyautogui.press('enter');"
)


def save_steps(window: str, strict: bool = True) -> list[dict[str, Any]]:
    """OSWorld's usual postconfig: focus the window, save (then Enter, as many of its tasks press, for a
    LibreOffice that asks whether to keep the format), wait."""
    return [
        {"type": "activate_window", "parameters": {"window_name": window, "strict": strict}},
        {"type": "sleep", "parameters": {"seconds": 0.5}},
        {"type": "execute", "parameters": {"command": ["python", "-c", SAVE]}},
        {"type": "sleep", "parameters": {"seconds": 1.0}},
    ]


def text_task(task_id: str, domain: str = "os") -> dict[str, Any]:
    """Edit notes.txt in the text editor; scored against a gold file and a directory listing."""
    return {
        "id": task_id,
        "snapshot": "os",
        "instruction": "Put the line 'hello box' at the top of notes.txt on the Desktop and save it.",
        "source": "authors",
        "config": [
            {
                "type": "download",
                "parameters": {
                    "files": [
                        {"url": f"{HF}/{domain}/{task_id}/notes.txt", "path": "/home/user/Desktop/notes.txt"}
                    ]
                },
            },
            {"type": "open", "parameters": {"path": "/home/user/Desktop/notes.txt"}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["os"],
        "evaluator": {
            "postconfig": save_steps("notes.txt", strict=False),
            "func": ["compare_text_file", "check_include_exclude"],
            "conj": "and",
            "result": [
                {"type": "vm_file", "path": "/home/user/Desktop/notes.txt", "dest": "notes.txt"},
                {"type": "vm_command_line", "command": "ls /home/user/Desktop", "shell": True},
            ],
            "expected": [
                {"type": "cloud_file", "path": f"{HF}/{domain}/{task_id}/notes_gold.txt", "dest": "gold.txt"},
                {"type": "rule", "rules": {"include": ["notes.txt"], "exclude": ["notes_gold.txt"]}},
            ],
            "options": [{"ignore_blanks": True}, {}],
        },
        "proxy": False,
        "fixed_ip": False,
        "possibility_of_env_change": "low",
    }


def calc_task(task_id: str) -> dict[str, Any]:
    """Fill a cell of sheet.xlsx in Calc; scored by compare_table against a gold workbook."""
    url = f"{HF}/libreoffice_calc/{task_id}"
    return {
        "id": task_id,
        "snapshot": "libreoffice_calc",
        "instruction": "In sheet.xlsx, write 42 in cell B2 and save the file.",
        "source": "authors",
        "config": [
            {
                "type": "download",
                "parameters": {"files": [{"url": f"{url}/sheet.xlsx", "path": "/home/user/sheet.xlsx"}]},
            },
            {"type": "open", "parameters": {"path": "/home/user/sheet.xlsx"}},
        ],
        "evaluator": {
            "postconfig": save_steps("sheet.xlsx - LibreOffice Calc"),
            "func": "compare_table",
            "result": {"type": "vm_file", "path": "/home/user/sheet.xlsx", "dest": "sheet.xlsx"},
            "expected": {"type": "cloud_file", "path": f"{url}/sheet_gold.xlsx", "dest": "sheet_gold.xlsx"},
            "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
        },
        "proxy": False,
    }


CSV_EXPORT = "csv:Text - txt - csv (StarCalc):44,34,UTF-8,,,,false,true,true,false,false,1"


def calc_print_task(task_id: str) -> dict[str, Any]:
    """calc_task scored as printed: the postconfig saves with Ctrl+S alone, as 45 of OSWorld's office tasks
    do, then exports the sheet as CSV with LibreOffice while the window is open (sheet_print reads it)."""
    task = calc_task(task_id)
    url = f"{HF}/libreoffice_calc/{task_id}"
    ev = task["evaluator"]
    ev["postconfig"] = [
        {
            "type": "activate_window",
            "parameters": {"window_name": "sheet.xlsx - LibreOffice Calc", "strict": True},
        },
        {"type": "sleep", "parameters": {"seconds": 0.5}},
        {
            "type": "execute",
            "parameters": {"command": ["python", "-c", 'import pyautogui; pyautogui.hotkey("ctrl", "s");']},
        },
        {"type": "sleep", "parameters": {"seconds": 0.5}},
        {
            "type": "execute",
            "parameters": {
                "command": [
                    "libreoffice",
                    "--convert-to",
                    CSV_EXPORT,
                    "--outdir",
                    "/home/user",
                    "/home/user/sheet.xlsx",
                ]
            },
        },
    ]
    ev["result"] = {
        "type": "vm_file",
        "multi": True,
        "path": ["/home/user/sheet.xlsx", "/home/user/sheet-Sheet1.csv"],
        "dest": ["sheet.xlsx", "sheet-Sheet1.csv"],
    }
    ev["expected"] = {
        "type": "cloud_file",
        "multi": True,
        "path": [f"{url}/sheet_gold.xlsx", f"{url}/sheet_gold.csv"],
        "dest": ["sheet_gold.xlsx", "sheet_gold-Sheet1.csv"],
    }
    ev["options"] = {"rules": [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]}
    return task


def write(root: Path, domain: str, task: dict[str, Any]) -> Path:
    path = root / "examples" / domain / f"{task['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(task, indent=2))
    return path


def write_asset(root: Path, url: str, data: bytes) -> Path:
    path = root / "assets" / url.split("://", 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
