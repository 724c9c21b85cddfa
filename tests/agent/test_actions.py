"""Typed actions, keys, and the wire payload: what the agent sends is what the sandbox accepts."""

from __future__ import annotations

import dataclasses
import json
import math
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from sandbox.server.protocol import (
    ACTION_TYPES,
    KEY_NAMES,
    KEYSYM,
    MAX_COORD,
    MAX_KEYS,
    MAX_SCROLL,
    MAX_TEXT,
    MAX_WAIT_S,
    MODIFIERS,
    PUNCTUATION,
    ActionError,
    normalize_keys,
)
from sandbox.server.xdotool import to_xdotool as server_parse
from tests.agent.action_cases import from_wire, safe_text, screen_actions

# ------------------------------------------------------------------------------------ typed actions


@pytest.mark.parametrize(
    "make",
    [
        lambda: Click(-1, 0),
        lambda: Click(0, MAX_COORD),
        lambda: Click(1.5, 2),  # type: ignore[arg-type]
        lambda: Click(True, 2),  # type: ignore[arg-type]
        lambda: Move("3", 4),  # type: ignore[arg-type]
        lambda: Drag(0, 0, -5, 0),
        lambda: Scroll(1, 1, "diagonal", 1),
        lambda: Scroll(1, 1, "down", 0),
        lambda: Scroll(1, 1, "down", MAX_SCROLL + 1),
        lambda: Scroll(1, 1, "down", True),  # type: ignore[arg-type]
        lambda: TypeText(""),
        lambda: TypeText("a" * (MAX_TEXT + 1)),
        lambda: TypeText("a\x00b"),
        lambda: TypeText(5),  # type: ignore[arg-type]
        lambda: Key(""),
        lambda: Key("ctrl+"),
        lambda: Key("a+b+c+d+e+f"),
        lambda: Key("ctrl+é"),
        lambda: Key("not a key"),
        lambda: Key([]),  # type: ignore[arg-type]
        lambda: Key(5),  # type: ignore[arg-type]
        lambda: Wait(-0.1),
        lambda: Wait(MAX_WAIT_S + 0.1),
        lambda: Wait(math.nan),
        lambda: Wait(True),  # type: ignore[arg-type]
        lambda: Done(success="yes"),  # type: ignore[arg-type]
        lambda: Done(answer=5),  # type: ignore[arg-type]
    ],
)
def test_invalid_actions_are_rejected_at_construction(make):
    with pytest.raises(ActionError):
        make()


def test_actions_are_frozen_and_hashable():
    c = Click(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.x = 5  # type: ignore[misc]
    assert {Click(1, 2), Click(1, 2), DoubleClick(1, 2)} == {Click(1, 2), DoubleClick(1, 2)}
    assert Click(1, 2) != Move(1, 2)  # same fields, different action


@pytest.mark.parametrize(
    ("keys", "canonical"),
    [
        ("ctrl+s", "ctrl+s"),
        ("Ctrl+S", "ctrl+s"),
        ("control+s", "ctrl+s"),
        ("ctrl + shift + esc", "ctrl+shift+Escape"),
        ("shift+ctrl+t", "ctrl+shift+t"),
        ("enter", "Return"),
        ("Enter", "Return"),
        ("RETURN", "Return"),
        ("esc", "Escape"),
        ("cmd+c", "super+c"),
        ("win", "super"),
        ("meta+space", "super+space"),
        ("pgup", "Prior"),
        ("PageDown", "Next"),
        ("alt+tab", "alt+Tab"),
        ("alt+Tab", "alt+Tab"),
        ("ctrl++", "ctrl+plus"),
        ("ctrl+-", "ctrl+minus"),
        ("+", "plus"),
        (["ctrl", "alt", "Delete"], "ctrl+alt+Delete"),
        (["control", "del"], "ctrl+Delete"),
        ("F5", "F5"),
        ("f12", "F12"),
        ("backspace", "BackSpace"),
        ("ArrowUp", "Up"),
        ("KP_Enter", "KP_Enter"),  # real keysyms pass through, case preserved
        ("A", "A"),  # a lone capital types a capital
        ("shift+A", "shift+a"),  # in a combination the modifier carries the case
        ("ctrl+ctrl+s", "ctrl+s"),
    ],
)
def test_key_normalisation(keys, canonical):
    assert normalize_keys(keys) == canonical
    assert normalize_keys(canonical) == canonical  # idempotent
    assert Key(keys) == Key(canonical)
    assert all(KEYSYM.fullmatch(tok) or (len(tok) == 1 and tok.isalnum()) for tok in canonical.split("+"))
    assert server_parse({"type": "key", "keys": keys}, 10, 10).xdotool[-1] == canonical  # the sandbox agrees


# -------------------------------------------------------------------------------------------- wire


def test_wire_payloads_are_the_sandbox_format():
    assert Click(10, 20).to_wire() == {"type": "click", "x": 10, "y": 20}
    assert RightClick(1, 2).to_wire() == {"type": "right_click", "x": 1, "y": 2}
    assert MiddleClick(1, 2).to_wire() == {"type": "click", "x": 1, "y": 2, "button": "middle"}
    assert Drag(1, 2, 3, 4).to_wire() == {"type": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}
    assert Scroll(5, 6, "down", 3).to_wire() == {"type": "scroll", "x": 5, "y": 6, "dx": 0, "dy": 3}
    assert Scroll(5, 6, "up", 3).to_wire() == {"type": "scroll", "x": 5, "y": 6, "dx": 0, "dy": -3}
    assert Scroll(5, 6, "left", 2).to_wire() == {"type": "scroll", "x": 5, "y": 6, "dx": -2, "dy": 0}
    assert TypeText("hi").to_wire() == {"type": "type", "text": "hi"}
    assert Key("Ctrl+S").to_wire() == {"type": "key", "keys": "ctrl+s"}
    assert Wait(2).to_wire() == {"type": "wait", "seconds": 2.0}
    assert not hasattr(Done(), "to_wire")  # the episode ends; the sandbox never sees it


@settings(max_examples=300, deadline=None)
@given(screen_actions.filter(lambda a: not isinstance(a, Done)))
def test_wire_round_trip_through_json(action):
    payload = json.loads(json.dumps(action.to_wire()))
    assert from_wire(payload) == action


# ------------------------------------------------------- agent and sandbox: one protocol, both sides

# On a screen of MAX_COORD pixels the server's on-screen check and the agent's coordinate limit coincide.
BIG = MAX_COORD
coord = st.integers(0, MAX_COORD - 1) | st.sampled_from([0, MAX_COORD - 1])
limit_text = safe_text | st.sampled_from(["a" * MAX_TEXT, "-" * MAX_TEXT, "é" * MAX_TEXT, "--help"])
# Every spelling the key vocabulary knows, in several cases, plus arbitrary keysyms.
KEY_TOKENS = sorted(
    {
        t
        for name in [*MODIFIERS, *KEY_NAMES, *PUNCTUATION, *(f"f{i}" for i in range(1, 25))]
        for t in (name, name.upper(), name.title())
    }
    | set(string.ascii_letters + string.digits)
)
key_token = st.sampled_from(KEY_TOKENS) | st.from_regex(KEYSYM, fullmatch=True)
key_lists = st.lists(key_token, min_size=1, max_size=MAX_KEYS)
limit_actions = st.one_of(
    st.builds(Click, coord, coord),
    st.builds(DoubleClick, coord, coord),
    st.builds(RightClick, coord, coord),
    st.builds(MiddleClick, coord, coord),
    st.builds(Move, coord, coord),
    st.builds(Drag, coord, coord, coord, coord),
    st.builds(
        Scroll, coord, coord, st.sampled_from(["up", "down", "left", "right"]), st.integers(1, MAX_SCROLL)
    ),
    st.builds(TypeText, limit_text),
    st.builds(Key, key_lists),
    st.builds(Wait, st.floats(0, MAX_WAIT_S) | st.sampled_from([0, MAX_WAIT_S])),
)


def test_the_sandbox_knows_every_agent_action_type_but_done():
    assert set(ACTION_TYPES) == {
        c.name for c in (Click, DoubleClick, RightClick, Move, Drag, Scroll, TypeText, Key, Wait)
    }
    # a middle click is the wire's click with the middle button
    assert server_parse(MiddleClick(3, 4).to_wire(), 10, 10).xdotool[-1] == "2"  # X's middle button


@settings(max_examples=600, deadline=None)
@given(limit_actions)
def test_every_agent_action_is_accepted_by_the_sandbox(action):
    payload = json.loads(json.dumps(action.to_wire()))
    act = server_parse(payload, BIG, BIG)
    assert act.type == payload["type"] == (action.name if not isinstance(action, MiddleClick) else "click")
    if isinstance(action, Key):
        assert act.xdotool[-1] == action.keys  # the sandbox presses exactly the agent's canonical keys
    if isinstance(action, TypeText):
        assert act.xdotool[-1] == action.text
    if isinstance(action, Wait):
        assert act.wait_s == action.seconds


@settings(max_examples=600, deadline=None)
@given(key_lists)
def test_key_vocabulary_agrees_on_both_sides(tokens):
    canonical = normalize_keys(tokens)  # every vocabulary token is a key, alone or combined
    assert normalize_keys(canonical) == canonical
    assert Key(tokens).keys == canonical
    assert server_parse({"type": "key", "keys": tokens}, 10, 10).xdotool[-1] == canonical
    assert server_parse({"type": "key", "keys": canonical}, 10, 10).xdotool[-1] == canonical
    if "+" not in tokens[:-1]:  # the string form: "+" can only be the last key ("ctrl++")
        assert normalize_keys("+".join(tokens)) == canonical


def wire_and_agent(payload: dict, make) -> tuple[bool, bool]:
    """(the sandbox accepts payload, the agent can construct the action): they must be equal."""
    try:
        server_parse(payload, BIG, BIG)
        server_ok = True
    except ActionError:
        server_ok = False
    try:
        make()
        agent_ok = True
    except ActionError:
        agent_ok = False
    return server_ok, agent_ok


@pytest.mark.parametrize(
    ("payload", "make", "ok"),
    [
        ({"type": "click", "x": MAX_COORD - 1, "y": 0}, lambda: Click(MAX_COORD - 1, 0), True),
        ({"type": "click", "x": MAX_COORD, "y": 0}, lambda: Click(MAX_COORD, 0), False),
        ({"type": "click", "x": -1, "y": 0}, lambda: Click(-1, 0), False),
        ({"type": "type", "text": "a" * MAX_TEXT}, lambda: TypeText("a" * MAX_TEXT), True),
        ({"type": "type", "text": "a" * (MAX_TEXT + 1)}, lambda: TypeText("a" * (MAX_TEXT + 1)), False),
        ({"type": "type", "text": ""}, lambda: TypeText(""), False),
        ({"type": "type", "text": "a\x00"}, lambda: TypeText("a\x00"), False),
        (
            {"type": "scroll", "x": 0, "y": 0, "dy": MAX_SCROLL},
            lambda: Scroll(0, 0, "down", MAX_SCROLL),
            True,
        ),
        (
            {"type": "scroll", "x": 0, "y": 0, "dx": -MAX_SCROLL},
            lambda: Scroll(0, 0, "left", MAX_SCROLL),
            True,
        ),
        (
            {"type": "scroll", "x": 0, "y": 0, "dy": MAX_SCROLL + 1},
            lambda: Scroll(0, 0, "down", MAX_SCROLL + 1),
            False,
        ),
        ({"type": "scroll", "x": 0, "y": 0, "dy": 0}, lambda: Scroll(0, 0, "down", 0), False),
        ({"type": "wait", "seconds": MAX_WAIT_S}, lambda: Wait(MAX_WAIT_S), True),
        ({"type": "wait", "seconds": 0}, lambda: Wait(0), True),
        ({"type": "wait", "seconds": MAX_WAIT_S + 0.1}, lambda: Wait(MAX_WAIT_S + 0.1), False),
        ({"type": "wait", "seconds": -0.1}, lambda: Wait(-0.1), False),
        (
            {"type": "key", "keys": "+".join("abcde"[:MAX_KEYS])},
            lambda: Key("+".join("abcde"[:MAX_KEYS])),
            True,
        ),
        ({"type": "key", "keys": "+".join("abcdef"[: MAX_KEYS + 1])}, lambda: Key("+".join("abcdef")), False),
        ({"type": "key", "keys": "ctrl++"}, lambda: Key("ctrl++"), True),
        ({"type": "key", "keys": "pgup"}, lambda: Key("pgup"), True),
        ({"type": "key", "keys": "ctrl+é"}, lambda: Key("ctrl+é"), False),
        ({"type": "key", "keys": "ctrl+$(reboot)"}, lambda: Key("ctrl+$(reboot)"), False),
    ],
)
def test_limits_agree_on_both_sides(payload, make, ok):
    assert wire_and_agent(payload, make) == (ok, ok)
