"""What an OSWorld task needs that the boxes lack: steps, getters, metrics or their options, applications
(the programs its commands call, the ones its `related_apps` names, one on screen after its set-up), the
network. `lacks(task)` is empty for a task that runs; the host's loader (sandbox/osworld.py) refuses the
others at load time with this list."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from sandbox.server.osworld.evaluate import as_list
from sandbox.server.osworld.getters import GETTERS
from sandbox.server.osworld.metrics import METRICS, metric
from sandbox.server.osworld.shim import pyautogui_names
from sandbox.server.osworld.steps import OPENERS, STEPS

# Programs OSWorld's tasks run that the office image does not have (Debian lacks some: Chrome, VS Code); a
# set-up command that meets another missing program fails the set-up (steps.execute_step).
# Its chromium is not Chrome for them: their Chrome tasks drive it over DevTools (socat, chrome_open_tabs).
MISSING_PROGRAMS = (
    "google-chrome",
    "gimp",
    "code",
    "vlc",
    "thunderbird",
    "nautilus",
    "gnome-terminal",
    "gsettings",
    "timedatectl",
    "gio",
    "socat",
    "xsel",
    "sudo",
    "apt",
    "pip",
    "wget",
    "curl",
    "git",
    "pulseaudio",
    "pactl",
    "zip",
    "jq",
    "bc",
    "update-desktop-database",
)
_NAMES = "|".join(map(re.escape, MISSING_PROGRAMS))
# A program by name (`thunderbird`, not `my-code.py`), or by path: the last component of an absolute or
# relative path (`/usr/bin/thunderbird`, not `/home/user/code/main.py`).
_PROGRAM = re.compile(rf"(?<![\w./-])({_NAMES})(?![\w-])|(?<=/)({_NAMES})(?![\w./-])")
_PYAUTOGUI_CALL = re.compile(r"pyautogui\.(\w+)")
# GNOME's Ctrl+Alt+T, which OSWorld's set-up presses for a terminal: the shim opens one (shim/pyautogui.py).
_TERMINAL_HOTKEY = re.compile(r"""hotkey\(\s*\[?\s*(['"])ctrl\1\s*,\s*(['"])alt\2\s*,\s*(['"])t\3""")
# What a task's `related_apps` may name that the boxes have: LibreOffice and the desktop's terminal ("os").
_BOX_APPS = re.compile(r"libreoffice.*|calc|writer|impress|os|terminal", re.IGNORECASE)


def _command_lacks(command: Any) -> list[str]:
    text = command if isinstance(command, str) else " ".join(map(str, command or []))
    out = [f"application {m}" for m in sorted({a or b for a, b in _PROGRAM.findall(text)})]
    out += [f"pyautogui.{f}" for f in sorted(set(_PYAUTOGUI_CALL.findall(text)) - pyautogui_names())]
    return out


def _step_lacks(step: dict[str, Any], has_asset: Callable[[str], bool]) -> list[str]:
    kind, params = step.get("type"), step.get("parameters") or {}
    if kind not in STEPS:
        return [f"step {kind}"]
    if kind == "download":
        return [f"asset {f.get('url')}" for f in params.get("files", []) if not has_asset(f.get("url", ""))]
    if kind == "open":
        path = str(params.get("path", ""))
        suffix = PurePosixPath(path).suffix.lower().lstrip(".")
        if suffix and suffix not in OPENERS:
            return [f"an application for .{suffix} files"]
        if not suffix and "/" in path:  # OSWorld opens it with xdg-open (a directory: the file manager)
            return [f"an application to open {path} (a directory or a file without a suffix)"]
        return _command_lacks(params.get("path", ""))
    if kind in ("launch", "execute", "command"):
        return _command_lacks(params.get("command"))
    return []


# OSWorld's VM saves in Microsoft's formats by default, so Ctrl+S on such a file asks nothing there, as in
# the boxes; a LibreOffice document in another foreign format (.csv, .doc, ...) gets its "keep current
# format?" question there, which the boxes' profile never asks (sandbox/server/osworld/libreoffice.py).
_ASKED_ON_SAVE = ("csv", "xls", "doc", "rtf", "ppt")
_SAVE = re.compile(r"""hotkey\(\s*\[?\s*(['"])ctrl\1\s*,\s*(['"])s\2""")
_ENTER = re.compile(r"""press\(\s*(['"])(enter|return)\1""")


def _saves_unanswered(task: dict[str, Any]) -> list[str]:
    """The formats of opened LibreOffice documents whose save OSWorld's VM would stop at its question: the
    postconfig presses Ctrl+S with no Enter after it (the scorer would read the file the agent last saved
    there, and the file Ctrl+S saves here)."""
    opened = {
        PurePosixPath(str((s.get("parameters") or {}).get("path", ""))).suffix.lower().lstrip(".")
        for s in task.get("config") or []
        if s.get("type") == "open"
    } & set(_ASKED_ON_SAVE)
    texts = []
    for step in (task.get("evaluator") or {}).get("postconfig") or []:
        command = (step.get("parameters") or {}).get("command")
        texts.append(command if isinstance(command, str) else " ".join(map(str, command or [])))
    text = "\n".join(texts)  # an Enter may come in a later step
    save = _SAVE.search(text)
    return sorted(opened) if save and not _ENTER.search(text, save.end()) else []


def _shows_an_application(config: list[dict[str, Any]]) -> bool:
    """Whether the set-up puts an application on screen: the boxes have no desktop, launcher or file manager,
    so a task that opens nothing starts on an empty screen where OSWorld's VM shows its desktop."""
    for step in config:
        kind, params = step.get("type"), step.get("parameters") or {}
        if kind in ("open", "launch"):
            return True
        if kind in ("execute", "command"):
            command = params.get("command")
            text = command if isinstance(command, str) else " ".join(map(str, command or []))
            if _TERMINAL_HOTKEY.search(text):
                return True
    return False


def _metric_lacks(func: str, opts: dict[str, Any]) -> list[str]:
    if func not in METRICS:
        return [f"metric {func}"]
    fn = metric(func)
    if func == "compare_table":
        from sandbox.server.osworld.metrics import table

        out = []
        for r in opts.get("rules", []):
            if r.get("type") not in table.RULES:
                out.append(f"compare_table rule {r.get('type')}")
            elif r["type"] == "check_cell":
                out += [
                    f"compare_table check_cell prop {p}"
                    for p in r.get("props", {})
                    if p not in table.CELL_PROPS
                ]
                out += [
                    f"compare_table check_cell method {m['method']}"
                    for m in r.get("props", {}).values()
                    if not str(m.get("method", "")).startswith(table.METHODS)
                ]
        return out
    if func == "compare_pptx_files":
        from sandbox.server.osworld.metrics import slides

        # OSWorld ignores options it does not read; its special position checks are not made here.
        return [f"compare_pptx_files option {k}" for k, v in opts.items() if k in slides.SPECIAL and v]
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    return [f"{func} option {k}" for k in opts if k not in params]


def lacks(task: dict[str, Any], has_asset: Callable[[str], bool] = lambda url: False) -> list[str]:
    """What `task` needs that is missing here, each named once ([] when it runs)."""
    out: list[str] = []
    if task.get("proxy"):
        out.append("the network (proxy: true)")
    ev = task.get("evaluator") or {}
    for step in [*(task.get("config") or []), *(ev.get("postconfig") or [])]:
        out += _step_lacks(step, has_asset)
    funcs = ev.get("func") if isinstance(ev.get("func"), list) else [ev.get("func")]
    if funcs == ["infeasible"]:  # scored from the agent's verdict alone (OSWorld's FAIL: done with failure)
        return list(dict.fromkeys(out))
    # The applications a task is played with: on an empty screen, or without them, it cannot be played.
    if not _shows_an_application(task.get("config") or []):
        out.append("an application on screen (the set-up opens or launches none)")
    out += [
        f"LibreOffice's 'keep current format?' question on Ctrl+S for a .{fmt} file (OSWorld's VM asks it)"
        for fmt in _saves_unanswered(task)
    ]
    apps = task.get("related_apps") or []
    out += [f"application {a} (related_apps)" for a in apps if not _BOX_APPS.fullmatch(str(a))]
    n = len(funcs)
    for key in ("result", "expected", "options"):
        if isinstance(ev.get(key), list) and len(ev[key]) != n:
            out.append(f"a valid evaluator ({key!r} has {len(ev[key])} entries for {n} metrics)")
    if not ev.get("result"):
        out.append("a valid evaluator (no 'result' getter)")
    for func, opts in zip(funcs, as_list(ev.get("options"), n), strict=False):
        out += _metric_lacks(str(func), opts or {})
    for key in ("result", "expected"):
        for spec in as_list(ev.get(key), n):
            if not spec:
                continue
            kind = spec.get("type")
            if kind not in GETTERS:
                out.append(f"getter {kind}")
            elif kind == "cloud_file":
                urls = spec["path"] if isinstance(spec.get("path"), list) else [spec.get("path")]
                out += [f"asset {u}" for u in urls if not has_asset(str(u))]
            elif kind in ("vm_command_line", "vm_command_error"):
                out += _command_lacks(spec.get("command"))
    return list(dict.fromkeys(out))
