"""Qwen's `computer_use` function (model family qwen3-vl): the tool convention the Qwen3-VL Instruct models
were trained with for desktop control, so a released checkpoint starts from its zero-shot ability.

- The function's JSON schema goes into the system message inside Qwen's function-calling block: exactly the
  text the Qwen chat template renders for `tools=[...]` (`tools_block`), so the prompt tokens are the ones
  the model saw in training whether or not the served template renders tools.
- The model answers `<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", ...}}`.
- Coordinates are the family's: 0-1000 on both axes (the schema says the screen is 1000x1000).

Offered are the actions our sandboxes perform. Two differ from Qwen's originals: `left_click_drag` also takes a
`start_coordinate` (Qwen's drags from wherever the pointer is, which the parser also reads), and a scroll's
`pixels` are wheel clicks. Of Qwen's enum, `middle_click` is read though not offered, and `triple_click` is
refused (the sandbox's click has no click count).
"""

from __future__ import annotations

import json
from typing import Any

from cua_agent.episode.actions import Action, Done, Drag, Key, PointerAction, Scroll, TypeText, Wait
from cua_agent.episode.coordinates import CoordinateMapping
from sandbox.server.protocol import MAX_SCROLL, MAX_WAIT_S

TOOL_NAME = "computer_use"
# Our action name -> the convention's.
_NAMES = {
    "click": "left_click",
    "double_click": "double_click",
    "right_click": "right_click",
    "middle_click": "middle_click",
    "move": "mouse_move",
    "drag": "left_click_drag",
    "type": "type",
    "key": "key",
    "wait": "wait",
}


def tool_schema(mapping: CoordinateMapping) -> dict[str, Any]:
    """The function as an OpenAI-style tool, with the screen size in the model's coordinates."""
    w, h = mapping.model_size
    description = (
        "Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
        "* This is an interface to a desktop GUI: one action per call, then you get a new screenshot.\n"
        "* Some applications take time to respond; wait and look at the next screenshot before acting "
        "again.\n"
        f"* The screen's resolution is {w}x{h}.\n"
        "* Point at the centre of the element you want to click, as you see it in the latest screenshot."
    )
    actions = {
        "key": "Press a key or a combination, given as a list of key names in order (e.g. ['ctrl', 's']).",
        "type": "Type a string of text into the focused element.",
        "mouse_move": "Move the pointer to `coordinate`.",
        "left_click": "Left click at `coordinate`.",
        "left_click_drag": "Press the left button at `start_coordinate`, drag to `coordinate`, release.",
        "right_click": "Right click at `coordinate`.",
        "double_click": "Double left click at `coordinate`.",
        "scroll": "Scroll the wheel at `coordinate`: `pixels` > 0 scrolls up, < 0 down.",
        "hscroll": "Scroll sideways at `coordinate`: `pixels` > 0 scrolls right, < 0 left.",
        "wait": "Wait `time` seconds for the screen to change.",
        "terminate": "End the task, with `status` success or failure.",
        "answer": "Answer the task's question with `text`, which ends the task.",
    }
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {
                "properties": {
                    "action": {
                        "description": "The action to perform:\n"
                        + "\n".join(f"* `{name}`: {what}" for name, what in actions.items()),
                        "enum": list(actions),
                        "type": "string",
                    },
                    "keys": {"description": "Required by `action=key`.", "type": "array"},
                    "text": {
                        "description": "Required by `action=type` and `action=answer`.",
                        "type": "string",
                    },
                    "coordinate": {
                        "description": f"(x, y): x from 0 (left) to {w}, y from 0 (top) to {h}. Required by "
                        "the click, move, drag and scroll actions.",
                        "type": "array",
                    },
                    "start_coordinate": {"description": "(x, y) where a drag starts.", "type": "array"},
                    "pixels": {
                        "description": f"Wheel clicks, 1 to {MAX_SCROLL} either way. Required by "
                        "`action=scroll` and `action=hscroll`.",
                        "type": "number",
                    },
                    "time": {"description": f"Seconds, at most {MAX_WAIT_S:g}.", "type": "number"},
                    "status": {
                        "description": "Required by `action=terminate`.",
                        "type": "string",
                        "enum": ["success", "failure"],
                    },
                },
                "required": ["action"],
                "type": "object",
            },
        },
    }


def tools_block(tools: list[dict[str, Any]]) -> str:
    """Qwen's function-calling block, as its chat template renders `tools` (each tool as `tojson`, which
    is json.dumps with ensure_ascii=False)."""
    specs = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>{specs}\n</tools>"
        "\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call>"
    )


def system_prompt(mapping: CoordinateMapping) -> str:
    return (
        "You are a computer-use agent. You see screenshots of a desktop and operate it until the task is "
        "complete. Each turn, think briefly if useful, then call the tool exactly once.\n\n"
        + tools_block([tool_schema(mapping)])
    )


def key_names(keys: str) -> list[str]:
    """'ctrl+s' -> ['ctrl', 's']; the plus key stays one name ('ctrl++' -> ['ctrl', '+'])."""
    if keys == "+":
        return ["+"]
    if keys.endswith("++"):
        return [*keys[:-2].split("+"), "+"]
    return keys.split("+")


def to_arguments(action: Action, mapping: CoordinateMapping) -> dict[str, Any]:
    if isinstance(action, Done):
        if action.answer is not None:
            return {"action": "answer", "text": action.answer}
        return {"action": "terminate", "status": "failure" if action.success is False else "success"}
    if isinstance(action, Scroll):
        horizontal = action.direction in ("left", "right")
        sign = 1 if action.direction in ("up", "right") else -1
        return {
            "action": "hscroll" if horizontal else "scroll",
            "coordinate": list(mapping.to_model(action.x, action.y)),
            "pixels": sign * action.amount,
        }
    args: dict[str, Any] = {"action": _NAMES[action.name]}
    if isinstance(action, Drag):
        args["start_coordinate"] = list(mapping.to_model(action.x, action.y))
        args["coordinate"] = list(mapping.to_model(action.x2, action.y2))
    elif isinstance(action, PointerAction):
        args["coordinate"] = list(mapping.to_model(action.x, action.y))
    elif isinstance(action, TypeText):
        args["text"] = action.text
    elif isinstance(action, Key):
        args["keys"] = key_names(action.keys)
    elif isinstance(action, Wait):
        args["time"] = action.seconds
    return args


def format_tool_call(action: Action, mapping: CoordinateMapping) -> str:
    body = json.dumps({"name": TOOL_NAME, "arguments": to_arguments(action, mapping)}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
