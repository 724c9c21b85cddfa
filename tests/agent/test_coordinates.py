"""Coordinate conventions: model coordinates <-> screen pixels."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cua_agent.episode.coordinates import CoordinateError, CoordinateMapping
from tests.agent.action_cases import (
    IDENTITY,
    MAPPINGS,
    RELATIVE,
    RESIZED_DOWN,
    RESIZED_UP,
    SCREEN_H,
    SCREEN_W,
    screen_x,
    screen_y,
)


def test_absolute_convention_maps_with_the_resize_scale():
    assert IDENTITY.to_screen(0, 0) == (0, 0)
    assert IDENTITY.to_screen(1279, 799) == (1279, 799)
    half = CoordinateMapping(1280, 800, 640, 400, "absolute")
    assert half.to_screen(100, 50) == (200, 100)
    assert half.to_screen(100.4, 50.3) == (201, 101)  # fractional model coordinates round half up
    assert RESIZED_UP.to_screen(644, 406) == (640, 400)  # the image is larger than the screen
    assert RESIZED_DOWN.to_screen(322, 196) == (640, 400)


def test_relative_1000_convention_ignores_the_image_size():
    for image in ((644, 392), (1288, 812), (10, 10)):
        m = CoordinateMapping(SCREEN_W, SCREEN_H, *image, "relative_1000")
        assert m.to_screen(0, 0) == (0, 0)
        assert m.to_screen(500, 500) == (640, 400)
        assert m.to_screen(250, 750) == (320, 600)
        assert m.to_screen(1000, 1000) == (SCREEN_W - 1, SCREEN_H - 1)  # the far edge is on the screen
        assert m.model_size == (1000, 1000)


def test_coordinates_are_clamped_to_the_screen():
    assert IDENTITY.to_screen(-10, 5000) == (0, SCREEN_H - 1)
    assert RELATIVE.to_screen(1e9, -1e9) == (SCREEN_W - 1, 0)
    assert RESIZED_DOWN.to_screen(10**30, 3) == (SCREEN_W - 1, 6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "10", None, True, [1], 10**400])
def test_non_finite_or_non_numeric_coordinates_are_rejected(bad):
    for m in MAPPINGS:
        with pytest.raises(CoordinateError):
            m.to_screen(bad, 10)
        with pytest.raises(CoordinateError):
            m.to_screen(10, bad)


@pytest.mark.parametrize(
    "args",
    [
        (0, 800, 640, 400, "absolute"),
        (1280, -1, 640, 400, "absolute"),
        (1280, 800, 640.0, 400, "absolute"),
        (1280, 800, True, 400, "absolute"),
        (1280, 800, 640, 400, "relative"),
        (1280, 800, 640, 400, "RELATIVE_1000"),
    ],
)
def test_bad_mappings_are_rejected(args):
    with pytest.raises(ValueError):
        CoordinateMapping(*args)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MAPPINGS), st.data())
def test_to_model_inverts_to_screen(mapping, data):
    mw, mh = mapping.model_size
    # Screen -> model -> screen lands within one model unit of where it started.
    sx, sy = data.draw(screen_x), data.draw(screen_y)
    bx, by = mapping.to_screen(*mapping.to_model(sx, sy))
    assert abs(bx - sx) <= math.ceil(SCREEN_W / mw) and abs(by - sy) <= math.ceil(SCREEN_H / mh)
    # Where the screen has at least the model's resolution, model -> screen -> model is exact.
    mx = data.draw(st.integers(0, mw - 1))
    my = data.draw(st.integers(0, mh - 1))
    px, py = mapping.to_screen(mx, my)
    back = mapping.to_model(px, py)
    if mw <= SCREEN_W and px < SCREEN_W - 1:
        assert back[0] == mx
    if mh <= SCREEN_H and py < SCREEN_H - 1:
        assert back[1] == my
