"""The prompts of the qwen3-vl and ui-tars families against golden copies of what their models were trained
on: the published data, kept here (never the references' code), and every place where ours differs named in
an explicit allow-list.

- qwen3-vl: Qwen's `computer_use` function as its Qwen3-VL cookbook defines it (QwenLM/Qwen3-VL,
  cookbooks/utils/agent_function_call.py at 0dcc180d, display 1000x1000; `function` = name, description,
  parameters), after the system preamble "You are a helpful assistant."; the user turn puts the screenshot
  before the text, as the cookbook and OSWorld's Qwen3-VL harness do.
- ui-tars: UI-TARS-1.5's COMPUTER_USE prompt (bytedance/UI-TARS, codes/prompts.py at 6b315cc0, language
  English) as the first user message after the system message "You are a helpful assistant.", screenshots as
  image-only user turns, and past answers as assistant turns (OSWorld's UI-TARS-1.5 harness).
"""

from __future__ import annotations

import io
import json
from typing import Any

from PIL import Image

from cua_agent.episode.actions import (
    Click,
    Done,
    DoubleClick,
    Drag,
    Key,
    MiddleClick,
    Move,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)
from cua_agent.episode.computer_use import tool_schema, tools_block
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import FAMILIES
from cua_agent.episode.parser import ParsedAction, parse_action
from cua_agent.episode.prompting import build_messages
from cua_agent.episode.turn import Turn
from cua_agent.inference.model_call import ModelCall

QWEN3 = CoordinateMapping(1280, 800, 640, 400, "relative_1000")
RESIZED = CoordinateMapping(1280, 800, 1288, 812, "absolute")
TASK = "Open the third issue"

# ---- Qwen's published computer_use function at display 1000x1000 (its data, verbatim)

_ACTIONS = [
    ("key", "Performs key down presses on the arguments passed in order, then performs key releases in reverse order."),
    ("type", "Type a string of text on the keyboard."),
    ("mouse_move", "Move the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("left_click", "Click the left mouse button at a specified (x, y) pixel coordinate on the screen."),
    ("left_click_drag", "Click and drag the cursor to a specified (x, y) pixel coordinate on the screen."),
    ("right_click", "Click the right mouse button at a specified (x, y) pixel coordinate on the screen."),
    ("middle_click", "Click the middle mouse button at a specified (x, y) pixel coordinate on the screen."),
    ("double_click", "Double-click the left mouse button at a specified (x, y) pixel coordinate on the screen."),
    (
        "triple_click",
        "Triple-click the left mouse button at a specified (x, y) pixel coordinate on the screen (simulated as "
        "double-click since it's the closest action).",
    ),
    ("scroll", "Performs a scroll of the mouse scroll wheel."),
    ("hscroll", "Performs a horizontal scroll (mapped to regular scroll)."),
    ("wait", "Wait specified seconds for the change to happen."),
    ("terminate", "Terminate the current task and report its completion status."),
    ("answer", "Answer a question."),
]  # fmt: skip
QWEN_COMPUTER_USE: dict[str, Any] = {
    "name": "computer_use",
    "description": "Use a mouse and keyboard to interact with a computer, and take screenshots.\n"
    "* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. You "
    "must click on desktop icons to start applications.\n"
    "* Some applications may take time to start or process actions, so you may need to wait and take "
    "successive screenshots to see the results of your actions. E.g. if you click on Firefox and a window "
    "doesn't open, try wait and taking another screenshot.\n"
    "* The screen's resolution is 1000x1000.\n"
    "* Whenever you intend to move the cursor to click on an element like an icon, you should consult a "
    "screenshot to determine the coordinates of the element before moving the cursor.\n"
    "* If you tried clicking on a program or link but it failed to load, even after waiting, try adjusting "
    "your cursor position so that the tip of the cursor visually falls on the element that you want to "
    "click.\n"
    "* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. "
    "Don't click boxes on their edges.",
    "parameters": {
        "properties": {
            "action": {
                "description": "The action to perform. The available actions are:\n"
                + "\n".join(f"* `{name}`: {what}" for name, what in _ACTIONS),
                "enum": [name for name, _ in _ACTIONS],
                "type": "string",
            },
            "keys": {"description": "Required only by `action=key`.", "type": "array"},
            "text": {"description": "Required only by `action=type` and `action=answer`.", "type": "string"},
            "coordinate": {
                "description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) "
                "coordinates to move the mouse to.",
                "type": "array",
            },
            "pixels": {
                "description": "The amount of scrolling to perform. Positive values scroll up, negative values "
                "scroll down. Required only by `action=scroll` and `action=hscroll`.",
                "type": "number",
            },
            "time": {"description": "The seconds to wait. Required only by `action=wait`.", "type": "number"},
            "status": {
                "description": "The status of the task. Required only by `action=terminate`.",
                "type": "string",
                "enum": ["success", "failure"],
            },
        },
        "required": ["action"],
        "type": "object",
    },
}
# Where our computer_use may differ from Qwen's, each entry a path of `diff` below. Empty: the schema is
# Qwen's, byte for byte. (What we do with an action, where Qwen's words leave it open, is in computer_use.py.)
ALLOWED_SCHEMA_DELTAS: set[str] = set()


def diff(ours: Any, theirs: Any, path: str = "") -> set[str]:
    """Paths where two JSON values differ: '+path' only ours has, '-path' only theirs, 'path' both differ."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = {f"+{path}{k}" for k in ours.keys() - theirs.keys()}
        out |= {f"-{path}{k}" for k in theirs.keys() - ours.keys()}
        for k in ours.keys() & theirs.keys():
            out |= diff(ours[k], theirs[k], f"{path}{k}.")
        if list(ours) != list(theirs) and not out:
            out.add(f"{path}(key order)")  # the template renders the keys in order
        return out
    return set() if ours == theirs and type(ours) is type(theirs) else {path.rstrip(".")}


def test_computer_use_is_qwens_function_except_the_allowed_deltas():
    schema = tool_schema(QWEN3)
    assert set(schema) == {"type", "function"} and schema["type"] == "function"
    assert diff(schema["function"], QWEN_COMPUTER_USE) == ALLOWED_SCHEMA_DELTAS


def test_every_action_of_qwens_enum_is_executable():
    """A trained action refused as a format failure would be unlearned under GRPO: each one acts."""
    expected = {
        "key": (dict(keys=["ctrl", "s"]), Key("ctrl+s")),
        "type": (dict(text="hi"), TypeText("hi")),
        "mouse_move": (dict(coordinate=[500, 500]), Move(640, 400)),
        "left_click": (dict(coordinate=[500, 500]), Click(640, 400)),
        "left_click_drag": (dict(coordinate=[500, 500]), Drag(128, 80, 640, 400)),  # from the pointer
        "right_click": (dict(coordinate=[500, 500]), RightClick(640, 400)),
        "middle_click": (dict(coordinate=[500, 500]), MiddleClick(640, 400)),
        "double_click": (dict(coordinate=[500, 500]), DoubleClick(640, 400)),
        # Qwen's own words: simulated as a double click (the sandbox's click has no click count either)
        "triple_click": (dict(coordinate=[500, 500]), DoubleClick(640, 400)),
        "scroll": (dict(coordinate=[500, 500], pixels=-5), Scroll(640, 400, "down", 5)),
        "hscroll": (dict(coordinate=[500, 500], pixels=2), Scroll(640, 400, "right", 2)),
        "wait": (dict(time=2), Wait(2.0)),
        "terminate": (dict(status="failure"), Done(success=False)),
        "answer": (dict(text="42"), Done(answer="42")),
    }
    assert list(expected) == QWEN_COMPUTER_USE["parameters"]["properties"]["action"]["enum"]
    for name, (args, action) in expected.items():
        call = {"name": "computer_use", "arguments": {"action": name, **args}}
        text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        out = parse_action(text, QWEN3, family="qwen3-vl", pointer=(128, 80))
        assert isinstance(out, ParsedAction) and out.action == action, (name, out)


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i * 40 % 256, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def is_image(part: dict[str, Any]) -> bool:
    return part["type"] == "image_url"


def test_qwen3_vl_turn_one_is_the_cookbooks():
    """System: "You are a helpful assistant." and the tool block; user: the screenshot, then the task."""
    fam = FAMILIES["qwen3-vl"]
    messages = build_messages(TASK, [], [png(0)], 2, QWEN3, family=fam).messages
    system = "You are a helpful assistant.\n\n" + tools_block([tool_schema(QWEN3)])
    assert messages[0] == {"role": "system", "content": system}
    assert len(messages) == 2 and messages[1]["role"] == "user"
    image, text = messages[1]["content"]
    assert is_image(image) and text == {"type": "text", "text": TASK}


def test_qwen3_vl_puts_every_screenshot_before_its_text():
    fam = FAMILIES["qwen3-vl"]
    turns = [Turn(ModelCall(fam.answer(Click(640, 400), QWEN3)), Click(640, 400)) for _ in range(3)]
    messages = build_messages(TASK, turns, [png(i) for i in range(4)], 2, QWEN3, family=fam).messages
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert len(users) == 2
    for content in users:
        assert is_image(content[0]) and [is_image(p) for p in content[1:]] == [False], content
    assert users[0][1]["text"].startswith(TASK + "\n\nEarlier turns")  # the log of turns 1 and 2
    assert users[1][1]["text"] == "Turn 3 result: ok"


# ---- UI-TARS-1.5's COMPUTER_USE prompt, language English (its data, verbatim)

UI_TARS_COMPUTER_USE = "\n".join(
    [
        "You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task.",
        "",
        "## Output Format",
        "```",
        "Thought: ...",
        "Action: ...",
        "```",
        "",
        "## Action Space",
        "",
        "click(start_box='<|box_start|>(x1,y1)<|box_end|>')",
        "left_double(start_box='<|box_start|>(x1,y1)<|box_end|>')",
        "right_single(start_box='<|box_start|>(x1,y1)<|box_end|>')",
        "drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')",
        "hotkey(key='')",
        "type(content='xxx') # Use escape characters \\', \\\", and \\n in content part to ensure we can parse the content in normal python string format. If you want to submit your input, use \\n at the end of content. ",
        "scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')",
        "wait() #Sleep for 5s and take a screenshot to check for any changes.",
        "finished(content='xxx') # Use escape characters \\', \\\", and \\n in content part to ensure we can parse the content in normal python string format.",
        "",
        "",
        "## Note",
        "- Use English in `Thought` part.",
        "- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.",
        "",
        "## User Instruction",
        "{instruction}",
        "",
    ]
)  # fmt: skip


def ui_tars_history() -> list[Turn]:
    fam = FAMILIES["ui-tars"]
    answers = [Click(640, 400), TypeText("hi\n"), Key("ctrl+s"), Scroll(640, 400, "down", 5)]
    turns = [Turn(ModelCall(fam.answer(a, RESIZED)), a) for a in answers]
    # as a server that skips special tokens returns it: the box tokens are gone
    turns.append(Turn(ModelCall("Thought: Open it.\nAction: click(start_box='(10,20)')"), Click(10, 20)))
    turns.append(Turn(ModelCall("Thought: no idea"), None, "no valid action: no Action"))
    return turns


def test_ui_tars_turn_one_is_its_harnesses():
    messages = build_messages(TASK, [], [png(0)], 5, RESIZED, family=FAMILIES["ui-tars"]).messages
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert messages[1] == {
        "role": "user",
        "content": [{"type": "text", "text": UI_TARS_COMPUTER_USE.format(instruction=TASK)}],
    }
    assert len(messages) == 3 and messages[2]["role"] == "user"
    assert [is_image(p) for p in messages[2]["content"]] == [True]


def test_ui_tars_keeps_its_past_answers_as_assistant_turns_and_sends_image_only_user_turns():
    past = ui_tars_history()
    shots = [png(i) for i in range(len(past) + 1)]
    for k in (1, 3, len(past) + 1):
        messages = build_messages(TASK, past, shots, k, RESIZED, family=FAMILIES["ui-tars"]).messages
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        rest = messages[2:]
        assistants = [m["content"] for m in rest if m["role"] == "assistant"]
        # every past answer, in order, with the box tokens its harness puts back
        expected = [t.output for t in past]
        expected[4] = "Thought: Open it.\nAction: click(start_box='<|box_start|>(10,20)<|box_end|>')"
        assert assistants == expected, k
        users = [m for m in rest if m["role"] == "user"]
        assert len(users) == k and all([is_image(p) for p in m["content"]] == [True] for m in users)
        # the screenshot before each answer in the window comes right before it; the current one is last
        roles = [m["role"] for m in rest]
        assert roles == ["assistant"] * (len(past) + 1 - k) + ["user", "assistant"] * (k - 1) + ["user"], k


def test_ui_tars_demonstrations_carry_a_thought_the_parser_reads_past():
    fam = FAMILIES["ui-tars"]
    for action in (
        Click(640, 400),
        DoubleClick(640, 400),
        RightClick(640, 400),
        Drag(0, 0, 640, 400),
        Scroll(640, 400, "up", 5),
        TypeText("it's\nfine"),
        Key("ctrl+shift+t"),
        Done(answer="42"),
        Done(success=False),
    ):
        answer = fam.answer(action, RESIZED)
        thought, action_line = answer.split("\n")
        assert thought.startswith("Thought: ") and action_line.startswith("Action: "), answer
        sentence = thought.removeprefix("Thought: ")
        assert sentence[0].isupper() and sentence.endswith(".") and sentence.count(". ") == 0, sentence
        # read as its harness reads it, and by any reader (which knows no UI-TARS scroll amount)
        for family in ("ui-tars",) if isinstance(action, Scroll) else ("ui-tars", None):
            out = parse_action(answer, RESIZED, family=family)
            assert isinstance(out, ParsedAction) and out.action == action, (family, answer, out)


def test_a_ui_tars_budget_drops_the_oldest_past_answers_first():
    def count(messages: list[dict[str, Any]]) -> int:  # 1 token per 4 characters of text
        return sum(
            len(
                m["content"]
                if isinstance(m["content"], str)
                else "".join(p.get("text", "") for p in m["content"])
            )
            // 4
            for m in messages
        )

    past = ui_tars_history()
    shots = [png(i) for i in range(len(past) + 1)]
    fam = FAMILIES["ui-tars"]
    full = build_messages(TASK, past, shots, 2, RESIZED, family=fam, count_tokens=count, max_tokens=10**6)
    assert full.omitted_turns == 0 and full.n_tokens is not None
    last_answer = len(full.messages[-2]["content"]) // 4
    tight = build_messages(
        TASK, past, shots, 2, RESIZED, family=fam, count_tokens=count, max_tokens=full.n_tokens - last_answer
    )
    assert (
        tight.omitted_turns >= 1
        and tight.n_tokens is not None
        and tight.n_tokens <= full.n_tokens - last_answer
    )
    kept = [m["content"] for m in tight.messages if m["role"] == "assistant"]
    assert kept == [m["content"] for m in full.messages if m["role"] == "assistant"][tight.omitted_turns :]
    assert tight.messages[:2] == full.messages[:2] and tight.messages[-1] == full.messages[-1]
