"""Validation of a wire payload (protocol.py) and its translation to one chained xdotool command.

Every malformed payload raises ActionError with a message naming the field; the HTTP layer turns it
into a 400 and keeps serving. Numbers may be JSON floats (rounded) and must lie on this screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.server.protocol import (
    ACTION_TYPES,
    BUTTONS,
    DEFAULT_BUTTON,
    DEFAULT_WAIT_S,
    MAX_SCROLL,
    ActionError,
    check_seconds,
    check_text,
    normalize_keys,
)

_XBUTTON = dict(zip(BUTTONS, ("1", "2", "3"), strict=True))  # xdotool's button numbers


@dataclass(frozen=True)
class XdotoolCommand:
    """One wire action as the display runs it."""

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


def to_xdotool(payload: Any, width: int, height: int) -> XdotoolCommand:
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
            return XdotoolCommand(kind, move, (x, y))
        button = payload.get("button", DEFAULT_BUTTON[kind])
        if button not in BUTTONS:  # the tuple, not the dict: a JSON list or object is unhashable
            raise ActionError(f"'button' must be one of {', '.join(BUTTONS)}; got {button!r}")
        repeat = "2" if kind == "double_click" else "1"
        # --delay 0: xdotool's default sleeps 100 ms after each click.
        return XdotoolCommand(
            kind,
            [*move, "click", "--repeat", repeat, "--delay", "60" if repeat == "2" else "0", _XBUTTON[button]],
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
        return XdotoolCommand(kind, args, (tx, ty))
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
        return XdotoolCommand(kind, args, (x, y))
    if kind == "type":
        text = check_text("text", payload.get("text"))
        # "--" so text starting with '-' is not read as an option.
        return XdotoolCommand(kind, ["type", "--clearmodifiers", "--delay", "8", "--", text])
    if kind == "key":
        return XdotoolCommand(kind, ["key", "--clearmodifiers", normalize_keys(payload.get("keys"))])
    # wait
    return XdotoolCommand(kind, [], None, check_seconds(payload.get("seconds", DEFAULT_WAIT_S)))
