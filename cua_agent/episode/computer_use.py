"""Qwen's `computer_use` function (model family qwen3-vl): the tool the Qwen3-VL Instruct models were trained
with for desktop control, so a released checkpoint starts from its zero-shot ability.

- The function is Qwen's own, word for word: its definition in the Qwen3-VL computer-use cookbook
  (`cookbooks/utils/agent_function_call.py`, display 1000x1000), its `function` dict = name, description,
  parameters (tests/agent/test_reference_prompts.py diffs it against a golden copy of that data).
- The system message is the cookbook's: "You are a helpful assistant." then Qwen's function-calling block,
  exactly the text the Qwen chat template renders for `tools=[...]` (`tools_block`), so the prompt tokens are
  the trained ones whether or not the served template renders tools.
- The model answers `<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", ...}}`.
- Coordinates are 0-1000 on both axes (the schema says the screen is 1000x1000).

What each action does here, where Qwen's words leave it open (parser.py reads them so):
- a click with no `coordinate` clicks where the pointer is; `left_click_drag` drags from the pointer to
  `coordinate` (the episode loop tracks the pointer);
- `triple_click` is a double click, as Qwen's description says ("simulated as double-click"): the
  sandbox's click has no click count either;
- `pixels` are wheel clicks (pyautogui's unit on Linux, as OSWorld's harness scrolls), at most 50 a turn,
  at `coordinate`, else at the pointer; `hscroll` scrolls sideways (> 0 right), which the sandbox can do,
  where Qwen's harness maps it to a vertical scroll;
- `wait` waits at most 10 s;
- `answer` ends the task with its text as the answer (the episode has nothing left to do once the
  question is answered; Qwen's mobile cookbook sends a `terminate` after it, which is never asked for).
"""

from __future__ import annotations

import json
from typing import Any

from cua_agent.episode.actions import Action, Done, Drag, Key, PointerAction, Scroll, TypeText, Wait
from cua_agent.episode.coordinates import CoordinateMapping

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
    """Qwen's function as an OpenAI-style tool, with the screen size in the model's coordinates."""
    w, h = mapping.model_size
    description = (
        "Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
        "* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. "
        "You must click on desktop icons to start applications.\n"
        "* Some applications may take time to start or process actions, so you may need to wait and take "
        "successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window "
        "doesn't open, try wait and taking another screenshot.\n"
        f"* The screen's resolution is {w}x{h}.\n"
        "* Whenever you intend to move the cursor to click on an element like an icon, you should consult a "
        "screenshot to determine the coordinates of the element before moving the cursor.\n"
        "* If you tried clicking on a program or link but it failed to load, even after waiting, try "
        "adjusting your cursor position so that the tip of the cursor visually falls on the element that you "
        "want to click.\n"
        "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the "
        "element. Don't click boxes on their edges."
    )
    at = "at a specified (x, y) pixel coordinate on the screen."
    actions = {
        "key": "Performs key down presses on the arguments passed in order, then performs key releases in "
        "reverse order.",
        "type": "Type a string of text on the keyboard.",
        "mouse_move": "Move the cursor to a specified (x, y) pixel coordinate on the screen.",
        "left_click": f"Click the left mouse button {at}",
        "left_click_drag": "Click and drag the cursor to a specified (x, y) pixel coordinate on the screen.",
        "right_click": f"Click the right mouse button {at}",
        "middle_click": f"Click the middle mouse button {at}",
        "double_click": f"Double-click the left mouse button {at}",
        "triple_click": f"Triple-click the left mouse button {at[:-1]} (simulated as double-click since it's "
        "the closest action).",
        "scroll": "Performs a scroll of the mouse scroll wheel.",
        "hscroll": "Performs a horizontal scroll (mapped to regular scroll).",
        "wait": "Wait specified seconds for the change to happen.",
        "terminate": "Terminate the current task and report its completion status.",
        "answer": "Answer a question.",
    }
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {
                "properties": {
                    "action": {
                        "description": "The action to perform. The available actions are:\n"
                        + "\n".join(f"* `{name}`: {what}" for name, what in actions.items()),
                        "enum": list(actions),
                        "type": "string",
                    },
                    "keys": {"description": "Required only by `action=key`.", "type": "array"},
                    "text": {
                        "description": "Required only by `action=type` and `action=answer`.",
                        "type": "string",
                    },
                    "coordinate": {
                        "description": "(x, y): The x (pixels from the left edge) and y (pixels from the top "
                        "edge) coordinates to move the mouse to.",
                        "type": "array",
                    },
                    "pixels": {
                        "description": "The amount of scrolling to perform. Positive values scroll up, negative "
                        "values scroll down. Required only by `action=scroll` and `action=hscroll`.",
                        "type": "number",
                    },
                    "time": {
                        "description": "The seconds to wait. Required only by `action=wait`.",
                        "type": "number",
                    },
                    "status": {
                        "description": "The status of the task. Required only by `action=terminate`.",
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
    return "You are a helpful assistant.\n\n" + tools_block([tool_schema(mapping)])


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
    if isinstance(action, Drag):  # Qwen's drag starts where the pointer is: only its end is written
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
