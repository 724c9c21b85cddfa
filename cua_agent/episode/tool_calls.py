"""The canonical tool-call text the model is taught, with coordinates in the model's convention.

The system prompt shows actions in this form, and past actions are echoed in it; parser.py reads it (and
many looser forms) back.
"""

from __future__ import annotations

import json
from typing import Any

from cua_agent.episode.actions import Action, Done, Drag, Key, PointerAction, Scroll, TypeText, Wait
from cua_agent.episode.coordinates import CoordinateMapping


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
