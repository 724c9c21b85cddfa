"""The tolerant parser of model output, and the canonical tool-call text it reads back."""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cua_agent.episode.actions import (
    Click,
    Done,
    DoubleClick,
    Drag,
    Key,
    Move,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.parser import (
    EXCERPT_CHARS,
    MAX_INPUT_CHARS,
    ParsedAction,
    ParseFailure,
    parse_action,
)
from cua_agent.episode.tool_calls import format_tool_call, to_arguments
from sandbox.server.protocol import MAX_SCROLL, MAX_TEXT, MAX_WAIT_S
from sandbox.server.xdotool import to_xdotool as server_parse
from tests.agent.action_cases import (
    IDENTITY,
    KEY_INPUTS,
    MAPPINGS,
    RELATIVE,
    RESIZED_DOWN,
    SCREEN_H,
    SCREEN_W,
    from_wire,
    safe_text,
    screen_actions,
)


def parsed(text: Any, mapping: CoordinateMapping = IDENTITY) -> ParsedAction:
    out = parse_action(text, mapping)
    assert isinstance(out, ParsedAction), out
    return out


def failed(text: Any, mapping: CoordinateMapping = IDENTITY) -> ParseFailure:
    out = parse_action(text, mapping)
    assert isinstance(out, ParseFailure), out
    assert out.reason and isinstance(out.reason, str)
    assert isinstance(out.raw, str) and len(out.raw) <= EXCERPT_CHARS
    return out


def test_same_text_means_different_pixels_under_different_conventions():
    text = '<tool_call>{"name": "computer", "arguments": {"action": "click", "coordinate": [322, 196]}}'
    assert parsed(text, IDENTITY).action == Click(322, 196)
    assert parsed(text, RESIZED_DOWN).action == Click(640, 400)
    assert parsed(text, RELATIVE).action == Click(412, 157)


# ------------------------------------------------------------------------ parser: round trip of forms


def model_actions(mapping: CoordinateMapping) -> st.SearchStrategy[tuple[dict[str, Any], Any]]:
    """(tool-call arguments in the model's coordinates, the typed action expected in screen pixels)."""
    mw, mh = mapping.model_size
    pt = st.tuples(st.integers(0, mw - 1), st.integers(0, mh - 1))

    def pointer(name: str, cls: type) -> st.SearchStrategy:
        return pt.map(lambda p: ({"action": name, "coordinate": list(p)}, cls(*mapping.to_screen(*p))))

    def drag(a: tuple[int, int], b: tuple[int, int]) -> tuple[dict[str, Any], Drag]:
        args = {"action": "drag", "start_coordinate": list(a), "end_coordinate": list(b)}
        return args, Drag(*mapping.to_screen(*a), *mapping.to_screen(*b))

    def scroll(p: tuple[int, int], d: str, n: int) -> tuple[dict[str, Any], Scroll]:
        return {"action": "scroll", "coordinate": list(p), "direction": d, "amount": n}, Scroll(
            *mapping.to_screen(*p), d, n
        )

    def done(success: bool | None, answer: str | None) -> tuple[dict[str, Any], Done]:
        args: dict[str, Any] = {"action": "done"}
        if success is not None:
            args["success"] = success
        if answer is not None:
            args["answer"] = answer
        return args, Done(success, answer)

    return st.one_of(
        pointer("click", Click),
        pointer("double_click", DoubleClick),
        pointer("right_click", RightClick),
        pointer("move", Move),
        st.builds(drag, pt, pt),
        st.builds(scroll, pt, st.sampled_from(["up", "down", "left", "right"]), st.integers(1, MAX_SCROLL)),
        safe_text.map(lambda t: ({"action": "type", "text": t}, TypeText(t))),
        st.sampled_from(KEY_INPUTS).map(lambda k: ({"action": "key", "keys": k}, Key(k))),
        st.integers(0, 20).map(lambda i: ({"action": "wait", "seconds": i / 2}, Wait(i / 2))),
        st.builds(done, st.sampled_from([None, True, False]), st.none() | safe_text),
    )


def as_call(args: dict[str, Any], positional: bool) -> str:
    """Function-call text, e.g. click(x=1, y=2) or click(1, 2)."""
    a = dict(args)
    name = a.pop("action")
    items: list[tuple[str, Any]] = []
    if "coordinate" in a:
        x, y = a.pop("coordinate")
        items += [("x", x), ("y", y)]
    if "start_coordinate" in a:
        (x, y), (x2, y2) = a.pop("start_coordinate"), a.pop("end_coordinate")
        items += [("x", x), ("y", y), ("x2", x2), ("y2", y2)]
    items += list(a.items())
    if positional:
        return f"{name}({', '.join(repr(v) for _, v in items)})"
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in items)})"


FORMS = {
    "tool_call": lambda a: (
        "I will act now.\n<tool_call>\n"
        + json.dumps({"name": "computer", "arguments": a}, ensure_ascii=False)
        + "\n</tool_call>"
    ),
    "tool_call_unterminated": lambda a: "<tool_call>\n" + json.dumps({"name": "computer", "arguments": a}),
    "fenced": lambda a: "Here is the action:\n```json\n" + json.dumps(a, indent=2) + "\n```\nThat's it.",
    "bare_json": lambda a: "Thought: the target is visible. Action: " + json.dumps(a) + " (end)",
    "openai_function": lambda a: json.dumps(
        {"type": "function", "function": {"name": "computer", "arguments": json.dumps(a)}}
    ),
    "openai_tool_calls": lambda a: json.dumps(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "computer", "arguments": json.dumps(a)}}],
        }
    ),
    "call_keywords": lambda a: "Action: " + as_call(a, positional=False),
    "call_positional": lambda a: as_call(a, positional=True),
}


@pytest.mark.parametrize("form", list(FORMS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_action_parses_back_from_every_form(form, data):
    mapping = data.draw(st.sampled_from(MAPPINGS))
    args, expected = data.draw(model_actions(mapping))
    text = FORMS[form](args)
    out = parse_action(text, mapping)
    assert isinstance(out, ParsedAction), (text, out)
    assert out.action == expected, text


@settings(max_examples=300, deadline=None)
@given(screen_actions)
def test_canonical_tool_call_round_trips_screen_actions(action):
    out = parsed(format_tool_call(action, IDENTITY))
    assert out.action == action and out.format == "tool_call"
    assert json.loads(json.dumps(to_arguments(action, IDENTITY)))["action"] == action.name


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ('<tool_call>{"action": "click", "coordinate": [1, 2]}</tool_call>', "tool_call"),
        ('<TOOL_CALL>{"action": "click", "coordinate": [1, 2]}</TOOL_CALL>', "tool_call"),
        ("<tool_call>\nclick(1, 2)\n</tool_call>", "tool_call"),
        ('```json\n{"action": "click", "coordinate": [1, 2]}\n```', "fenced"),
        ('```\n{"action": "click", "coordinate": [1, 2]}', "fenced"),  # unterminated fence
        ('so {"action": "click", "coordinate": [1, 2]} done', "json"),
        ("then click(1, 2).", "function_call"),
    ],
)
def test_format_is_reported(text, fmt):
    out = parsed(text)
    assert out.action == Click(1, 2) and out.format == fmt


# ------------------------------------------------------------------------- parser: aliases and shapes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # action name aliases, case-insensitive
        ('{"action": "left_click", "coordinate": [1, 2]}', Click(1, 2)),
        ('{"action": "CLICK", "coordinate": [1, 2]}', Click(1, 2)),
        ('{"action": "doubleclick", "coordinate": [1, 2]}', DoubleClick(1, 2)),
        ('{"action": "double-click", "coordinate": [1, 2]}', DoubleClick(1, 2)),
        ('{"action": "Right_Click", "coordinate": [1, 2]}', RightClick(1, 2)),
        ('{"action": "mouse_move", "coordinate": [1, 2]}', Move(1, 2)),
        ('{"action": "hotkey", "keys": "ctrl+s"}', Key("ctrl+s")),
        ('{"action": "key_press", "key": "enter"}', Key("Return")),
        ('{"action": "press", "keys": ["ctrl", "s"]}', Key("ctrl+s")),
        ('{"action": "input", "text": "abc"}', TypeText("abc")),
        ('{"action": "write", "text": "abc"}', TypeText("abc")),
        ('{"action": "type_text", "content": "abc"}', TypeText("abc")),
        ('{"action": "finish"}', Done()),
        ('{"action": "terminate", "status": "success"}', Done(True)),
        ('{"action": "terminate", "status": "failure"}', Done(False)),
        ('{"action": "stop", "answer": "42"}', Done(None, "42")),
        ('{"action": "sleep", "time": 2}', Wait(2.0)),
        ('{"action": "wait"}', Wait(1.0)),
        ('{"action": "wait", "seconds": 600}', Wait(MAX_WAIT_S)),  # over-long waits are capped
        # coordinate field aliases
        ('{"action": "click", "coords": [1, 2]}', Click(1, 2)),
        ('{"action": "click", "position": [1, 2]}', Click(1, 2)),
        ('{"action": "click", "point": "(1, 2)"}', Click(1, 2)),
        ('{"action": "click", "x": 1, "y": 2}', Click(1, 2)),
        ('{"action": "click", "coordinate": {"x": 1, "y": 2}}', Click(1, 2)),
        ('{"action": "click", "coordinate": ["1", " 2 "]}', Click(1, 2)),
        ('{"action": "click", "coordinate": [10, 20, 30, 40]}', Click(20, 30)),  # a box: its centre
        ('{"action": "drag", "start_coordinate": [1, 2], "end_coordinate": [3, 4]}', Drag(1, 2, 3, 4)),
        ('{"action": "drag", "x": 1, "y": 2, "x2": 3, "y2": 4}', Drag(1, 2, 3, 4)),
        ('{"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [3, 4]}', Drag(1, 2, 3, 4)),
        (
            '{"action": "scroll", "coordinate": [1, 2], "scroll_direction": "UP", "scroll_amount": 5}',
            Scroll(1, 2, "up", 5),
        ),
        ('{"action": "scroll_down", "coordinate": [1, 2]}', Scroll(1, 2, "down", 3)),
        (
            '{"action": "scroll", "coordinate": [1, 2], "direction": "down", "amount": 500}',
            Scroll(1, 2, "down", 50),
        ),
        ('{"action": "scroll", "pixels": -5}', Scroll(640, 400, "down", 5)),  # Qwen: signed, no position
        # tool-call shapes
        (
            '{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1, 2]}}',
            Click(1, 2),
        ),
        ('{"name": "click", "arguments": {"x": 1, "y": 2}}', Click(1, 2)),
        (
            '{"name": "computer", "arguments": "{\\"action\\": \\"key\\", \\"keys\\": \\"esc\\"}"}',
            Key("Escape"),
        ),
        ('{"action": {"type": "click", "x": 1, "y": 2}}', Click(1, 2)),
        ('{"type": "right_click", "x": 1, "y": 2}', RightClick(1, 2)),
        ("{'action': 'done', 'success': True, 'answer': 'ok'}", Done(True, "ok")),  # Python literal
        ('{"action": "click", "coordinate": [1, 2],}', Click(1, 2)),  # trailing comma
        # function-call text
        ("click(x=100, y=200)", Click(100, 200)),
        ("click(100, 200)", Click(100, 200)),
        ("click([100, 200])", Click(100, 200)),
        ("pyautogui.click(100, 200)", Click(100, 200)),
        ("left_click(coordinate=(100, 200))", Click(100, 200)),
        ("click(start_box='<|box_start|>(100,200)<|box_end|>')", Click(100, 200)),
        ('type(text="hello")', TypeText("hello")),
        ("type('it\\'s (fine)')", TypeText("it's (fine)")),
        ('key("ctrl+s")', Key("ctrl+s")),
        ('hotkey("ctrl", "c")', Key("ctrl+c")),
        ("hotkey(key='ctrl c')", Key("ctrl+c")),  # UI-TARS-1.5: keys separated by spaces
        ("hotkey(key='ctrl shift t')", Key("ctrl+shift+t")),
        ("press(key='page down')", Key("Page_Down")),  # a key name with a space stays one key
        ('{"action": "key", "keys": "alt tab"}', Key("alt+Tab")),
        ('scroll(500, 300, direction="down", amount=3)', Scroll(500, 300, "down", 3)),
        ("scroll(500, 300, direction=down)", Scroll(500, 300, "down", 3)),
        ("drag(10,20,300,400)", Drag(10, 20, 300, 400)),
        ("drag((10, 20), (300, 400))", Drag(10, 20, 300, 400)),
        ("done()", Done()),
        ("done(True)", Done(True)),
        ('finish(answer="Paris")', Done(None, "Paris")),
        ("wait(2.5)", Wait(2.5)),
        ("click(100, 200", Click(100, 200)),  # cut off by the token limit
        (
            '<tool_call>{"name": "computer", "arguments": {"action": "click", "coordinate": [1, 2]',
            Click(1, 2),
        ),
    ],
)
def test_aliases_and_shapes(text, expected):
    assert parsed(text).action == expected


def test_first_valid_action_wins():
    two = (
        '<tool_call>{"action": "click", "coordinate": [1, 2]}</tool_call>\n'
        '<tool_call>{"action": "click", "coordinate": [3, 4]}</tool_call>'
    )
    assert parsed(two).action == Click(1, 2)
    bad_then_good = (
        '<tool_call>{"action": "fly", "coordinate": [1, 2]}</tool_call>'
        '<tool_call>{"action": "click", "coordinate": [3, 4]}</tool_call>'
    )
    assert parsed(bad_then_good).action == Click(3, 4)
    # The explicit tool call wins over an earlier mention in prose.
    prose_first = (
        'I could click(5, 5) or type("x"), but: <tool_call>{"action": "click", "coordinate": [7, 7]}'
    )
    out = parsed(prose_first)
    assert out.action == Click(7, 7) and out.format == "tool_call"
    # An OpenAI tool_calls array: first valid entry.
    calls = {
        "tool_calls": [
            {"function": {"name": "nope", "arguments": "{}"}},
            {"function": {"name": "wait", "arguments": {}}},
        ]
    }
    assert parsed(json.dumps(calls)).action == Wait()


def test_braces_in_prose_around_the_object_do_not_hide_it():
    assert parsed('Let me {think: {"action": "click", "coordinate": [3, 4]} } ok').action == Click(3, 4)
    assert parsed('I { open a brace {"action": "click", "coordinate": [3, 4]}').action == Click(3, 4)
    assert parsed('{"a": 1} {"action": "click", "coordinate": [3, 4]}').action == Click(3, 4)


def test_strings_with_tags_and_braces_inside_typed_text():
    text = 'type a tag: <tool_call>{"action": "type", "text": "</tool_call> {not json} ```"}</tool_call>'
    assert parsed(text).action == TypeText("</tool_call> {not json} ```")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n\t", "empty"),
        ("I don't know what to do.", "no action"),
        ('{"action": "fly", "coordinate": [1, 2]}', "unknown action"),
        ('{"action": "click"}', "coordinate"),
        ('{"action": "click", "coordinate": [1]}', "2 numbers"),
        ('{"action": "click", "x": 1}', "'y'"),
        ('{"action": "scroll", "coordinate": [1, 2]}', "direction"),
        ('{"action": "scroll", "coordinate": [1, 2], "direction": "sideways"}', "direction"),
        ('{"action": "type"}', "text"),
        ('{"action": "type", "text": ""}', "empty"),
        ('{"action": "type", "text": "' + "a" * (MAX_TEXT + 1) + '"}', "longer"),
        ('{"action": "key", "keys": "ctrl+é"}', "key"),
        ("hotkey(key='ctrl é')", "no key name for 'é'"),  # split on spaces, still checked
        ('{"action": "wait", "seconds": -1}', "negative"),
        ('{"action": "done", "success": "maybe"}', "success"),
        ('{"name": "computer", "arguments": "{broken"}', "not valid JSON"),
        ('{"name": "computer", "arguments": {"coordinate": [1, 2]}}', "no 'action'"),
        # Unclosed objects are repaired by appending "}" (see test_aliases_and_shapes); unclosed lists are not.
        ('<tool_call>{"action": "click", "coordinate": [1, 2', "no action"),
    ],
)
def test_failures_are_typed_with_a_reason(text, reason):
    assert reason in failed(text).reason


@pytest.mark.parametrize(
    "text",
    [
        '{"action": "click", "coordinate": [NaN, 1]}',
        '{"action": "click", "coordinate": [1, Infinity]}',
        '{"action": "click", "coordinate": [-Infinity, 1]}',
        '{"action": "click", "coordinate": [1e999, 1]}',
        '{"action": "click", "x": "nan", "y": 1}',
        '{"action": "click", "coordinate": "(nan, 1)"}',
        '{"action": "drag", "start_coordinate": [1, 2], "end_coordinate": [NaN, NaN]}',
        '{"action": "scroll", "coordinate": [1, 2], "direction": "up", "amount": NaN}',
        '{"action": "wait", "seconds": NaN}',
        "click(float('nan'), 1)",
        "click(1e999, 1)",
    ],
)
def test_non_finite_numbers_never_become_actions(text):
    for m in MAPPINGS:
        failed(text, m)


@pytest.mark.parametrize("value", [None, 12, 3.5, ["click(1, 2)"], {"action": "click"}, object()])
def test_non_text_input_is_a_failure(value):
    assert "text" in failed(value).reason


def test_bytes_are_decoded_leniently():
    assert parsed(b'<tool_call>{"action": "click", "coordinate": [1, 2]}</tool_call>').action == Click(1, 2)
    failed(b"\xff\xfe\x00\x81" * 1000)


@pytest.mark.parametrize(
    "escaped",
    [
        r"0\ud800\udc00\0100",  # not JSON (\0): decoded as a Python literal, which keeps the pair apart
        r"0\ud800\udc00",  # JSON: joined by the decoder
    ],
)
def test_typed_text_with_an_escaped_surrogate_pair_is_the_character_it_names(escaped):
    """A model that writes the UTF-16 escapes of 𐀀 means 𐀀; two lone surrogates cannot be typed (not
    UTF-8) and came back from the sandbox's JSON as a different string (hypothesis found it)."""
    text = '<tool_call>\n{"name": "computer", "arguments": {"action": "type", "text": "' + escaped + '"}}'
    typed = parsed(text).action.text
    assert typed.startswith("0\U00010000")
    typed.encode("utf-8")


@pytest.mark.parametrize("text", ['{"action": "type", "text": "a\\ud800b"}', "type('a\\udc00')"])
def test_a_lone_surrogate_in_typed_text_is_a_failure(text):
    assert "surrogate" in failed(text).reason


def test_input_is_capped_at_64_kib():
    act = '<tool_call>{"action": "click", "coordinate": [1, 2]}</tool_call>'
    assert parsed(act + "x" * (4 * MAX_INPUT_CHARS)).action == Click(1, 2)
    assert "no action" in failed("x" * MAX_INPUT_CHARS + act).reason


# ---------------------------------------------------------------------------- parser: fuzz and bounds

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "```json\n",
    "```",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    '"',
    "'",
    "\\",
    ",",
    ":",
    "\n",
    '"action"',
    '"click"',
    '"coordinate"',
    '"arguments"',
    '"name": "computer"',
    '{"action": "click", "coordinate": [',
    "NaN",
    "Infinity",
    "1e999",
    "-0",
    "10",
    "99999999999999999999",
    "click(",
    "type(text=",
    "drag(",
    "scroll(",
    "key(",
    "done(",
    "x=",
    "True",
    "None",
    "\x00",
    "\ud7ff",
    "é",
    "🙂",
    "<|box_start|>",
]
adversarial = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=80).map("".join)


def check_total(text: Any, mapping: CoordinateMapping = IDENTITY, limit_s: float = 1.0) -> None:
    # CPU time of this thread: runaway backtracking burns it, while a loaded machine's pauses (CI once took
    # 2.6 s of wall time for a 6-character parse) do not count; nor does a collection of the whole heap
    # that the parse happens to set off (1.03 s once)
    collecting = gc.isenabled()
    gc.disable()
    try:
        t0 = time.thread_time()
        out = parse_action(text, mapping)
        elapsed = time.thread_time() - t0
    finally:
        if collecting:
            gc.enable()
    assert isinstance(out, ParsedAction | ParseFailure)
    assert not (isinstance(out, ParseFailure) and out.reason.startswith("internal")), out
    if isinstance(out, ParsedAction):
        # Whatever was parsed is a valid, on-screen action, and the sandbox of this screen accepts it.
        if not isinstance(out.action, Done):
            payload = json.loads(json.dumps(out.action.to_wire()))
            assert from_wire(payload) == out.action
            server_parse(payload, SCREEN_W, SCREEN_H)
        for f in ("x", "y", "x2", "y2"):
            v = getattr(out.action, f, 0)
            assert 0 <= v < max(SCREEN_W, SCREEN_H)
    assert elapsed < limit_s, f"{elapsed:.2f}s for {len(text) if isinstance(text, str) else '?'} chars"


def test_the_timed_parse_runs_without_the_garbage_collector(monkeypatch):
    """check_total times the parse's CPU to catch runaway backtracking; a full collection in a worker that
    holds the suite's heap (AReaL, torch, ~6.5M objects: 0.68 s of CPU, idle) landed inside a 6-character
    parse once and failed it at 1.03 s."""
    seen, parse = [], parse_action
    monkeypatch.setattr(__name__ + ".parse_action", lambda *a: seen.append(gc.isenabled()) or parse(*a))
    check_total("click(1, 2)")
    assert seen == [False] and gc.isenabled()


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=400), st.sampled_from(MAPPINGS))
def test_fuzz_random_unicode(text, mapping):
    check_total(text, mapping)


@settings(max_examples=1200, deadline=None)
@given(adversarial, st.sampled_from(MAPPINGS))
def test_fuzz_adversarial_fragments(text, mapping):
    check_total(text, mapping)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_binary(data):
    check_total(data)


@settings(max_examples=500, deadline=None)
@given(model_actions(RELATIVE), st.sampled_from(list(FORMS)), st.data())
def test_fuzz_mutated_valid_outputs(pair, form, data):
    text = FORMS[form](pair[0])
    i = data.draw(st.integers(0, len(text)))
    how = data.draw(st.sampled_from(["truncate", "delete", "insert", "duplicate"]))
    if how == "truncate":
        text = text[:i]
    elif how == "delete":
        text = text[:i] + text[i + 1 :]
    elif how == "insert":
        text = text[:i] + data.draw(st.sampled_from(FRAGMENTS)) + text[i:]
    else:
        text = text[:i] + text + text[i:]
    check_total(text, RELATIVE)


@pytest.mark.parametrize(
    "text",
    [
        "{" * 200_000,
        "}" * 200_000,
        "[" * 200_000 + "]" * 200_000,
        '"' * 200_000,
        "\\" * 200_000,
        "{" * 30_000 + '"action": "click"' + "}" * 30_000,
        '{"a":' * 20_000,
        "<tool_call>" * 50_000,
        "<tool_call>{" * 20_000,
        "```" * 60_000,
        "```json\n{" * 20_000,
        "click(" * 40_000,
        "click(" + "(" * 100_000,
        "type(text='" + "a" * 200_000,
        "a" * 1_000_000,
        "click" * 100_000 + "(1, 2)",
        " " * 500_000 + "(",
        '{"action": "type", "text": "' + "\\u0041" * 60_000 + '"}',
        '{"action": "click", "coordinate": [' + "9" * 60_000 + ", 1]}",
        "{'a': " * 3_000 + "1" + "}" * 3_000,
        ("{" + '"x": "' + "}" * 50 + '", ') * 2_000,
        ("Thought: {maybe} " * 10_000),
        "\x00" * 100_000,
        "🙂" * 100_000,
    ],
    ids=lambda t: f"{t[:12]!r}x{len(t)}",
)
def test_huge_and_pathological_inputs_are_bounded(text):
    check_total(text, IDENTITY, limit_s=2.0)


def test_many_candidates_stop_at_the_budget():
    # 10k invalid tool calls before a valid one: work is capped, so the valid one is not reached, quickly.
    junk = '<tool_call>{"action": "fly"}</tool_call>' * 10_000
    t0 = time.thread_time()
    out = parse_action(junk + '<tool_call>{"action": "click", "coordinate": [1, 2]}</tool_call>', IDENTITY)
    assert time.thread_time() - t0 < 1.0
    assert isinstance(out, ParseFailure) and "unknown action" in out.reason
