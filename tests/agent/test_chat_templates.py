"""Golden rendering: every message shape the agent sends renders to the same text under the released Qwen-VL
chat templates as under the tiny models' CHAT_TEMPLATE (scripts/make_tiny_model.py), which the tests and the
CPU runs use. A shape the two would render differently (a `tool` role, `tool_calls`, a missing system
message, `tools=`) fails here before it reaches a real checkpoint.

The released templates are read from the `trl` wheel (requirements/trainer.txt), which ships them verbatim;
trl itself is never imported and the templates are never copied into this repository.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from cua_agent.episode.actions import Click, Drag, Key, Scroll, TypeText
from cua_agent.episode.computer_use import tool_schema
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import FAMILIES
from cua_agent.episode.prompting import build_messages
from cua_agent.episode.turn import Turn
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.model_call import ModelCall
from cua_agent.terminal import loop as terminal_loop
from cua_agent.terminal.tools import ToolCall, format_tool_call

REPO_ROOT = Path(__file__).resolve().parents[2]
# The released template each family's checkpoints ship (UI-TARS-1.5-7B is a Qwen2.5-VL).
TEMPLATE_OF = {"qwen3-vl": "qwen3_vl", "qwen2.5-vl": "qwen2_5_vl", "ui-tars": "qwen2_5_vl"}
MAPPINGS = {
    "qwen2.5-vl": CoordinateMapping(1280, 800, 1288, 812, "absolute"),
    "qwen3-vl": CoordinateMapping(1280, 800, 640, 400, "relative_1000"),
    "ui-tars": CoordinateMapping(1280, 800, 1288, 812, "absolute"),
}


def released_template(name: str) -> str:
    try:
        dist = importlib.metadata.distribution("trl")
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError(
            "trl is not installed: run scripts/setup.sh trainer (requirements/trainer.txt)"
        ) from None
    path = Path(str(dist.locate_file(f"trl/chat_templates/{name}.jinja")))
    assert path.is_file(), f"trl {dist.version} does not ship {path.name}"
    return path.read_text()


@pytest.fixture(scope="module")
def tiny_template() -> str:
    spec = importlib.util.spec_from_file_location(
        "make_tiny_model", REPO_ROOT / "scripts" / "make_tiny_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHAT_TEMPLATE


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODELS["untied"]))


def render(tokenizer, messages: list[dict[str, Any]], template: str, **kw: Any) -> str:
    # A deep copy: transformers may rewrite image parts in place.
    return tokenizer.apply_chat_template(
        copy.deepcopy(messages), chat_template=template, tokenize=False, add_generation_prompt=True, **kw
    )


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i * 40 % 256, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def history(family: str) -> list[Turn]:
    """Past turns in the family's own answer form: plain answers, one with a reasoning before it (a Thinking
    model's `</think>`), one with no parsed action, and one the sandbox refused."""
    fam, mapping = FAMILIES[family], MAPPINGS[family]
    answer = fam.answer
    return [
        Turn(ModelCall(answer(Click(640, 400), mapping)), Click(640, 400)),
        Turn(
            ModelCall("The field is on the left.\n</think>\n\n" + answer(TypeText("it's\n"), mapping)),
            TypeText("it's\n"),
        ),
        Turn(ModelCall("I am not sure <|vision_start|>what to do"), None, "no valid action: no action found"),
        Turn(ModelCall(answer(Drag(1, 2, 3, 4), mapping)), Drag(1, 2, 3, 4), "rejected: off the screen"),
        Turn(ModelCall(answer(Key("ctrl+s"), mapping)), Key("ctrl+s")),
        Turn(ModelCall(answer(Scroll(1, 2, "down", 3), mapping)), Scroll(1, 2, "down", 3)),
    ]


def shapes(family: str) -> dict[str, list[dict[str, Any]]]:
    fam, mapping = FAMILIES[family], MAPPINGS[family]
    past = history(family)
    shots = [png(i) for i in range(len(past) + 1)]
    out = {
        "first turn": build_messages("Open the third issue", [], shots[:1], 2, mapping, family=fam).messages
    }
    for k in (1, 2, len(past) + 1):  # a text log and a window; the whole episode in the window
        prompt = build_messages("Open the third issue", past, shots, k, mapping, family=fam)
        out[f"{len(past)} past turns, {k} screenshots"] = prompt.messages
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_prompt_shape_renders_the_same_under_the_released_template(family, tokenizer, tiny_template):
    released = released_template(TEMPLATE_OF[family])
    for what, messages in shapes(family).items():
        ours = render(tokenizer, messages, tiny_template)
        assert render(tokenizer, messages, released) == ours, (family, what)
        assert ours.count("<|image_pad|>") == sum(
            1
            for m in messages
            if isinstance(m["content"], list)
            for p in m["content"]
            if p["type"] == "image_url"
        )
        # The released template adds no default system message: ours always comes first.
        assert ours.startswith("<|im_start|>system\n" + FAMILIES[family].system_prompt(MAPPINGS[family]))


@pytest.mark.parametrize("template", sorted(set(TEMPLATE_OF.values())))
def test_the_terminal_agents_tool_turns_render_the_same_under_the_released_template(
    template, tokenizer, tiny_template
):
    task = SimpleNamespace(spec=SimpleNamespace(workdir="/repo"), issue="add() subtracts")
    turns = [
        Turn(
            ModelCall("I look first.\n" + format_tool_call(ToolCall("run", {"command": "ls"}))),
            ToolCall("run", {"command": "ls"}),
            observation="calc.py\ntests/",
        ),
        Turn(ModelCall("no call here"), None, "no valid tool call: no <tool_call> found"),
    ]
    released = released_template(template)
    for n in range(len(turns) + 1):
        messages = terminal_loop.build_messages(task, turns[:n])  # type: ignore[arg-type]
        assert render(tokenizer, messages, released) == render(tokenizer, messages, tiny_template), n


def test_the_qwen3_vl_system_message_is_what_the_released_template_renders_for_the_tool(tokenizer):
    """The system message carries `computer_use` exactly as the released Qwen3-VL template renders
    `tools=[...]`, so the prompt tokens are the trained ones even from a server whose template drops tools."""
    released = released_template("qwen3_vl")
    mapping = MAPPINGS["qwen3-vl"]
    system = FAMILIES["qwen3-vl"].system_prompt(mapping)
    preamble = system.split("\n\n# Tools")[0]
    for content in (preamble, [{"type": "text", "text": preamble}]):
        rendered = tokenizer.apply_chat_template(
            [{"role": "system", "content": content}],
            tools=[tool_schema(mapping)],
            chat_template=released,
            tokenize=False,
        )
        assert rendered == f"<|im_start|>system\n{system}<|im_end|>\n"


def test_the_shapes_we_do_not_send_are_where_the_templates_differ(tokenizer, tiny_template):
    """Why the agent keeps to plain roles and string/part contents: the shapes below render differently
    under the released templates, so a change that starts sending one must come with its own golden test."""
    qwen3, qwen25 = released_template("qwen3_vl"), released_template("qwen2_5_vl")
    no_system = [{"role": "user", "content": "hi"}]
    assert render(tokenizer, no_system, qwen25) != render(tokenizer, no_system, tiny_template)
    tool_turn = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "out"},
    ]
    assert render(tokenizer, tool_turn, qwen3) != render(tokenizer, tool_turn, tiny_template)
    image = build_messages("t", [], [png(0)], 1, MAPPINGS["qwen3-vl"], family=FAMILIES["qwen3-vl"]).messages
    assert render(tokenizer, image, qwen3, add_vision_id=True) != render(tokenizer, image, tiny_template)
