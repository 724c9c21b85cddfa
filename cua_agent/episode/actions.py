"""The agent's typed actions, in screen pixels, and their payload on the wire to the sandbox (`to_wire`).

Construction validates against the limits of the wire protocol (sandbox/server/protocol.py), so an action
that exists here is never rejected by the sandbox for its form (only for lying off a smaller screen). What
the model writes is another schema: tool_calls.py writes it, parser.py reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sandbox.server.protocol import (
    DEFAULT_SCROLL,
    DEFAULT_WAIT_S,
    MAX_COORD,
    MAX_SCROLL,
    SCROLL_UNITS,
    ActionError,  # one error type for the whole action space, raised by the shared checks too
    check_seconds,
    check_text,
    normalize_keys,
)

DIRECTIONS: tuple[str, ...] = tuple(SCROLL_UNITS)  # up, down, left, right


def _check_coord(field: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ActionError(f"'{field}' must be an int (screen pixels), got {type(v).__name__}")
    if not 0 <= v < MAX_COORD:
        raise ActionError(f"'{field}'={v} is outside [0, {MAX_COORD})")


@dataclass(frozen=True)
class _Action:
    name: ClassVar[str]


@dataclass(frozen=True)
class PointerAction(_Action):
    """An action at one point: click, double_click, right_click, middle_click, move."""

    x: int
    y: int

    def __post_init__(self) -> None:
        _check_coord("x", self.x)
        _check_coord("y", self.y)

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.name, "x": self.x, "y": self.y}


@dataclass(frozen=True)
class Click(PointerAction):
    name: ClassVar[str] = "click"


@dataclass(frozen=True)
class DoubleClick(PointerAction):
    name: ClassVar[str] = "double_click"


@dataclass(frozen=True)
class RightClick(PointerAction):
    name: ClassVar[str] = "right_click"


@dataclass(frozen=True)
class MiddleClick(PointerAction):
    """The wire's click with the middle button (the wire has no action of that name)."""

    name: ClassVar[str] = "middle_click"

    def to_wire(self) -> dict[str, Any]:
        return {"type": "click", "x": self.x, "y": self.y, "button": "middle"}


@dataclass(frozen=True)
class Move(PointerAction):
    name: ClassVar[str] = "move"


@dataclass(frozen=True)
class Drag(_Action):
    x: int
    y: int
    x2: int
    y2: int
    name: ClassVar[str] = "drag"

    def __post_init__(self) -> None:
        for f in ("x", "y", "x2", "y2"):
            _check_coord(f, getattr(self, f))

    def to_wire(self) -> dict[str, Any]:
        return {"type": "drag", "x": self.x, "y": self.y, "to_x": self.x2, "to_y": self.y2}


@dataclass(frozen=True)
class Scroll(_Action):
    x: int
    y: int
    direction: str
    amount: int = DEFAULT_SCROLL  # wheel clicks
    name: ClassVar[str] = "scroll"

    def __post_init__(self) -> None:
        _check_coord("x", self.x)
        _check_coord("y", self.y)
        if self.direction not in DIRECTIONS:
            raise ActionError(f"'direction' must be one of {', '.join(DIRECTIONS)}; got {self.direction!r}")
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise ActionError("'amount' must be an int (wheel clicks)")
        if not 1 <= self.amount <= MAX_SCROLL:
            raise ActionError(f"'amount'={self.amount} is outside [1, {MAX_SCROLL}]")

    def to_wire(self) -> dict[str, Any]:
        ux, uy = SCROLL_UNITS[self.direction]
        return {"type": "scroll", "x": self.x, "y": self.y, "dx": ux * self.amount, "dy": uy * self.amount}


@dataclass(frozen=True)
class TypeText(_Action):
    text: str
    name: ClassVar[str] = "type"

    def __post_init__(self) -> None:
        check_text("text", self.text)

    def to_wire(self) -> dict[str, Any]:
        return {"type": "type", "text": self.text}


@dataclass(frozen=True)
class Key(_Action):
    """A key or combination. Construction canonicalises it, so Key("Ctrl+S") == Key("ctrl+s")."""

    keys: str
    name: ClassVar[str] = "key"

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", normalize_keys(self.keys))

    def to_wire(self) -> dict[str, Any]:
        return {"type": "key", "keys": self.keys}


@dataclass(frozen=True)
class Wait(_Action):
    seconds: float = DEFAULT_WAIT_S
    name: ClassVar[str] = "wait"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", check_seconds(self.seconds))

    def to_wire(self) -> dict[str, Any]:
        return {"type": "wait", "seconds": self.seconds}


@dataclass(frozen=True)
class Done(_Action):
    """The episode ends. success: the model's own verdict (None when not given); answer: for QA tasks.

    Not an action of the sandbox: it has no wire form.
    """

    success: bool | None = None
    answer: str | None = None
    name: ClassVar[str] = "done"

    def __post_init__(self) -> None:
        if self.success is not None and not isinstance(self.success, bool):
            raise ActionError("'success' must be a bool or None")
        if self.answer is not None:
            check_text("answer", self.answer, allow_empty=True)


Action = Click | DoubleClick | RightClick | MiddleClick | Move | Drag | Scroll | TypeText | Key | Wait | Done
ACTION_CLASSES: dict[str, type[_Action]] = {
    c.name: c
    for c in (Click, DoubleClick, RightClick, MiddleClick, Move, Drag, Scroll, TypeText, Key, Wait, Done)
}


def pointer_after(action: Action, result: dict[str, Any] | None = None) -> tuple[int, int] | None:
    """Where the pointer is after the sandbox ran `action`: where the sandbox says it ended up, else where
    the action leaves it (every pointer action moves it to its point, a drag to its end); None for an action
    that does not move it (type, key, wait)."""
    reported = (result or {}).get("pointer")
    if (
        isinstance(reported, list | tuple)
        and len(reported) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in reported)
    ):
        return reported[0], reported[1]
    if isinstance(action, Drag):
        return action.x2, action.y2
    if isinstance(action, PointerAction | Scroll):
        return action.x, action.y
    return None


def from_wire(payload: dict[str, Any]) -> Action:
    """The typed action of a sandbox payload (the inverse of `to_wire`; keys it does not model, such as
    `wait_change_s`, are dropped). Used to replay scripted actions as a policy's output."""
    kind = payload.get("type")
    if kind == "click" and payload.get("button") == "middle":
        return MiddleClick(payload["x"], payload["y"])
    if kind in ("click", "double_click", "right_click", "move"):
        return ACTION_CLASSES[kind](payload["x"], payload["y"])  # type: ignore[call-arg, return-value]
    if kind == "drag":
        return Drag(payload["x"], payload["y"], payload["to_x"], payload["to_y"])
    if kind == "scroll":
        dx, dy = int(payload.get("dx", 0)), int(payload.get("dy", 0))
        if bool(dx) == bool(dy):
            raise ActionError("a scroll payload moves along exactly one axis")
        unit = ((dx > 0) - (dx < 0), (dy > 0) - (dy < 0))
        direction = next(d for d, u in SCROLL_UNITS.items() if u == unit)
        return Scroll(payload["x"], payload["y"], direction, abs(dx or dy))
    if kind == "type":
        return TypeText(payload["text"])
    if kind == "key":
        return Key(payload["keys"])
    if kind == "wait":
        return Wait(payload.get("seconds", DEFAULT_WAIT_S))
    raise ActionError(f"no typed action for payload type {kind!r}")
