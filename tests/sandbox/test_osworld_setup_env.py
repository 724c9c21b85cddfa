"""OSWorld's set-up as its VM runs it, without a box: task paths and commands as the VM resolves and runs them
(relative paths in the task home, an en_US.UTF-8 locale), set-up commands whose program is missing fail the
set-up, and the pyautogui stand-in does what pyautogui does on X11 or says why it cannot (here on a recording
xdotool)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.server.osworld.env import SHIM, TaskEnv, TaskSetupError
from sandbox.server.osworld.steps import run_steps


class FakeDisplay:
    width, height = 1920, 1080

    def env(self) -> dict[str, str]:
        return {**os.environ, "DISPLAY": ":99"}


def _env(home: Path, files: dict[str, Path] | None = None) -> TaskEnv:
    return TaskEnv(FakeDisplay(), home, lambda url: (files or {})[url])  # type: ignore[arg-type]


def test_relative_task_paths_are_in_the_task_home(tmp_path, monkeypatch):  # os/6f56bf42 `setup.sh`
    home, elsewhere, src = tmp_path / "home", tmp_path / "elsewhere", tmp_path / "setup.sh"
    home.mkdir(), elsewhere.mkdir()
    src.write_text("#!/bin/sh\necho made > made.txt\n")
    monkeypatch.chdir(elsewhere)  # the server's cwd is not the task home (local backend: CUA_TASK_HOME)
    env = _env(home, {"https://x/setup.sh": src})
    assert env.path("Downloads/a.pptx") == home / "Downloads/a.pptx"
    assert env.path("/home/user/a.txt") == home / "a.txt"
    run_steps(
        env,
        [
            {
                "type": "download",
                "parameters": {"files": [{"url": "https://x/setup.sh", "path": "setup.sh"}]},
            },
            {"type": "execute", "parameters": {"command": "chmod +x setup.sh", "shell": True}},
            {"type": "execute", "parameters": {"command": "./setup.sh", "shell": True}},
        ],
        "config",
    )
    assert (home / "made.txt").read_text() == "made\n" and not (elsewhere / "setup.sh").exists()


def test_task_commands_run_in_the_vm_locale(tmp_path, monkeypatch):
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_ALL", "C")
    monkeypatch.setenv("LC_COLLATE", "C")
    env = _env(tmp_path).proc_env()
    assert env["LANG"] == "en_US.UTF-8"
    assert not {k for k in env if k.startswith("LC_")}  # nothing overrides LANG, as in the VM's session


@pytest.mark.parametrize(
    "command",
    [
        "unzip-nowhere /home/user/Desktop/a.zip -d /home/user/Desktop/ && rm a.zip",  # exits 127
        "no-such-program --start\necho still here",  # exits 0, the missing program said so on stderr
        ["no-such-program", "--version"],  # no shell: the program itself is missing
    ],
)
def test_a_setup_command_whose_program_is_missing_fails_the_setup(tmp_path, command):
    env = _env(tmp_path)
    step = {"type": "execute", "parameters": {"command": command, "shell": isinstance(command, str)}}
    with pytest.raises(TaskSetupError, match=r"config\[0\] \(execute\): .*no-such-program|unzip-nowhere"):
        run_steps(env, [step], "config")


@pytest.mark.parametrize("command", ["exit 3", "cat /no/such/file; rm /no/such/file"])
def test_a_setup_command_that_fails_otherwise_goes_on_as_in_osworld(tmp_path, command):
    env = _env(tmp_path)
    run_steps(env, [{"type": "execute", "parameters": {"command": command, "shell": True}}], "config")


def test_a_downloaded_script_naming_home_user_fails_where_home_user_is_not_the_home(tmp_path):
    """Inside the image /home/user is a link to the box's home; a task home elsewhere (the local backend)
    would run the VM's paths in a folder that does not exist."""
    home, src = tmp_path / "home", tmp_path / "eval.sh"
    home.mkdir()
    src.write_text("test -f /home/user/out.txt && echo ok\n")
    assert not Path("/home/user").exists()  # this host has no such folder
    env = _env(home, {"https://x/eval.sh": src})
    download = {
        "type": "download",
        "parameters": {"files": [{"url": "https://x/eval.sh", "path": "eval.sh"}]},
    }
    with pytest.raises(TaskSetupError, match=r"eval\.sh names /home/user"):
        run_steps(env, [download], "evaluator.postconfig")


# The shim, run as a task command runs it, on an xdotool that records its arguments.
RECORDER = """#!/bin/sh
printf '%s\\n' "$*" >> "$XDOTOOL_LOG"
if [ "$1" = search ]; then [ -f "$XDOTOOL_LOG.window" ] || exit 1; echo 4242; fi
"""
XTERM = """#!/bin/sh
echo "xterm $* in $PWD" >> "$XDOTOOL_LOG"; touch "$XDOTOOL_LOG.window"
"""


def _shim(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir, log = tmp_path / "bin", tmp_path / "xdotool.log"
    bin_dir.mkdir(exist_ok=True)
    for name in ("xdotool", "xterm"):
        tool = bin_dir / name
        tool.write_text(RECORDER if name == "xdotool" else XTERM)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(SHIM),
        "DISPLAY": ":99",
        "XDOTOOL_LOG": str(log),
        "HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", f"import pyautogui; pyautogui.PAUSE = 0\n{code}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    ("code", "sent"),
    [
        (
            "pyautogui.hotkey(['shift', 'ctrl', 'e'])",
            "key --clearmodifiers Shift_L+Control_L+e",
        ),  # GIMP export
        (
            "pyautogui.hotkey('Ctrl', 'S')",
            "key --clearmodifiers Control_L+S",
        ),  # names lowered, characters not
        ("pyautogui.press('pgdn')", "key --clearmodifiers Page_Down"),
        ("pyautogui.press(['prtsc'])", "key --clearmodifiers Print"),
        ("pyautogui.press('!')", "key --clearmodifiers exclam"),
        ("pyautogui.keyDown('shiftleft')", "keydown Shift_L"),
        ("pyautogui.press('num5')", "key --clearmodifiers KP_5"),
        ("pyautogui.click(button='primary')", "click --repeat 1 1"),
        ("pyautogui.click(button='SECONDARY')", "click --repeat 1 3"),
        ("pyautogui.mouseDown(button=2)", "mousedown 2"),
        (
            "pyautogui.typewrite(['a', 'Left', 'b'])",
            [f"key --clearmodifiers {k}" for k in ("a", "Left", "b")],
        ),
        ("pyautogui.scroll(0)", []),
    ],
)
def test_the_shim_sends_what_pyautogui_sends_on_x11(tmp_path, code, sent):
    out, calls = _shim(tmp_path, code)
    assert out.returncode == 0, out.stderr
    assert calls == (sent if isinstance(sent, list) else [sent])


@pytest.mark.parametrize(
    ("code", "named"),
    [
        ("pyautogui.press('pgdown')", "'pgdown'"),  # not a key pyautogui knows: it would do nothing
        ("pyautogui.hotkey('win', 'e')", "'win'"),  # pyautogui knows it but sends nothing on X11
        ("pyautogui.click(button='fourth')", "'fourth'"),
    ],
)
def test_the_shim_refuses_a_key_or_button_it_cannot_send_naming_it(tmp_path, code, named):
    out, calls = _shim(tmp_path, code)
    assert out.returncode != 0 and named in out.stderr and "pyautogui (the boxes' stand-in)" in out.stderr
    assert calls == []


def test_ctrl_alt_t_opens_a_terminal_titled_terminal_in_the_home_as_gnome_does(tmp_path):
    """OSWorld's VM opens GNOME's terminal on Ctrl+Alt+T; the boxes' window manager has no such binding, so
    the shim starts one, waits for its window, and records it for the end of the episode."""
    spawned = tmp_path / "spawned"
    out, calls = _shim(
        tmp_path,
        f"import os; os.environ['CUA_OSWORLD_SPAWNED'] = {str(spawned)!r}\n"
        "pyautogui.hotkey('ctrl', 'alt', 't')",
    )
    assert out.returncode == 0, out.stderr
    assert f"xterm -T Terminal -xrm XTerm*allowTitleOps: false in {tmp_path}" in calls
    assert any(c.startswith("search ") and "Terminal" in c for c in calls)
    assert not any(c.startswith("key ") for c in calls)  # the keys themselves go nowhere, as GNOME eats them
    assert [int(p) for p in spawned.read_text().split()]  # the terminal's process group, killed at the end


def test_the_loader_knows_every_function_the_shim_provides():
    from sandbox.server.osworld.shim import pyautogui_names

    assert {"hotkey", "press", "click", "keyDown", "typewrite"} <= pyautogui_names()
    assert json.dumps(sorted(pyautogui_names()))  # names only, read without a display


def test_what_the_shim_left_running_ends_with_the_episode(tmp_path):
    env = _env(tmp_path)
    record = Path(env.proc_env()["CUA_OSWORLD_SPAWNED"])
    left = subprocess.Popen(["sleep", "60"], process_group=0)  # as the shim starts its terminal
    record.write_text(f"{left.pid}\n")
    env.kill_all()
    assert left.wait(timeout=5) == -9 and not record.exists()
