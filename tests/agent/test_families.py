"""Model families (agent.model_family): each family's prompt, the form its actions are written in, and the
parser reading what the real models of that family emit."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cua_agent.episode import ui_tars
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
from cua_agent.episode.families import FAMILIES, ModelFamilyError, check_checkpoint, family_named
from cua_agent.episode.model_view import ModelView
from cua_agent.episode.parser import ParsedAction, ParseFailure, parse_action
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS
from sandbox.server.protocol import DEFAULT_SCROLL

SCREEN_W, SCREEN_H = 1280, 800
MAPPINGS = {  # each family's own convention, on a 1280x800 screen its processor resized to 644x392
    "qwen2.5-vl": CoordinateMapping(SCREEN_W, SCREEN_H, 644, 392, "absolute"),
    "qwen3-vl": CoordinateMapping(SCREEN_W, SCREEN_H, 640, 400, "relative_1000"),
    "ui-tars": CoordinateMapping(SCREEN_W, SCREEN_H, 644, 392, "absolute"),
}
# Screen points every convention represents exactly (so a round trip must give them back).
ACTIONS = [
    Click(640, 400),
    DoubleClick(320, 200),
    RightClick(960, 600),
    MiddleClick(640, 400),
    Move(0, 0),
    Drag(320, 200, 960, 600),
    Scroll(640, 400, "down", 3),
    Scroll(640, 400, "up", 3),
    Scroll(640, 400, "left", 3),
    Scroll(640, 400, "right", 3),
    TypeText('it\'s "quoted"\nand a new line'),
    Key("ctrl+s"),
    Key("Return"),
    Key("ctrl+shift+t"),
    Done(answer="42"),
]
# What a family's form cannot say (UI-TARS's `wait()` has no duration, `finished` no success).
LOSSY = {"ui-tars"}


def parsed(
    text: str, mapping: CoordinateMapping, family: str | None = None, pointer: tuple[int, int] | None = None
):
    out = parse_action(text, mapping, family=family, pointer=pointer)
    assert isinstance(out, ParsedAction), (text, out)
    return out.action


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_action_written_in_a_familys_form_parses_back(name):
    fam, mapping = FAMILIES[name], MAPPINGS[name]
    actions = [*ACTIONS, Done(success=False)]
    actions += [] if name in LOSSY else [Wait(2.0), Done(success=True)]
    for action in actions:
        # Qwen's drag starts where the pointer is (a demonstration moves it there first)
        pointer = (action.x, action.y) if isinstance(action, Drag) else None
        for family in (None, name):  # read as any output, and as the family's own harness reads it
            expected = action
            if name == "ui-tars" and isinstance(action, Scroll):  # UI-TARS's scroll says no amount
                expected = replace(action, amount=ui_tars.SCROLL_CLICKS if family else DEFAULT_SCROLL)
            answer, log_entry = fam.answer(action, mapping), fam.log_entry(action, mapping)
            assert parsed(answer, mapping, family, pointer) == expected, (name, family, answer)
            assert parsed(log_entry, mapping, family, pointer) == expected, (name, family, log_entry)


def test_each_family_has_its_own_coordinates_in_prompt_and_answers():
    click = Click(640, 400)  # the screen's centre
    assert '"coordinate": [322, 196]' in FAMILIES["qwen2.5-vl"].answer(click, MAPPINGS["qwen2.5-vl"])
    assert '"coordinate": [500, 500]' in FAMILIES["qwen3-vl"].answer(click, MAPPINGS["qwen3-vl"])
    assert "(322,196)" in FAMILIES["ui-tars"].answer(click, MAPPINGS["ui-tars"])
    assert "644x392" in FAMILIES["qwen2.5-vl"].system_prompt(MAPPINGS["qwen2.5-vl"])
    assert "The screen's resolution is 1000x1000." in FAMILIES["qwen3-vl"].system_prompt(MAPPINGS["qwen3-vl"])
    # UI-TARS's prompt names no size: it points in the pixels of the image it sees, as it was trained
    assert FAMILIES["ui-tars"].system_prompt(MAPPINGS["ui-tars"]) == "You are a helpful assistant."
    assert FAMILIES["qwen3-vl"].convention == "relative_1000"
    assert FAMILIES["qwen2.5-vl"].convention == FAMILIES["ui-tars"].convention == "absolute"


def test_qwen3_vl_prompt_carries_the_computer_use_tool():
    """Rendered as the released template renders `tools=[...]`: tests/agent/test_chat_templates.py."""
    mapping = MAPPINGS["qwen3-vl"]
    assert tools_block([tool_schema(mapping)]) in FAMILIES["qwen3-vl"].system_prompt(mapping)
    schema = tool_schema(mapping)["function"]
    assert schema["name"] == "computer_use"
    assert {"left_click", "key", "type", "scroll", "terminate", "answer"} <= set(
        schema["parameters"]["properties"]["action"]["enum"]
    )


W1000 = MAPPINGS["qwen3-vl"]


@pytest.mark.parametrize(
    ("text", "action"),
    [
        # Qwen3-VL's computer_use calls, as the released models write them
        (
            '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": '
            "[500, 500]}}\n</tool_call>",
            Click(640, 400),
        ),
        ('{"name": "computer_use", "arguments": {"action": "mouse_move", "coordinate": [0, 0]}}', Move(0, 0)),
        ('{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "c"]}}', Key("ctrl+c")),
        ('{"name": "computer_use", "arguments": {"action": "type", "text": "hi"}}', TypeText("hi")),
        (
            '{"name": "computer_use", "arguments": {"action": "scroll", "coordinate": [500, 500], "pixels": -5}}',
            Scroll(640, 400, "down", 5),
        ),
        (
            '{"name": "computer_use", "arguments": {"action": "hscroll", "coordinate": [500, 500], "pixels": 2}}',
            Scroll(640, 400, "right", 2),
        ),
        (
            '{"name": "computer_use", "arguments": {"action": "hscroll", "coordinate": [500, 500], "pixels": -2}}',
            Scroll(640, 400, "left", 2),
        ),
        ('{"name": "computer_use", "arguments": {"action": "wait", "time": 2}}', Wait(2.0)),
        (
            '{"name": "computer_use", "arguments": {"action": "terminate", "status": "failure"}}',
            Done(success=False),
        ),
        ('{"name": "computer_use", "arguments": {"action": "answer", "text": "42"}}', Done(answer="42")),
        # UI-TARS-1.5's forms
        (
            "Thought: the OK button.\nAction: click(start_box='<|box_start|>(322,196)<|box_end|>')",
            Click(640, 400),
        ),
        ("Action: click(start_box='(322,196)')", Click(640, 400)),
        ("Action: click(point='<point>322 196</point>')", Click(640, 400)),
        ("Action: left_double(start_box='<|box_start|>(322,196)<|box_end|>')", DoubleClick(640, 400)),
        ("Action: right_single(start_box='<|box_start|>(322,196)<|box_end|>')", RightClick(640, 400)),
        ("Action: hotkey(key='ctrl c')", Key("ctrl+c")),
        ("Action: hotkey(key='enter')", Key("Return")),
        ("Action: type(content='hello\\n')", TypeText("hello\n")),
        (
            "Action: scroll(start_box='<|box_start|>(322,196)<|box_end|>', direction='down')",
            Scroll(640, 400, "down", 3),
        ),
        (
            "Action: drag(start_box='<|box_start|>(0,0)<|box_end|>', end_box='<|box_start|>(322,196)<|box_end|>')",
            Drag(0, 0, 640, 400),
        ),
        ("Action: finished(content='all done')", Done(answer="all done")),
    ],
)
def test_parser_reads_what_each_family_emits(text, action):
    mapping = W1000 if "computer_use" in text else MAPPINGS["ui-tars"]
    assert parsed(text, mapping) == action


def test_an_action_our_sandboxes_cannot_do_is_a_format_failure_naming_it():
    out = parse_action(
        '{"name": "computer_use", "arguments": {"action": "keydown", "keys": ["shift"]}}', W1000
    )
    assert isinstance(out, ParseFailure) and "'keydown' is not supported" in out.reason


def _model_dir(tmp_path: Path, model_type: str | None) -> Path:
    d = tmp_path / (model_type or "none")
    d.mkdir()
    if model_type is not None:
        (d / "config.json").write_text(json.dumps({"model_type": model_type}))
    return d


def test_a_family_that_does_not_match_the_checkpoint_is_refused_naming_the_field(tmp_path):
    check_checkpoint("qwen3-vl", _model_dir(tmp_path, "qwen3_vl"))
    check_checkpoint("ui-tars", _model_dir(tmp_path, "qwen2_5_vl"))
    with pytest.raises(
        ModelFamilyError, match=r"agent\.model_family is 'qwen3-vl'.*'qwen2_5_vl'.*qwen2\.5-vl"
    ):
        check_checkpoint("qwen3-vl", tmp_path / "qwen2_5_vl")
    with pytest.raises(ModelFamilyError, match=r"agent\.model_family is 'qwen2.5-vl'.*'llava'$"):
        check_checkpoint("qwen2.5-vl", _model_dir(tmp_path, "llava"))
    with pytest.raises(ModelFamilyError, match=r"none/config\.json"):
        check_checkpoint("qwen2.5-vl", _model_dir(tmp_path, None))
    with pytest.raises(ModelFamilyError, match=r"agent\.model_family must be one of"):
        family_named("qwen4")


def test_the_models_view_checks_the_family_against_the_real_tiny_models():
    assert ModelView.of_model(QWEN3_VL_MODELS["untied"], "qwen3-vl").convention == "relative_1000"
    assert ModelView.of_model(MODELS["untied"], "qwen2.5-vl").convention == "absolute"
    with pytest.raises(ModelFamilyError, match="qwen3_vl"):
        ModelView.of_model(QWEN3_VL_MODELS["untied"], "qwen2.5-vl")
