"""Model coordinates <-> screen pixels, per the coordinate convention of a model family.

Typed actions hold screen pixels; the model points in its own space. The parser maps model coordinates to
the screen, the canonical tool-call text maps them back for the prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from sandbox.server.protocol import MAX_COORD, ActionError

# Which convention a model family emits:
#   "absolute":      pixels of the image the model was shown. Qwen2.5-VL (and UI-TARS-1.5 in absolute mode)
#                    point on the *resized* image its processor produced (smart_resize to multiples of 28),
#                    so map with the resized -> screen scale.
#   "relative_1000": both axes normalised to 0..1000 whatever the image size. Qwen3-VL and UI-TARS(-1.0).
Convention = Literal["absolute", "relative_1000"]
CONVENTIONS: tuple[str, ...] = ("absolute", "relative_1000")


class CoordinateError(ActionError):
    """A model coordinate that cannot be mapped (NaN, infinity, not a number)."""


def finite_number(v: Any, what: str) -> float:
    """v as a finite float; CoordinateError for NaN, infinity, bools and non-numbers."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise CoordinateError(f"{what} must be a number, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:
        raise CoordinateError(f"{what} is out of range") from None
    if not math.isfinite(f):
        raise CoordinateError(f"{what} is not finite ({f})")
    return f


def round_half_up(v: float) -> int:
    return math.floor(v + 0.5)  # round() would be banker's rounding


@dataclass(frozen=True)
class CoordinateMapping:
    """Model coordinates <-> screen pixels. image_w/h: the size of the image the model saw."""

    screen_w: int
    screen_h: int
    image_w: int
    image_h: int
    convention: Convention = "absolute"

    def __post_init__(self) -> None:
        for f in ("screen_w", "screen_h", "image_w", "image_h"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_COORD:
                raise ValueError(f"CoordinateMapping.{f} must be an int in (0, {MAX_COORD}], got {v!r}")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {self.convention!r}")

    @classmethod
    def identity(cls, screen_w: int, screen_h: int) -> CoordinateMapping:
        return cls(screen_w, screen_h, screen_w, screen_h, "absolute")

    @property
    def model_size(self) -> tuple[int, int]:
        """Extent of the model's coordinate space (the values a model should emit are below/at this)."""
        if self.convention == "relative_1000":
            return 1000, 1000
        return self.image_w, self.image_h

    def to_screen(self, x: Any, y: Any) -> tuple[int, int]:
        """Model coordinates -> screen pixels, clamped to the screen. Raises CoordinateError on NaN/inf."""
        fx, fy = finite_number(x, "x"), finite_number(y, "y")
        mw, mh = self.model_size
        sx = round_half_up(fx * self.screen_w / mw)
        sy = round_half_up(fy * self.screen_h / mh)
        return min(max(sx, 0), self.screen_w - 1), min(max(sy, 0), self.screen_h - 1)

    def to_model(self, x: int, y: int) -> tuple[int, int]:
        """Screen pixels -> the model's coordinates (for echoing past actions in its own convention)."""
        mw, mh = self.model_size
        mx = round_half_up(finite_number(x, "x") * mw / self.screen_w)
        my = round_half_up(finite_number(y, "y") * mh / self.screen_h)
        return min(max(mx, 0), mw - 1), min(max(my, 0), mh - 1)
