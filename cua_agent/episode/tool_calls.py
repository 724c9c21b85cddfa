"""The project's own `computer` tool (model family qwen2.5-vl): its system prompt and the canonical
tool-call text, with coordinates in the model's convention.

The system prompt shows actions in this form, and past actions are echoed in it; parser.py reads it (and
many looser forms) back.
"""

from __future__ import annotations

import json
from typing import Any

from cua_agent.episode.actions import Action, Done, Drag, Key, PointerAction, Scroll, TypeText, Wait
from cua_agent.episode.coordinates import CoordinateMapping
from sandbox.server.protocol import MAX_SCROLL, MAX_WAIT_S


def to_arguments(action: Action, mapping: CoordinateMapping) -> dict[str, Any]:
    """The tool-call arguments the system prompt teaches, with coordinates in the model's convention."""
    args: dict[str, Any] = {"action": action.name}
    if isinstance(action, Drag):
        args["start_coordinate"] = list(mapping.to_model(action.x, action.y))
        args["end_coordinate"] = list(mapping.to_model(action.x2, action.y2))
    elif isinstance(action, PointerAction | Scroll):
        args["coordinate"] = list(mapping.to_model(action.x, action.y))
    if isinstance(action, Scroll):
        args["direction"] = action.direction
        args["amount"] = action.amount
    elif isinstance(action, TypeText):
        args["text"] = action.text
    elif isinstance(action, Key):
        args["keys"] = action.keys
    elif isinstance(action, Wait):
        args["seconds"] = action.seconds
    elif isinstance(action, Done):
        if action.success is not None:
            args["success"] = action.success
        if action.answer is not None:
            args["answer"] = action.answer
    return args


def format_tool_call(action: Action, mapping: CoordinateMapping) -> str:
    """The exact output format the parser prefers (Qwen-style tool call)."""
    body = json.dumps({"name": "computer", "arguments": to_arguments(action, mapping)}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def _coordinate_help(mapping: CoordinateMapping) -> str:
    if mapping.convention == "relative_1000":
        return (
            "Coordinates are relative: both axes are normalised to 0-1000 whatever the screenshot's size. "
            "[0, 0] is the top-left corner, [1000, 1000] the bottom-right, [500, 500] the centre."
        )
    w, h = mapping.model_size
    return (
        f"Coordinates are integer pixels of the screenshot as you see it ({w}x{h}): x from 0 (left) to "
        f"{w - 1}, y from 0 (top) to {h - 1}."
    )


def computer_system_prompt(mapping: CoordinateMapping) -> str:
    """The action space and the exact format the parser prefers, with coordinates in the model's convention."""
    mw, mh = mapping.model_size
    cx, cy = mw // 2, mh // 2
    return f"""You are a computer-use agent. You see screenshots of a desktop and operate it with mouse and keyboard \
actions until the task is complete.

# Output format
Think briefly if useful, then output exactly one action as a tool call, for example:
<tool_call>
{{"name": "computer", "arguments": {{"action": "click", "coordinate": [{cx}, {cy}]}}}}
</tool_call>
Only the first tool call is executed. After each action you receive a new screenshot.

# Actions ("arguments" of the tool call)
- {{"action": "click", "coordinate": [x, y]}}: left click. Also "double_click", "right_click", and "move" \
(move the pointer without clicking), with the same fields.
- {{"action": "drag", "start_coordinate": [x1, y1], "end_coordinate": [x2, y2]}}: press at the start, \
release at the end.
- {{"action": "scroll", "coordinate": [x, y], "direction": "down", "amount": 3}}: scroll the mouse wheel at \
[x, y]; direction is up, down, left or right; amount is wheel clicks, 1 to {MAX_SCROLL}.
- {{"action": "type", "text": "hello"}}: type text into the focused element.
- {{"action": "key", "keys": "ctrl+s"}}: press a key or combination: modifiers ctrl, alt, shift, super \
joined with +, then a key (a letter, Return, Escape, Tab, BackSpace, Delete, Up, Down, Left, Right, Home, End, \
Prior, Next, F1-F12, space).
- {{"action": "wait", "seconds": 1}}: wait for the screen to change (at most {MAX_WAIT_S:g} seconds).
- {{"action": "done", "success": true, "answer": "..."}}: finish. success is false when the task cannot be \
done; answer only when the task asks a question.

# Coordinates
{_coordinate_help(mapping)}"""
