"""GBox's UI actions as our wire actions, performed on a box's desktop, with the screenshots they ask for."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from sandbox.testing.gbox_server.bodies import (
    ALL_PHASES,
    ActionBody,
    ClickBody,
    DragBody,
    MoveBody,
    Point,
    PressKeyBody,
    ScrollBody,
    ShotOptions,
    TypeBody,
)
from sandbox.testing.gbox_server.boxes import FakeBox, FakeGbox
from sandbox.testing.gbox_server.keys import KEYSYMS
from sandbox.testing.gbox_server.wire import ApiError, data_uri, duration_arg, parse_body, require_base64

SCROLL_PX_PER_CLICK = 100  # pixels of a GBox scroll per wheel click of our `scroll` action
MAX_SCROLL_CLICKS = 50
SCROLL_DISTANCES = {"tiny": 100, "short": 300, "medium": 600, "long": 1000}


def _px(v: float) -> int:
    return round(v)


def _clicks(px: float) -> int:
    return max(-MAX_SCROLL_CLICKS, min(MAX_SCROLL_CLICKS, round(px / SCROLL_PX_PER_CLICK)))


def _click(b: ClickBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.x is None or b.y is None:
        raise ApiError(400, "x and y are required (the fake does not resolve natural-language targets)")
    kind = "double_click" if b.double else "right_click" if b.button == "right" else "click"
    return [{"type": kind, "x": _px(b.x), "y": _px(b.y), "button": b.button}]


def _move(b: MoveBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    return [{"type": "move", "x": _px(b.x), "y": _px(b.y)}]


def _drag(b: DragBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.path is not None:
        if len(b.path) < 2:
            raise ApiError(400, "path needs at least 2 points")
        start, end = b.path[0], b.path[-1]  # our drag goes straight from the first to the last point
    elif isinstance(b.start, Point) and isinstance(b.end, Point):
        start, end = b.start, b.end
    else:
        raise ApiError(400, "drag needs start and end points {x, y} or a path (no natural-language targets)")
    return [{"type": "drag", "x": _px(start.x), "y": _px(start.y), "to_x": _px(end.x), "to_y": _px(end.y)}]


def _type(b: TypeBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    if b.mode == "replace":
        wire.append({"type": "key", "keys": "ctrl+a"})
        if not b.text:
            wire.append({"type": "key", "keys": "BackSpace"})
    if b.text:
        wire.append({"type": "type", "text": b.text})
    if b.press_enter:
        wire.append({"type": "key", "keys": "Return"})
    return wire


def _press_key(b: PressKeyBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if not b.keys:
        raise ApiError(400, "keys must not be empty")
    for k in b.keys:
        if k not in KEYSYMS:
            raise ApiError(400, f"keys: {k!r} is not a GBox key name")
    syms = [KEYSYMS[k] for k in b.keys]
    if b.combination:
        return [{"type": "key", "keys": "+".join(syms)}]
    return [{"type": "key", "keys": s} for s in syms]


def _scroll(b: ScrollBody, screen: tuple[int, int]) -> list[dict[str, Any]]:
    if b.direction is not None:
        w, h = screen
        vertical = b.direction in ("up", "down")
        if b.distance is None:  # from the centre to the screen edge
            dist = (h if vertical else w) / 2
        else:
            dist = SCROLL_DISTANCES[b.distance] if isinstance(b.distance, str) else b.distance
        n = max(1, abs(_clicks(dist)))
        # The SDK's docs: 'up' moves content upward, revealing what is below (a swipe, not a wheel turn).
        dx, dy = {"up": (0, n), "down": (0, -n), "left": (n, 0), "right": (-n, 0)}[b.direction]
        return [{"type": "scroll", "x": w // 2, "y": h // 2, "dx": dx, "dy": dy}]
    if b.x is None or b.y is None or b.scroll_x is None or b.scroll_y is None:
        raise ApiError(400, "scroll needs x, y, scrollX and scrollY, or a direction")
    dx, dy = _clicks(b.scroll_x), _clicks(b.scroll_y)
    if dx == dy == 0:
        return []  # less than half a wheel click: nothing to do
    return [{"type": "scroll", "x": _px(b.x), "y": _px(b.y), "dx": dx, "dy": dy}]


Translator = Callable[[Any, tuple[int, int]], list[dict[str, Any]]]
ACTIONS: dict[str, tuple[type[ActionBody], Translator]] = {
    "click": (ClickBody, _click),
    "move": (MoveBody, _move),
    "drag": (DragBody, _drag),
    "type": (TypeBody, _type),
    "press-key": (PressKeyBody, _press_key),
    "scroll": (ScrollBody, _scroll),
}


def screenshot_plan(b: ActionBody) -> tuple[list[str], float] | None:
    """Which screenshots an action asked for (phases, delay before 'after'), or None."""
    shot = b.options.screenshot if b.options else None
    if isinstance(shot, ShotOptions):
        require_base64(shot.output_format)
        return shot.phases, duration_arg(shot.delay, "options.screenshot.delay", 30)
    if shot is True or (shot is None and b.include_screenshot):
        require_base64(b.output_format)
        return list(ALL_PHASES), duration_arg(b.screenshot_delay, "screenshotDelay", 30)
    return None


async def perform(gbox: FakeGbox, box: FakeBox, name: str, raw: Any) -> dict[str, Any]:
    """Action `name` (one of ACTIONS) with its request body `raw`, and the screenshots it asked for."""
    model, translate = ACTIONS[name]
    body = parse_body(model, raw)
    wire = translate(body, box.screen)
    plan = screenshot_plan(body)
    shots: dict[str, Any] = {}
    if plan and "before" in plan[0]:
        shots["before"] = {"uri": data_uri(await gbox.png(box))}
    assert box.sb is not None
    for act in wire:
        await gbox.call(box, box.sb.act(act))
    box.actions.append({"name": name, "body": raw})
    if gbox.faults.action_error_after > 0:  # the effect happened; only the answer is lost
        gbox.faults.action_error_after -= 1
        raise ApiError(500, "injected fault: the action was performed but the server failed")
    result: dict[str, Any] = {"actionId": str(uuid.uuid4()), "message": "success"}
    if plan:
        phases, delay = plan
        if {"after", "trace"} & set(phases):
            await asyncio.sleep(delay)
            after = {"uri": data_uri(await gbox.png(box))}
            shots.update({p: after for p in ("after", "trace") if p in phases})  # trace: no overlay
        result["screenshot"] = shots
    return result
