"""A stand-in for PyAutoGUI inside the boxes, on xdotool: OSWorld's task files drive the desktop with
`python -c "import pyautogui; pyautogui.hotkey('ctrl', 's')"` (most office tasks save that way before they
are scored). Only the calls those files make are here; anything else is an AttributeError naming it, and a
key or button pyautogui would not send on X11 is a ShimError naming it (a set-up step that meets one fails).
The executor puts this folder first on PYTHONPATH for the commands a task runs (sandbox/server/osworld/steps.py).
"""

from __future__ import annotations

import os
import subprocess
import time

# pyautogui's key names that its X11 backend sends, as X keysyms. Its other names (`win`, `command`,
# `volumeup`, ...) send nothing on X11, and an unknown name is ignored there: here both raise, naming the key.
_NAMED = {
    "backspace": "BackSpace",
    "tab": "Tab",
    "enter": "Return",
    "return": "Return",
    "shift": "Shift_L",
    "shiftleft": "Shift_L",
    "shiftright": "Shift_R",
    "ctrl": "Control_L",
    "ctrlleft": "Control_L",
    "ctrlright": "Control_R",
    "alt": "Alt_L",
    "altleft": "Alt_L",
    "altright": "Alt_R",
    "winleft": "Super_L",
    "winright": "Super_R",
    "pause": "Pause",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    "esc": "Escape",
    "escape": "Escape",
    "pgup": "Page_Up",
    "pageup": "Page_Up",
    "pgdn": "Page_Down",
    "pagedown": "Page_Down",
    "end": "End",
    "home": "Home",
    "left": "Left",
    "up": "Up",
    "right": "Right",
    "down": "Down",
    "select": "Select",
    "execute": "Execute",
    "help": "Help",
    "insert": "Insert",
    "del": "Delete",
    "delete": "Delete",
    "apps": "Menu",
    "space": "space",
    **dict.fromkeys(("print", "prtsc", "prtscr", "prntscrn", "printscreen"), "Print"),
    **{f"num{i}": f"KP_{i}" for i in range(10)},
    "multiply": "KP_Multiply",
    "add": "KP_Add",
    "separator": "KP_Separator",
    "subtract": "KP_Subtract",
    "decimal": "KP_Decimal",
    "divide": "KP_Divide",
    **{f"f{i}": f"F{i}" for i in range(1, 25)},
}
_CHARACTERS = {
    **{c: c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"},
    " ": "space",
    "\t": "Tab",
    "\n": "Return",
    "\r": "Return",
    "\b": "BackSpace",
    **dict(
        zip(
            "!#%$&\"'()*=+,-./:;<>?@[]\\^_`{|}~",
            [
                "exclam",
                "numbersign",
                "percent",
                "dollar",
                "ampersand",
                "quotedbl",
                "apostrophe",
                "parenleft",
                "parenright",
                "asterisk",
                "equal",
                "plus",
                "comma",
                "minus",
                "period",
                "slash",
                "colon",
                "semicolon",
                "less",
                "greater",
                "question",
                "at",
                "bracketleft",
                "bracketright",
                "backslash",
                "asciicircum",
                "underscore",
                "grave",
                "braceleft",
                "bar",
                "braceright",
                "asciitilde",
            ],
            strict=True,
        )
    ),
}
# Buttons as pyautogui on X11 takes them (`primary`/`secondary`: left/right, as on an unswapped mouse).
BUTTONS = {"left": "1", "middle": "2", "right": "3", "primary": "1", "secondary": "3"}
BUTTONS.update({str(i): str(i) for i in range(1, 8)})
PAUSE = 0.1  # PyAutoGUI's default pause after each call
# GNOME's shortcut for a terminal in OSWorld's VM, which its set-up presses: the boxes' window manager has no
# such binding, so this opens the terminal GNOME would (titled "Terminal", in the home folder).
TERMINAL_KEYS = ("ctrl", "alt", "t")
TERMINAL_WAIT_S = 10.0


class ShimError(ValueError):
    """A call pyautogui makes that the stand-in cannot make as pyautogui would."""

    def __init__(self, what: str) -> None:
        super().__init__(f"pyautogui (the boxes' stand-in): {what}")


def _xdotool(*args: str) -> str:
    out = subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=30, check=True)
    time.sleep(PAUSE)
    return out.stdout


def _name(key: str) -> str:
    return key.lower() if len(key) > 1 else key  # as pyautogui: names are lowered, characters are not


def _key(key: str) -> str:
    keysym = _NAMED.get(_name(key)) or _CHARACTERS.get(key)
    if keysym is None:
        raise ShimError(f"key {key!r} sends nothing in pyautogui on X11 (not one of its keys there)")
    return keysym


def _button(button: str | int) -> str:
    b = str(button).lower()
    if b not in BUTTONS:
        raise ShimError(f"button {button!r} is not one of pyautogui's on X11: {sorted(BUTTONS)}")
    return BUTTONS[b]


def _open_terminal() -> None:
    """Starts a terminal in the home folder and waits for its window; its process group is recorded where
    the task's environment says, so that it ends with the episode."""
    before = _terminals()
    proc = subprocess.Popen(
        ["xterm", "-T", "Terminal", "-xrm", "XTerm*allowTitleOps: false"],  # a shell's prompt keeps the title
        cwd=os.environ.get("HOME") or os.getcwd(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    record = os.environ.get("CUA_OSWORLD_SPAWNED")
    if record:
        with open(record, "a") as f:
            f.write(f"{proc.pid}\n")
    deadline = time.monotonic() + TERMINAL_WAIT_S
    while time.monotonic() < deadline:
        if _terminals() - before:
            return
        time.sleep(0.1)
    raise ShimError(f"Ctrl+Alt+T: no terminal window after {TERMINAL_WAIT_S:.0f} s")


def _terminals() -> set[str]:
    try:
        return set(_xdotool("search", "--onlyvisible", "--name", "^Terminal$").split())
    except subprocess.CalledProcessError:  # xdotool search exits 1 when nothing matches
        return set()


def _keys(args: tuple) -> list[str]:
    """hotkey's keys: separate arguments, or one list of them (pyautogui 0.9.54)."""
    if len(args) == 1 and not isinstance(args[0], str):
        return list(args[0])
    return list(args)


def hotkey(*args: str | list[str], interval: float = 0.0, **_: object) -> None:
    keys = _keys(args)
    if tuple(_name(k) for k in keys) == TERMINAL_KEYS:
        _open_terminal()
        return
    _xdotool("key", "--clearmodifiers", "+".join(_key(k) for k in keys))


def press(keys: str | list[str], presses: int = 1, interval: float = 0.0, **_: object) -> None:
    names = [keys] if isinstance(keys, str) else list(keys)
    keysyms = [_key(k) for k in names]  # every name checked before anything is sent
    for _i in range(presses):
        for k in keysyms:
            _xdotool("key", "--clearmodifiers", k)
            time.sleep(interval)


def keyDown(key: str, **_: object) -> None:
    _xdotool("keydown", _key(key))


def keyUp(key: str, **_: object) -> None:
    _xdotool("keyup", _key(key))


def write(message: str | list[str], interval: float = 0.0, **_: object) -> None:
    if not isinstance(message, str):  # pyautogui: a list of key names, each pressed
        for key in message:
            press(key, interval=interval)
        return
    _xdotool("type", "--delay", str(max(1, int(interval * 1000))), "--", message)


typewrite = write


def moveTo(x: float, y: float, duration: float = 0.0, **_: object) -> None:
    _xdotool("mousemove", str(int(x)), str(int(y)))


def click(
    x: float | None = None,
    y: float | None = None,
    clicks: int = 1,
    interval: float = 0.0,
    button: str | int = "left",
    **_: object,
) -> None:
    b = _button(button)
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("click", "--repeat", str(clicks), b)


def doubleClick(x: float | None = None, y: float | None = None, **kw: object) -> None:
    click(x, y, clicks=2, **kw)  # type: ignore[arg-type]


def rightClick(x: float | None = None, y: float | None = None, **kw: object) -> None:
    click(x, y, button="right", **kw)  # type: ignore[arg-type]


def mouseDown(
    x: float | None = None, y: float | None = None, button: str | int = "left", **_: object
) -> None:
    b = _button(button)
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("mousedown", b)


def mouseUp(x: float | None = None, y: float | None = None, button: str | int = "left", **_: object) -> None:
    b = _button(button)
    if x is not None and y is not None:
        moveTo(x, y)
    _xdotool("mouseup", b)


def dragTo(x: float, y: float, duration: float = 0.0, button: str | int = "left", **_: object) -> None:
    mouseDown(button=button)
    moveTo(x, y)
    mouseUp(button=button)


def scroll(clicks: int, x: float | None = None, y: float | None = None, **_: object) -> None:
    clicks = int(clicks)
    if x is not None and y is not None:
        moveTo(x, y)
    if clicks:  # as pyautogui: no clicks, no wheel
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
