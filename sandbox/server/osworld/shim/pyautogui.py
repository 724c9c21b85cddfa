"""A stand-in for PyAutoGUI inside the boxes, on xdotool: OSWorld's task files drive the desktop with
`python -c "import pyautogui; pyautogui.hotkey('ctrl', 's')"` (most office tasks save that way before they
are scored). Only the calls those files make are here; anything else is an AttributeError naming it.
The executor puts this folder first on PYTHONPATH for the commands a task runs (sandbox/server/osworld/steps.py).
"""

from __future__ import annotations

import os
import subprocess
import time

KEYS = {
    "ctrl": "ctrl",
    "control": "ctrl",
    "shift": "shift",
    "alt": "alt",
    "win": "super",
    "command": "super",
    "enter": "Return",
    "return": "Return",
    "tab": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "space": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pagedown": "Next",
    "insert": "Insert",
    "capslock": "Caps_Lock",
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
}
BUTTONS = {"left": "1", "middle": "2", "right": "3"}
PAUSE = 0.1  # PyAutoGUI's default pause after each call


def _xdotool(*args: str) -> str:
    out = subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=30, check=True)
    time.sleep(PAUSE)
    return out.stdout


def _key(name: str) -> str:
    return KEYS.get(name.lower(), name)


def hotkey(*keys: str, interval: float = 0.0) -> None:
    _xdotool("key", "--clearmodifiers", "+".join(_key(k) for k in keys))


def press(keys: str | list[str], presses: int = 1, interval: float = 0.0) -> None:
    for _ in range(presses):
        for k in [keys] if isinstance(keys, str) else keys:
            _xdotool("key", "--clearmodifiers", _key(k))
            time.sleep(interval)


def keyDown(key: str) -> None:
    _xdotool("keydown", _key(key))


def keyUp(key: str) -> None:
    _xdotool("keyup", _key(key))


def write(message: str, interval: float = 0.0) -> None:
    _xdotool("type", "--delay", str(max(1, int(interval * 1000))), "--", message)


typewrite = write


def moveTo(x: float, y: float, duration: float = 0.0, **_: object) -> None:
    _xdotool("mousemove", str(int(x)), str(int(y)))


def click(
    x: float | None = None,
    y: float | None = None,
    clicks: int = 1,
    interval: float = 0.0,
    button: str = "left",
    **_: object,
) -> None:
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("click", "--repeat", str(clicks), BUTTONS[button])


def doubleClick(x: float | None = None, y: float | None = None, **kw: object) -> None:
    click(x, y, clicks=2, **kw)  # type: ignore[arg-type]


def rightClick(x: float | None = None, y: float | None = None, **kw: object) -> None:
    click(x, y, button="right", **kw)  # type: ignore[arg-type]


def mouseDown(x: float | None = None, y: float | None = None, button: str = "left", **_: object) -> None:
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("mousedown", BUTTONS[button])


def mouseUp(x: float | None = None, y: float | None = None, button: str = "left", **_: object) -> None:
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("mouseup", BUTTONS[button])


def dragTo(x: float, y: float, duration: float = 0.0, button: str = "left", **_: object) -> None:
    mouseDown(button=button)
    moveTo(x, y)
    mouseUp(button=button)


def scroll(clicks: int, x: float | None = None, y: float | None = None) -> None:
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("click", "--repeat", str(abs(clicks)), "4" if clicks > 0 else "5")


def size() -> tuple[int, int]:
    w, h = _xdotool("getdisplaygeometry").split()
    return int(w), int(h)


def position() -> tuple[int, int]:
    fields = dict(kv.split("=") for kv in _xdotool("getmouselocation", "--shell").split())
    return int(fields["X"]), int(fields["Y"])


FAILSAFE = False
if not os.environ.get("DISPLAY"):
    raise RuntimeError("pyautogui (the boxes' stand-in): DISPLAY is not set")
