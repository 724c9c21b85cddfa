"""Typed actions: validation of a JSON payload and its translation to one chained xdotool command.

Every malformed payload raises ActionError with a message naming the field; the HTTP layer turns it
into a 400 and keeps serving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class ActionError(ValueError):
    pass


ACTION_TYPES = ("click", "double_click", "right_click", "move", "drag", "scroll", "type", "key", "wait")
BUTTONS = {"left": "1", "middle": "2", "right": "3"}
MAX_TEXT = 2000
MAX_WAIT_S = 10.0
MAX_SCROLL = 50

# Friendly names for X keysyms; anything else must already be a keysym-like token.
KEY_ALIASES = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
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
    "ctrl": "ctrl",
    "control": "ctrl",
    "alt": "alt",
    "shift": "shift",
    "super": "super",
    "win": "super",
    "cmd": "super",
    "meta": "super",
}
_KEY_TOKEN = re.compile(r"^(?:[A-Za-z0-9]|[A-Za-z][A-Za-z0-9_]{1,30})$")


@dataclass(frozen=True)
class Action:
    type: str
    xdotool: list[str]  # arguments of one chained xdotool call (empty for wait)
    pointer: tuple[int, int] | None = None  # where the pointer must end up
    wait_s: float = 0.0


def _int(payload: dict, field: str, lo: int, hi: int, default: int | None = None) -> int:
    if field not in payload:
        if default is not None:
            return default
        raise ActionError(f"'{field}' is required for action '{payload.get('type')}'")
    val = payload[field]
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise ActionError(f"'{field}' must be a number, got {type(val).__name__}")
    if val != val or not lo <= val <= hi:  # NaN or out of range
        raise ActionError(f"'{field}'={val} is outside [{lo}, {hi}]")
    return round(val)


def _keysym(token: str) -> str:
    tok = token.strip()
    if not tok:
        raise ActionError("empty key name in 'keys'")
    mapped = KEY_ALIASES.get(tok.lower(), tok)
    if not _KEY_TOKEN.match(mapped):
        raise ActionError(f"invalid key name {token!r}")
    return mapped


def parse_keys(keys: Any) -> str:
    """'ctrl+s' or ['ctrl', 's'] -> 'ctrl+s' in xdotool syntax."""
    if isinstance(keys, str):
        parts = keys.split("+") if keys != "+" else ["plus"]
    elif isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys):
        parts = keys
    else:
        raise ActionError("'keys' must be a string like 'ctrl+s' or a non-empty list of key names")
    if len(parts) > 5:
        raise ActionError("'keys' combines at most 5 keys")
    return "+".join(_keysym(p) for p in parts)


def parse_action(payload: Any, width: int, height: int) -> Action:
    if not isinstance(payload, dict):
        raise ActionError("action must be a JSON object")
    kind = payload.get("type")
    if kind not in ACTION_TYPES:
        raise ActionError(f"'type' must be one of {', '.join(ACTION_TYPES)}; got {kind!r}")

    def xy(fx: str = "x", fy: str = "y") -> tuple[int, int]:
        return _int(payload, fx, 0, width - 1), _int(payload, fy, 0, height - 1)

    if kind in ("click", "double_click", "right_click", "move"):
        x, y = xy()
        move = ["mousemove", str(x), str(y)]
        if kind == "move":
            return Action(kind, move, (x, y))
        button = payload.get("button", "right" if kind == "right_click" else "left")
        if button not in BUTTONS:
            raise ActionError(f"'button' must be one of {', '.join(BUTTONS)}; got {button!r}")
        repeat = "2" if kind == "double_click" else "1"
        # --delay 0: xdotool's default sleeps 100 ms after each click.
        return Action(
            kind,
            [*move, "click", "--repeat", repeat, "--delay", "60" if repeat == "2" else "0", BUTTONS[button]],
            (x, y),
        )
    if kind == "drag":
        x, y = xy()
        tx, ty = xy("to_x", "to_y")
        # Intermediate moves so that pages see real drag motion (HTML5 drag needs several events).
        mid = [(x + (tx - x) * i // 4, y + (ty - y) * i // 4) for i in range(1, 4)]
        args = ["mousemove", str(x), str(y), "mousedown", "1"]
        for mx, my in mid:
            args += ["mousemove", str(mx), str(my), "sleep", "0.02"]
        args += ["mousemove", str(tx), str(ty), "sleep", "0.02", "mouseup", "1"]
        return Action(kind, args, (tx, ty))
    if kind == "scroll":
        x, y = xy()
        dx = _int(payload, "dx", -MAX_SCROLL, MAX_SCROLL, 0)
        dy = _int(payload, "dy", -MAX_SCROLL, MAX_SCROLL, 0)
        if dx == 0 and dy == 0:
            raise ActionError("scroll needs a non-zero 'dx' or 'dy' (wheel clicks; positive = down/right)")
        args = ["mousemove", str(x), str(y)]
        for amount, neg, pos in ((dy, "4", "5"), (dx, "6", "7")):
            if amount:
                args += ["click", "--repeat", str(abs(amount)), "--delay", "10", pos if amount > 0 else neg]
        return Action(kind, args, (x, y))
    if kind == "type":
        text = payload.get("text")
        if not isinstance(text, str) or not text:
            raise ActionError("'text' must be a non-empty string")
        if len(text) > MAX_TEXT:
            raise ActionError(f"'text' is longer than {MAX_TEXT} characters")
        if "\x00" in text:
            raise ActionError("'text' contains a NUL character")
        # "--" so text starting with '-' is not read as an option.
        return Action(kind, ["type", "--clearmodifiers", "--delay", "8", "--", text])
    if kind == "key":
        return Action(kind, ["key", "--clearmodifiers", parse_keys(payload.get("keys"))])
    # wait
    secs = payload.get("seconds", 1.0)
    if isinstance(secs, bool) or not isinstance(secs, int | float) or not 0 <= secs <= MAX_WAIT_S:
        raise ActionError(f"'seconds' must be a number in [0, {MAX_WAIT_S}]")
    return Action(kind, [], None, float(secs))
