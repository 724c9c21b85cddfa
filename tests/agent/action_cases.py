"""Screens, mappings, action strategies and the wire inverse shared by the action, coordinate and parser tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from cua_agent.episode import actions
from cua_agent.episode.actions import (
    Action,
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
from sandbox.server.protocol import FIELDS

SCREEN_W, SCREEN_H = 1280, 800
IDENTITY = CoordinateMapping.identity(SCREEN_W, SCREEN_H)
# Qwen2.5-VL sees the screenshot resized by its processor (here smaller, and larger) and points on that image.
RESIZED_DOWN = CoordinateMapping(SCREEN_W, SCREEN_H, 644, 392, "absolute")
RESIZED_UP = CoordinateMapping(SCREEN_W, SCREEN_H, 1288, 812, "absolute")
RELATIVE = CoordinateMapping(SCREEN_W, SCREEN_H, 644, 392, "relative_1000")
MAPPINGS = [IDENTITY, RESIZED_DOWN, RESIZED_UP, RELATIVE]

screen_x = st.integers(0, SCREEN_W - 1)
screen_y = st.integers(0, SCREEN_H - 1)
safe_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=80
)
KEY_INPUTS = ["ctrl+s", "Return", "alt+Tab", "ctrl+shift+t", "Escape", "super", "F5", "ctrl+plus", "Prior"]
screen_actions = st.one_of(
    st.builds(Click, screen_x, screen_y),
    st.builds(DoubleClick, screen_x, screen_y),
    st.builds(RightClick, screen_x, screen_y),
    st.builds(MiddleClick, screen_x, screen_y),
    st.builds(Move, screen_x, screen_y),
    st.builds(Drag, screen_x, screen_y, screen_x, screen_y),
    st.builds(
        Scroll, screen_x, screen_y, st.sampled_from(["up", "down", "left", "right"]), st.integers(1, 50)
    ),
    st.builds(TypeText, safe_text),
    st.builds(Key, st.sampled_from(KEY_INPUTS)),
    st.builds(Wait, st.integers(0, 20).map(lambda i: i / 2)),
    st.builds(Done, st.sampled_from([None, True, False]), st.none() | safe_text | st.just("")),
)


def from_wire(payload: dict[str, Any]) -> Action:
    """The typed action a wire payload came from, checking that `to_wire` writes only the fields it models."""
    assert set(payload) - {"type"} <= set(FIELDS[payload["type"]]), payload
    return actions.from_wire(payload)
