"""Load-time refusals that keep the runnable OSWorld tasks faithful: programs given by path, `open` of a
directory, and `compare_pptx_files` options (refused when the boxes do not make a check OSWorld makes,
accepted when OSWorld ignores them)."""

from __future__ import annotations

import pytest

from sandbox.server.osworld.support import _command_lacks, lacks


def _task(config: list[dict], evaluator: dict | None = None) -> dict:
    return {
        "id": "t",
        "config": config,
        "evaluator": evaluator
        or {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": "cat /home/user/out.txt"},
            "expected": {"type": "rule", "rules": {"include": ["ok"]}},
        },
    }


@pytest.mark.parametrize(
    "command",
    [
        ["/usr/bin/thunderbird"],
        "/usr/bin/thunderbird -compose",
        ["bash", "-c", "/usr/bin/gimp image.png"],
        ["./code", "--new-window"],
    ],
)
def test_a_missing_program_given_by_path_is_named(command):
    assert _command_lacks(command) != []
    assert any(name in _command_lacks(command)[0] for name in ("thunderbird", "gimp", "code"))


@pytest.mark.parametrize(
    "command",
    [
        ["python3", "/home/user/code/main.py"],
        "cat /home/user/git/notes.txt",
        ["soffice", "/home/user/Desktop/sudo.pptx"],
        "ls /home/user/my-code",
    ],
)
def test_a_path_through_a_folder_of_that_name_is_no_program(command):
    assert _command_lacks(command) == []


def test_a_task_launching_thunderbird_by_path_is_refused():  # thunderbird/a1af9f1c, multi_apps/c867c42d
    task = _task([{"type": "launch", "parameters": {"command": ["/usr/bin/thunderbird"]}}])
    assert lacks(task) == ["application thunderbird"]


def test_open_of_a_directory_is_refused():  # multi_apps/881deb30
    task = _task([{"type": "open", "parameters": {"path": "/home/user/Desktop/Fundings/grf"}}])
    assert lacks(task) == [
        "an application to open /home/user/Desktop/Fundings/grf (a directory or a file without a suffix)"
    ]
    opened = _task([{"type": "open", "parameters": {"path": "/home/user/Desktop/report.docx"}}])
    assert lacks(opened) == []


def _pptx(options: dict) -> dict:
    return _task(
        [],
        {
            "func": "compare_pptx_files",
            "result": {"type": "vm_file", "path": "/home/user/a.pptx", "dest": "a.pptx"},
            "expected": {"type": "cloud_file", "path": "https://example.com/gold.pptx", "dest": "gold.pptx"},
            "options": options,
        },
    )


@pytest.mark.parametrize(
    "options",
    [
        {"examine_shape_for_shift_size": True},  # off by default in OSWorld: on, it is a check not made here
        {"examine_modify_height": True, "examine_shape": False},
        {"examine_image_size": True},
        {"examine_title_bottom_position": True},
    ],
)
def test_pptx_special_checks_turned_on_are_refused(options):
    assert [r for r in lacks(_pptx(options)) if "option" in r] == [
        f"compare_pptx_files option {k}" for k, v in options.items() if v and k != "examine_shape"
    ]


@pytest.mark.parametrize(
    "options",
    [
        {"examine_shape_lenient_height": True},  # OSWorld ignores it (libreoffice_impress/04578141)
        {"examine_run_count": False},  # not an OSWorld option: run counts are always compared there
        {"examine_shape_for_shift_size": False, "examine_background_color": False, "examine_bullets": True},
        {"examine_indent": False, "approximately_tolerance": 0.01, "enable_debug": False},
    ],
)
def test_pptx_options_osworld_reads_or_ignores_are_accepted(options):
    assert [r for r in lacks(_pptx(options)) if "option" in r] == []


def _shown(config: list[dict], **fields) -> dict:
    return {**_task(config), **fields}


DOWNLOAD = {
    "type": "download",
    "parameters": {"files": [{"url": "https://example.com/a.docx", "path": "/home/user/Desktop/a.docx"}]},
}
CLICK = {
    "type": "execute",
    "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.click(9, 9)"]},
}
TERMINAL = {
    "type": "execute",
    "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')"]},
}
NOTHING_SHOWN = "an application on screen (the set-up opens or launches none)"


@pytest.mark.parametrize("config", [[], [DOWNLOAD], [DOWNLOAD, CLICK]])
def test_a_task_whose_setup_shows_no_application_is_refused(config):  # multi_apps/1f18aa87, os/94d95f96
    assert NOTHING_SHOWN in lacks(_shown(config), lambda url: True)


def test_an_infeasible_task_needs_no_application_on_screen():  # the agent only has to give up
    task = _shown([], evaluator={"func": "infeasible"})
    assert lacks(task) == []


@pytest.mark.parametrize(
    "step",
    [
        TERMINAL,  # GNOME's Ctrl+Alt+T in OSWorld's VM: the box opens a terminal for it
        {"type": "open", "parameters": {"path": "/home/user/Desktop/a.docx"}},
        {"type": "launch", "parameters": {"command": ["soffice", "--calc"]}},
    ],
)
def test_a_task_whose_setup_opens_an_application_or_the_terminal_shows_one(step):
    assert lacks(_shown([DOWNLOAD, step]), lambda url: True) == []


@pytest.mark.parametrize(
    ("apps", "missing"),
    [
        (["vscode", "libreoffice_writer", "os"], ["vscode"]),  # multi_apps/20236825
        (["chrome", "os", "image"], ["chrome", "image"]),  # multi_apps/ce2b64a2
        (["libreoffice_calc", "pdf"], ["pdf"]),
    ],
)
def test_a_task_that_needs_an_application_the_box_lacks_is_refused(apps, missing):
    task = _shown([DOWNLOAD, {"type": "open", "parameters": {"path": "/home/user/Desktop/a.docx"}}])
    task["related_apps"] = apps
    assert lacks(task, lambda url: True) == [f"application {a} (related_apps)" for a in missing]


@pytest.mark.parametrize(
    "apps", [["libreoffice calc", "Writer", "libreoffice_impress", "os", "OS", "terminal", "calc"], []]
)
def test_the_box_has_the_office_suite_and_the_terminal(apps):
    task = _shown([TERMINAL], related_apps=apps)
    assert lacks(task) == []


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("pulseaudio --start\npactl list sinks | grep Volume", "pactl"),  # os/28cc3b7e
        (["bash", "-c", "cd ~/Desktop && zip -r out.zip src"], "zip"),
        ("cat data.json | jq .name", "jq"),
        ("echo '1+1' | bc", "bc"),
    ],
)
def test_programs_osworld_commands_call_that_the_image_lacks_are_named(command, program):
    assert f"application {program}" in _command_lacks(command)


def test_unzip_is_in_the_image():  # multi_apps/20236825, f918266a, 869de13e
    assert _command_lacks(["/bin/bash", "-c", "unzip /home/user/Desktop/a.zip -d /home/user/Desktop/"]) == []


def _saved(path: str, *presses: str) -> dict:
    """A task that opens `path` and whose postconfig saves it with Ctrl+S (then `presses`), as OSWorld's do."""
    keys = "".join(f"pyautogui.press('{k}');" for k in presses)
    save = {
        "type": "execute",
        "parameters": {
            "command": ["python", "-c", f"import pyautogui; pyautogui.hotkey('ctrl', 's');{keys}"]
        },
    }
    task = _shown([{"type": "open", "parameters": {"path": path}}])
    task["evaluator"] = {**task["evaluator"], "postconfig": [save]}
    return task


@pytest.mark.parametrize(
    ("path", "presses", "refused"),
    [
        ("/home/user/a.csv", (), True),  # OSWorld's VM asks "keep current format?": the save waits there
        ("/home/user/a.doc", (), True),
        ("/home/user/a.csv", ("enter",), False),  # Enter answers it: saved in both
        ("/home/user/a.xlsx", (), False),  # its default formats: no question in either
        ("/home/user/a.odt", (), False),  # LibreOffice's own: no question
    ],
)
def test_a_save_that_osworlds_vm_would_stop_at_libreoffices_format_question_is_refused(
    path, presses, refused
):
    found = [why for why in lacks(_saved(path, *presses), lambda url: True) if "keep current format" in why]
    assert bool(found) == refused, found
