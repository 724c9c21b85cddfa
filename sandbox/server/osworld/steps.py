"""OSWorld's set-up step types (`config`, `evaluator.postconfig`), by OSWorld's names.

Each is `fn(env, **parameters)`; a failure raises TaskSetupError (OSWorld aborts the task). Not here (and so
refused at load time, support.py): Chrome's DevTools steps, Google Drive and sign-in, the proxy, browser
history and wallpaper steps.

Deliberate differences from OSWorld's set-up: a `launch` or `execute` whose program is not in the box
aborts the set-up (OSWorld's VM has the program; its controller only logs a failed launch, so the task
would be played without its application); `sleep` waits at most 60 s, an `until` loop 120 s (OSWorld's
loops until its condition holds) and `open` 60 s for the window (OSWorld: 1800 s).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from sandbox.server.osworld.env import OSWORLD_HOME, TaskEnv, TaskSetupError

WINDOW_TIMEOUT_S = 60  # OSWorld waits up to 1800 s for a VM; a box's application is up in seconds
COMMAND_TIMEOUT_S = 120  # as OSWorld's execute

# Files `open` hands to an application (OSWorld's VM uses xdg-open; the boxes have no desktop database).
OPENERS = {
    **dict.fromkeys(("xlsx", "xls", "ods", "csv"), ("soffice", "--calc")),
    **dict.fromkeys(("docx", "doc", "odt", "rtf"), ("soffice", "--writer")),
    **dict.fromkeys(("pptx", "ppt", "odp"), ("soffice", "--impress")),
    **dict.fromkeys(("txt", "md", "py", "json"), ("l3afpad",)),
}


def _spawn(env: TaskEnv, argv: list[str]) -> subprocess.Popen:
    if shutil.which(argv[0], path=env.proc_env()["PATH"]) is None:
        raise TaskSetupError(f"{argv[0]} is not installed in this box")
    proc = subprocess.Popen(
        argv,
        env=env.proc_env(),
        cwd=env.home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,  # killed as one group at the episode's end
    )
    env.procs.append(proc)
    return proc


def windows(env: TaskEnv) -> dict[str, str]:
    """The visible top-level windows: {window id: title}."""
    try:
        ids = env.display.xdotool("search", "--onlyvisible", "--name", ".", timeout=5).split()
    except Exception:
        return {}
    out = {}
    for wid in ids:
        try:
            out[wid] = env.display.xdotool("getwindowname", wid, timeout=5).strip()
        except Exception:
            continue
    return out


def _find_window(env: TaskEnv, name: str, strict: bool = False, by_class: bool = False) -> str | None:
    if by_class:
        try:
            ids = env.display.xdotool(
                "search", "--onlyvisible", "--class", re.escape(name), timeout=5
            ).split()
        except Exception:
            ids = []
        return ids[0] if ids else None
    for wid, title in windows(env).items():
        if (title == name) if strict else (name.lower() in title.lower()):
            return wid
    return None


def _activate(env: TaskEnv, wid: str) -> None:
    for cmd in (("windowactivate", wid), ("windowfocus", wid), ("windowraise", wid)):
        try:
            env.display.xdotool(*cmd, timeout=5)
        except Exception:
            continue


def _settle(env: TaskEnv, deadline: float, first_draw_s: float = 5.0, quiet: float = 0.3) -> None:
    """Until the window is drawn: a window is mapped before its content (LibreOffice shows a grey frame
    while it loads the file), so wait for the first change of the screen (at most `first_draw_s`), then for
    `quiet` seconds without one (shorter than a text cursor's blink)."""
    first = env.display.frame_digest()
    env.display.wait_for_change(first, min(first_draw_s, max(0.0, deadline - time.monotonic())), quiet=quiet)


def download(env: TaskEnv, files: list[dict[str, str]]) -> None:
    for f in files:
        src, dst = env.assets(f["url"]), env.path(f["path"])
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        # A helper script's own VM paths resolve only where /home/user is this home (the image links it).
        if not env.home_is_osworld_home() and OSWORLD_HOME.encode() in dst.read_bytes():
            raise TaskSetupError(f"download: {dst.name} names {OSWORLD_HOME}, which is not this box's home")


def open_(env: TaskEnv, path: str) -> None:
    target = env.path(path)
    if target.exists():
        opener = OPENERS.get(target.suffix.lower().lstrip("."))
        if opener is None:
            raise TaskSetupError(f"open: no application for {target.suffix!r} files in this box")
        _spawn(env, [*opener, str(target)])
    else:
        _spawn(env, env.argv(path, shell=False))
    name = target.name
    deadline = time.monotonic() + WINDOW_TIMEOUT_S
    while time.monotonic() < deadline:
        wid = _find_window(env, name)
        if wid is not None:
            _activate(env, wid)
            _settle(env, deadline)
            return
        time.sleep(0.2)
    raise TaskSetupError(f"open: no window titled with {name!r} after {WINDOW_TIMEOUT_S} s")


def launch(env: TaskEnv, command: str | list[str], shell: bool = False) -> None:
    _spawn(env, env.argv(command, shell))


def execute(
    env: TaskEnv,
    command: str | list[str],
    shell: bool = False,
    stdout: str = "",
    stderr: str = "",
    until: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Runs a command to its end (a non-zero exit does not fail the step, as in OSWorld)."""
    argv = env.argv(command, shell)
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while True:
        try:
            out = subprocess.run(
                argv,
                env=env.proc_env(),
                cwd=env.home,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            result = {"returncode": out.returncode, "output": out.stdout, "error": out.stderr}
        except FileNotFoundError as e:
            raise TaskSetupError(f"execute: {argv[0]} is not installed in this box") from e
        except subprocess.TimeoutExpired:
            result = {"returncode": -1, "output": "", "error": "timeout"}
        if not until or _until_met(until, result) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


# What a set-up command's end says when the box lacks what OSWorld's VM has: bash's 127 and its message for
# a missing program, or a pyautogui call the stand-in cannot make.
_MISSING_PROGRAM = re.compile(r": command not found$", re.MULTILINE)
_SHIM_ERROR = "pyautogui (the boxes' stand-in)"


def execute_step(env: TaskEnv, command: str | list[str], **kw: Any) -> dict[str, Any]:
    """`execute` as a set-up step: a command that cannot run as in OSWorld's VM fails the set-up (a non-zero
    exit otherwise does not, as in OSWorld)."""
    result = execute(env, command, **kw)
    missing = result["returncode"] == 127 or _MISSING_PROGRAM.search(result["error"])
    if missing or _SHIM_ERROR in result["error"]:
        last = result["error"].strip().splitlines()[-1:] or [f"exit {result['returncode']}"]
        raise TaskSetupError(f"the box cannot run it as OSWorld's VM does: {last[0]}")
    return result


def _until_met(until: dict[str, Any], r: dict[str, Any]) -> bool:
    return (
        ("returncode" in until and r["returncode"] == until["returncode"])
        or ("stdout" in until and until["stdout"] in r["output"])
        or ("stderr" in until and until["stderr"] in r["error"])
    )


def sleep(env: TaskEnv, seconds: float) -> None:
    time.sleep(min(float(seconds), 60.0))


def activate_window(env: TaskEnv, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    wid = _find_window(env, window_name, strict, by_class)
    if wid is not None:  # OSWorld's wmctrl -a fails quietly too
        _activate(env, wid)


def close_window(env: TaskEnv, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    wid = _find_window(env, window_name, strict, by_class)
    if wid is not None:
        try:
            env.display.xdotool("windowclose", wid, timeout=5)
        except Exception:
            env.display.xdotool("windowkill", wid, timeout=5)


STEPS: dict[str, Callable[..., Any]] = {
    "download": download,
    "open": open_,
    "launch": launch,
    "execute": execute_step,
    "command": execute_step,
    "sleep": sleep,
    "activate_window": activate_window,
    "close_window": close_window,
}


def run_steps(env: TaskEnv, steps: list[dict[str, Any]], where: str) -> None:
    for i, step in enumerate(steps):
        kind, params = step.get("type"), step.get("parameters") or {}
        fn = STEPS.get(kind)  # type: ignore[arg-type]
        if fn is None:
            raise TaskSetupError(f"{where}[{i}]: step type {kind!r} is not supported")
        try:
            fn(env, **params)
        except TaskSetupError as e:
            raise TaskSetupError(f"{where}[{i}] ({kind}): {e}") from None
        except (TypeError, OSError, subprocess.SubprocessError) as e:
            raise TaskSetupError(f"{where}[{i}] ({kind}): {type(e).__name__}: {e}") from None
