"""What each model family's real models write, read as those models' own harnesses read it.

The corpus below is written in the forms the references show: Qwen's computer_use cookbook (a `<tool_call>`
holding `{"name": "computer_use", "arguments": {...}}`, 0-1000 coordinates), the OSWorld harness of
Qwen3-VL (an `Action:` line, then one `<tool_call>`) and Qwen's mobile cookbook (`Thought:` / `Action: "..."`
/ `<tool_call>`), Qwen3-VL Thinking models (a reasoning closed by `</think>`; its `<think>` is in the prompt),
and UI-TARS-1.5 (`Thought: ...` then `Action: click(start_box='<|box_start|>(x,y)<|box_end|>')`, absolute
pixels of the resized screenshot). Each output comes with the action it must produce or why it is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

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
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import FAMILIES
from cua_agent.episode.loop import EpisodeConfig, run_episode
from cua_agent.episode.parser import ParsedAction, ParseFailure, parse_action
from cua_agent.inference.model_call import ModelCall
from tests.agent.action_cases import SCREEN_H, SCREEN_W

QWEN3 = CoordinateMapping(SCREEN_W, SCREEN_H, 640, 400, "relative_1000")
# UI-TARS-1.5 and Qwen2.5-VL point on the resized screenshot: 1280x800 -> 1288x812.
RESIZED = CoordinateMapping(SCREEN_W, SCREEN_H, 1288, 812, "absolute")
POINTER = (128, 80)  # where the episode's last pointer action left the pointer, in screen pixels


def qwen(action: str, **arguments: Any) -> str:
    """A Qwen computer_use call as the cookbook parses it (`<tool_call>\\n{...}\\n</tool_call>`)."""
    body = json.dumps({"name": "computer_use", "arguments": {"action": action, **arguments}})
    return f"<tool_call>\n{body}\n</tool_call>"


def parse(text: str, family: str, pointer: tuple[int, int] | None = POINTER) -> ParsedAction | ParseFailure:
    mapping = QWEN3 if family == "qwen3-vl" else RESIZED
    return parse_action(text, mapping, family=family, pointer=pointer)


def check(text: str, family: str, expected: Any, pointer: tuple[int, int] | None = POINTER) -> None:
    out = parse(text, family, pointer)
    if isinstance(expected, str):  # a refusal, with words its reason must hold
        assert isinstance(out, ParseFailure), (text, out)
        assert expected in out.reason, (text, out.reason)
    else:
        assert isinstance(out, ParsedAction), (text, out)
        assert out.action == expected, (text, out.action)


# ---------------------------------------------------------------------------------------- qwen3-vl

QWEN3_CORPUS = [
    # the cookbook's form
    (qwen("left_click", coordinate=[500, 500]), Click(640, 400)),
    (qwen("left_click", coordinate=[500.4, 250.6]), Click(641, 200)),
    (qwen("left_click", coordinate=[1000, 1000]), Click(1279, 799)),
    (qwen("double_click", coordinate=[250, 250]), DoubleClick(320, 200)),
    (qwen("right_click", coordinate=[750, 750]), RightClick(960, 600)),
    (qwen("mouse_move", coordinate=[0, 0]), Move(0, 0)),
    # in Qwen's enum: a middle click is the wire's click with the middle button
    (qwen("middle_click", coordinate=[500, 500]), MiddleClick(640, 400)),
    # ... a triple click is simulated as a double click, as Qwen's own description of it says
    (qwen("triple_click", coordinate=[500, 500]), DoubleClick(640, 400)),
    (qwen("triple_click"), DoubleClick(*POINTER)),
    # no coordinate: at the pointer, where the last pointer action left it
    (qwen("left_click"), Click(*POINTER)),
    (qwen("double_click"), DoubleClick(*POINTER)),
    (qwen("right_click"), RightClick(*POINTER)),
    (qwen("middle_click"), MiddleClick(*POINTER)),
    (qwen("mouse_move"), "needs a coordinate"),
    # Qwen's drag: from the pointer to `coordinate`; ours also takes a start_coordinate
    (qwen("left_click_drag", coordinate=[700, 700]), Drag(*POINTER, 896, 560)),
    (qwen("left_click_drag", start_coordinate=[100, 100], coordinate=[700, 700]), Drag(128, 80, 896, 560)),
    (qwen("left_click_drag", start_coordinate=[100, 100]), "an end coordinate"),
    (qwen("key", keys=["ctrl", "c"]), Key("ctrl+c")),
    (qwen("key", keys=["enter"]), Key("Return")),
    (qwen("key", keys=["ctrl", "shift", "t"]), Key("ctrl+shift+t")),
    (qwen("key", keys=["alt", "f4"]), Key("alt+F4")),
    (qwen("type", text="hello\n"), TypeText("hello\n")),
    (qwen("scroll", coordinate=[500, 500], pixels=-5), Scroll(640, 400, "down", 5)),
    (qwen("scroll", coordinate=[500, 500], pixels=3), Scroll(640, 400, "up", 3)),
    (qwen("hscroll", coordinate=[500, 500], pixels=3), Scroll(640, 400, "right", 3)),
    (qwen("scroll", coordinate=[500, 500], pixels=0), "direction"),
    # no coordinate: the wheel turns where the pointer is
    (qwen("scroll", pixels=-5), Scroll(*POINTER, "down", 5)),
    (qwen("hscroll", pixels=-2), Scroll(*POINTER, "left", 2)),
    (qwen("wait", time=2), Wait(2.0)),
    (qwen("wait", time=30), Wait(10.0)),
    (qwen("terminate", status="success"), Done(success=True)),
    (qwen("terminate", status="failure"), Done(success=False)),
    (qwen("answer", text="42"), Done(answer="42")),
    (
        '<tool_call>\n{"name": "computer_use", "arguments": "{\\"action\\": \\"left_click\\", \\"coordinate\\": '
        '[500, 500]}"}\n</tool_call>',
        Click(640, 400),
    ),
    # OSWorld's harness: an Action line, then one tool call
    ("Action: Click the Save button.\n" + qwen("left_click", coordinate=[500, 500]), Click(640, 400)),
    # the mobile cookbook: Thought, a quoted Action, the call
    (
        'Thought: The search box is at the top.\nAction: "Click the search box"\n'
        + qwen("left_click", coordinate=[500, 100]),
        Click(640, 80),
    ),
    # two calls: the first runs
    (qwen("left_click", coordinate=[500, 500]) + "\n" + qwen("type", text="x"), Click(640, 400)),
    # Thinking: a call inside the reasoning is not the answer; the one after </think> is
    (
        "The box might be at the top: "
        + qwen("left_click", coordinate=[100, 100])
        + " but the box is lower.\n</think>\n\n"
        + qwen("left_click", coordinate=[900, 900]),
        Click(1152, 720),
    ),
    (
        'I could send {"action": "left_click", "coordinate": [100, 100]} but no.\n</think>\n\n'
        + qwen("left_click", coordinate=[900, 900]),
        Click(1152, 720),
    ),
    # a model that writes its own <think> too
    ("<think>\nSave first.\n</think>\n\n" + qwen("key", keys=["ctrl", "s"]), Key("ctrl+s")),
    # Thinking, cut off by the token limit: prose, however call-like, is no action
    (
        'The user wants the name typed. I will click the box at about (500, 500) and then type("x")',
        "no action",
    ),
    ('<think>\nI will click the box and then type("x")', "reasoning"),
    ("<think>\nThe box: " + qwen("left_click", coordinate=[100, 100]) + " maybe", "reasoning"),
    ("The reasoning ends here.\n</think>\n\n", "after the reasoning"),
    # the call's closing tag cut off: still the model's answer
    (
        '</think>\n\n<tool_call>\n{"name": "computer_use", "arguments": {"action": "type", "text": "ok"}}',
        TypeText("ok"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), QWEN3_CORPUS)
def test_qwen3_vl_outputs(text, expected):
    check(text, "qwen3-vl", expected)


def test_a_click_or_drag_at_the_pointer_needs_a_known_pointer():
    for text in (qwen("left_click"), qwen("left_click_drag", coordinate=[700, 700])):
        check(text, "qwen3-vl", "pointer", pointer=None)
        check(text, "qwen2.5-vl", "pointer", pointer=None)  # Qwen2.5-VL was trained on the same tool
    assert parse(qwen("left_click_drag", coordinate=[644, 406]), "qwen2.5-vl").action == Drag(
        *POINTER, 640, 400
    )


def test_a_reasoning_is_never_read_by_any_family():
    inside = 'Maybe wait(5) first.\n</think>\nAction: click(start_box="(644,406)")'
    for family in FAMILIES:
        mapping = QWEN3 if family == "qwen3-vl" else RESIZED
        out = parse_action('Wait: wait(5)? type("x")\n</think>\n\n', mapping, family=family)
        assert isinstance(out, ParseFailure) and "after the reasoning" in out.reason, family
    assert parse(inside, "ui-tars").action == Click(640, 400)
    assert parse(inside, "qwen2.5-vl").action == Click(640, 400)


# ---------------------------------------------------------------------------------------- ui-tars

BOX = "<|box_start|>({})<|box_end|>"
UI_TARS_CORPUS = [
    (f"Thought: Click the OK button.\nAction: click(start_box='{BOX.format('644,406')}')", Click(640, 400)),
    ("Action: click(start_box='(644,406)')", Click(640, 400)),  # box tokens stripped
    ("click(start_box='(644,406)')", Click(640, 400)),  # no Thought, no Action label
    ("Action: click(start_box='(600,380,688,432)')", Click(640, 400)),  # a box: its centre
    ("Action: click(point='<point>644 406</point>')", Click(640, 400)),
    (f"Thought: open it.\nAction: left_double(start_box='{BOX.format('644,406')}')", DoubleClick(640, 400)),
    (f"Thought: menu.\nAction: right_single(start_box='{BOX.format('644,406')}')", RightClick(640, 400)),
    (
        f"Thought: move it.\nAction: drag(start_box='{BOX.format('0,0')}', end_box='{BOX.format('644,406')}')",
        Drag(0, 0, 640, 400),
    ),
    (
        "Action: drag(start_point='<point>0 0</point>', end_point='<point>644 406</point>')",
        Drag(0, 0, 640, 400),
    ),
    ("Thought: copy.\nAction: hotkey(key='ctrl c')", Key("ctrl+c")),
    ("Thought: submit.\nAction: hotkey(key='enter')", Key("Return")),
    ("Action: hotkey(key='ctrl shift t')", Key("ctrl+shift+t")),
    ("Action: hotkey(key='page down')", Key("Next")),
    ("Action: press(key='enter')", Key("Return")),
    ("Thought: type it.\nAction: type(content='hello\\n')", TypeText("hello\n")),
    ("Action: type(content='it\\'s')", TypeText("it's")),
    # an unescaped quote inside content, repaired as UI-TARS's own parser does
    ("Thought: type it.\nAction: type(content='it's fine')", TypeText("it's fine")),
    ("Action: type(content='don't say \"can't\"\\n')", TypeText("don't say \"can't\"\n")),
    # a scroll is 5 wheel clicks (as its harness scrolls), at the pointer when it names no point
    (f"Action: scroll(start_box='{BOX.format('644,406')}', direction='down')", Scroll(640, 400, "down", 5)),
    ("Action: scroll(direction='up')", Scroll(*POINTER, "up", 5)),
    # ... at its start_box, wherever that is (not at the screen's centre)
    (f"Action: scroll(start_box='{BOX.format('100,100')}', direction='down')", Scroll(99, 99, "down", 5)),
    # wait() sleeps 5 s, as the prompt says
    ("Action: wait()", Wait(5.0)),
    ("Action: finished()", Done()),
    ("Thought: it says 42.\nAction: finished(content='42')", Done(answer="42")),
    # the Action line decides, never a call-like phrase in the Thought
    (
        "Thought: I should wait(2) and then press Submit.\nAction: click(start_box='(644,406)')",
        Click(640, 400),
    ),
    (
        "Thought: Earlier I did click(start_box='(10,10)') which missed.\nAction: click(start_box='(644,406)')",
        Click(640, 400),
    ),
    # a Thought cut off before its Action line
    ("Thought: I will click(start_box='(10,10)') then", "Action"),
    # only the first action of the line runs
    ("Action: click(start_box='(644,406)')\n\nhotkey(key='enter')", Click(640, 400)),
    # not in our action space
    ("Action: keydown(key='shift')", "'keydown' is not supported"),
    # call_user(): the task cannot be done without the user (OSWorld's FAIL)
    ("Thought: I need a password.\nAction: call_user()", Done(success=False)),
]


@pytest.mark.parametrize(("text", "expected"), UI_TARS_CORPUS)
def test_ui_tars_outputs(text, expected):
    check(text, "ui-tars", expected)


def test_a_scroll_with_no_point_and_no_known_pointer_turns_the_wheel_at_the_screens_centre():
    # the agent has not moved the pointer yet: where it is is not known; the centre is the safest guess
    check(qwen("scroll", pixels=-5), "qwen3-vl", Scroll(640, 400, "down", 5), pointer=None)
    check("Action: scroll(direction='down')", "ui-tars", Scroll(640, 400, "down", 5), pointer=None)


def test_without_a_family_the_parser_stays_tolerant():
    # e.g. evaluation tools reading any output: every form, from anywhere, as before
    assert parse_action('type("x")', QWEN3) == parse_action('type("x")', QWEN3, family=None)
    out = parse_action('type("x")', QWEN3)
    assert isinstance(out, ParsedAction) and out.action == TypeText("x")
    assert isinstance(parse_action(qwen("left_click"), QWEN3), ParseFailure)  # no pointer given


# ------------------------------------------------------------------------ the loop tracks the pointer


class FakeBox:
    reusable, backend, id = True, None, "fake"

    def __init__(self, report_pointer: bool) -> None:
        self.sent: list[dict[str, Any]] = []
        self.report_pointer = report_pointer

    async def reset(self, task_id: str, seed: int, source: Any = None) -> dict[str, Any]:
        return {"instruction": "drag the file"}

    async def screenshot(self) -> bytes:
        return b"png"

    async def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        self.sent.append(action)
        result: dict[str, Any] = {"ok": True}
        if self.report_pointer and "x" in action:
            result["pointer"] = [action.get("to_x", action["x"]), action.get("to_y", action["y"])]
        return result, b"png"

    async def evaluate(self, gave_up: bool = False) -> dict[str, Any]:
        self.gave_up = gave_up
        return {"reward": 1.0}


class Script:
    def __init__(self, outputs: list[str]) -> None:
        self.outputs = list(outputs)

    async def chat(self, messages: list[dict[str, Any]], images: list[bytes]) -> ModelCall:
        return ModelCall(self.outputs.pop(0))


@pytest.mark.parametrize("report_pointer", [True, False])
async def test_the_episode_clicks_and_drags_from_where_its_pointer_is(report_pointer):
    box = FakeBox(report_pointer)
    outputs = [
        qwen("left_click"),  # no pointer action yet: the position is unknown
        qwen("mouse_move", coordinate=[100, 100]),
        qwen("left_click_drag", coordinate=[700, 700]),
        qwen("left_click"),
        qwen("type", text="x"),  # typing leaves the pointer where it was
        qwen("double_click"),
        qwen("terminate", status="success"),
    ]
    cfg = EpisodeConfig(max_turns=len(outputs), model_family="qwen3-vl")
    ep = await run_episode(box, Script(outputs), {"task_id": "t", "seed": 0}, cfg, QWEN3)  # type: ignore[arg-type]
    assert ep.status == "done" and ep.format_failures == 1
    assert "pointer" in ep.turns[0].note
    assert box.sent == [
        {"type": "move", "x": 128, "y": 80},
        {"type": "drag", "x": 128, "y": 80, "to_x": 896, "to_y": 560},
        {"type": "click", "x": 896, "y": 560},
        {"type": "type", "text": "x"},
        {"type": "double_click", "x": 896, "y": 560},
    ]


async def test_the_episode_reads_only_the_answer_after_a_reasoning():
    box = FakeBox(report_pointer=True)
    outputs = [
        "Maybe "
        + qwen("left_click", coordinate=[100, 100])
        + "? No.\n</think>\n\n"
        + qwen("type", text="ok"),
        'I should type("x") into',  # cut off inside the reasoning
        qwen("terminate", status="success"),
    ]
    cfg = EpisodeConfig(max_turns=3, model_family="qwen3-vl")
    ep = await run_episode(box, Script(outputs), {"task_id": "t", "seed": 0}, cfg, QWEN3)  # type: ignore[arg-type]
    assert box.sent == [{"type": "type", "text": "ok"}]
    assert ep.format_failures == 1 and ep.status == "done"


@pytest.mark.parametrize(
    ("family", "outputs", "gave_up"),
    [
        # UI-TARS's call_user(): the episode ends as OSWorld's FAIL, the task judged as given up
        ("ui-tars", ["Thought: I need the user's password.\nAction: call_user()"], True),
        ("ui-tars", ["Thought: It is done.\nAction: finished(content='')"], False),
        # Qwen's answer ends the task with the answer; a terminate after it is never asked for
        ("qwen3-vl", [qwen("answer", text="42"), qwen("terminate", status="success")], False),
        ("qwen3-vl", [qwen("terminate", status="failure")], True),
    ],
)
async def test_how_each_familys_last_action_ends_the_episode(family, outputs, gave_up):
    box = FakeBox(report_pointer=True)
    cfg = EpisodeConfig(max_turns=3, model_family=family)
    mapping = QWEN3 if family == "qwen3-vl" else RESIZED
    ep = await run_episode(box, Script(outputs), {"task_id": "t", "seed": 0}, cfg, mapping)  # type: ignore[arg-type]
    assert ep.status == "done" and len(ep.turns) == 1 and box.sent == [] and box.gave_up is gave_up


async def test_of_several_calls_in_one_answer_only_the_first_runs():
    """Both families are taught one action a turn; the rest of an answer is not run (nor reported)."""
    for family, mapping, text in (
        ("qwen3-vl", QWEN3, qwen("left_click", coordinate=[500, 500]) + "\n" + qwen("type", text="x")),
        ("ui-tars", RESIZED, "Thought: both.\nAction: click(start_box='(644,406)')\n\nhotkey(key='enter')"),
    ):
        box = FakeBox(report_pointer=True)
        cfg = EpisodeConfig(max_turns=1, model_family=family)
        await run_episode(box, Script([text]), {"task_id": "t", "seed": 0}, cfg, mapping)  # type: ignore[arg-type]
        assert box.sent == [{"type": "click", "x": 640, "y": 400}], family
