"""The action wire protocol: the JSON body of the control server's /action, defined once.

Standard library only: this module ships in the sandbox image next to the server, and the agent on the
host imports its limits and its key normaliser, so an action valid on one side is never rejected on the
other. The server (xdotool.py) validates payloads against it and translates them to xdotool.

    {"type": <one of ACTION_TYPES>, <the fields of that type (FIELDS)>}    coordinates in screen pixels

    click, double_click, right_click  x, y; button (BUTTONS; default DEFAULT_BUTTON[type])
    move                              x, y
    drag                              x, y (press), to_x, to_y (release)
    scroll                            x, y; dx, dy: wheel clicks, positive = right/down, not both zero
    type                              text: 1..MAX_TEXT characters, no NUL
    key                               keys: "ctrl+s" or ["ctrl", "s"], at most MAX_KEYS (normalize_keys)
    wait                              seconds: 0..MAX_WAIT_S (default DEFAULT_WAIT_S)

Any type may also carry wait_change_s: wait up to that long (MAX_WAIT_CHANGE_S) for the screen to change
and settle (check_wait_change).
Other fields are ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any


class ActionError(ValueError):
    """A value outside the action space (bad coordinate, unknown key, text too long, ...)."""


FIELDS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y", "button"),
    "double_click": ("x", "y", "button"),
    "right_click": ("x", "y", "button"),
    "move": ("x", "y"),
    "drag": ("x", "y", "to_x", "to_y"),
    "scroll": ("x", "y", "dx", "dy"),
    "type": ("text",),
    "key": ("keys",),
    "wait": ("seconds",),
}
ACTION_TYPES: tuple[str, ...] = tuple(FIELDS)

BUTTONS = ("left", "middle", "right")
DEFAULT_BUTTON = {"click": "left", "double_click": "left", "right_click": "right"}
# A scroll direction as the unit (dx, dy) of the wire's wheel clicks.
SCROLL_UNITS: dict[str, tuple[int, int]] = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}

MAX_TEXT = 2000  # characters typed by one action
# The server's exit status when it stopped itself after its idle time without a request (--idle-exit-s):
# the box's last backstop against a trainer that vanished, never the policy's doing.
IDLE_EXIT_CODE = 75
MAX_WAIT_S = 10.0
MAX_WAIT_CHANGE_S = 5.0
MAX_SCROLL = 50  # wheel clicks per axis
MAX_KEYS = 5  # keys in one combination
MAX_COORD = 1 << 15  # pixels; anything larger is not a screen
DEFAULT_SCROLL = 3
DEFAULT_WAIT_S = 1.0
# Bound on the text of a key combination. Above the longest canonical one (MAX_KEYS keysyms of 31
# characters and their "+"), so normalize_keys(normalize_keys(k)) never fails on length.
MAX_KEYS_CHARS = 200


# ------------------------------------------------------------------------------------------- keys

# Modifier aliases -> xdotool's modifier names.
MODIFIERS: dict[str, str] = {
    "ctrl": "ctrl",
    "control": "ctrl",
    "ctl": "ctrl",
    "alt": "alt",
    "option": "alt",
    "opt": "alt",
    "shift": "shift",
    "super": "super",
    "win": "super",
    "windows": "super",
    "cmd": "super",
    "command": "super",
    "meta": "super",
}
# Modifiers come first, in this order, so equal combinations have equal text.
MODIFIER_ORDER = ("ctrl", "alt", "shift", "super")
# Friendly names (lower case, spaces as "_") -> X keysyms.
KEY_NAMES: dict[str, str] = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "back_space": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "ins": "Insert",
    "space": "space",
    "spacebar": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "page_up": "Prior",
    "pgup": "Prior",
    "prior": "Prior",
    "pagedown": "Next",
    "page_down": "Next",
    "pgdn": "Next",
    "pgdown": "Next",
    "next": "Next",
    "capslock": "Caps_Lock",
    "caps_lock": "Caps_Lock",
    "printscreen": "Print",
    "print": "Print",
    "prtsc": "Print",
    "menu": "Menu",
}
# One punctuation character -> its X keysym.
PUNCTUATION: dict[str, str] = {
    "-": "minus",
    "+": "plus",
    "=": "equal",
    ",": "comma",
    ".": "period",
    "/": "slash",
    "\\": "backslash",
    ";": "semicolon",
    ":": "colon",
    "'": "apostrophe",
    '"': "quotedbl",
    "`": "grave",
    "[": "bracketleft",
    "]": "bracketright",
    "{": "braceleft",
    "}": "braceright",
    "(": "parenleft",
    ")": "parenright",
    "<": "less",
    ">": "greater",
    "!": "exclam",
    "?": "question",
    "@": "at",
    "#": "numbersign",
    "$": "dollar",
    "%": "percent",
    "^": "asciicircum",
    "&": "ampersand",
    "*": "asterisk",
    "_": "underscore",
    "|": "bar",
    "~": "asciitilde",
    " ": "space",
}
FKEY = re.compile(r"f([1-9]|1[0-9]|2[0-4])")
# What passes through as an X keysym (KP_Enter, XF86AudioMute, ...): also all xdotool ever receives, so
# no key text can smuggle options or shell syntax into its arguments.
KEYSYM = re.compile(r"[A-Za-z][A-Za-z0-9_]{1,30}")


def _keysym(token: str) -> str:
    if len(token) == 1:
        if token.isascii() and token.isalnum():
            return token
        if token in PUNCTUATION:
            return PUNCTUATION[token]
        raise ActionError(f"no key name for {token!r}")
    tok = token.strip()
    low = tok.lower().replace(" ", "_")
    if low in MODIFIERS:
        return MODIFIERS[low]
    if low in KEY_NAMES:
        return KEY_NAMES[low]
    if FKEY.fullmatch(low):
        return low.upper()
    if len(tok) == 1:
        return _keysym(tok)
    if KEYSYM.fullmatch(tok):
        return tok  # keysyms are case-sensitive
    raise ActionError(f"invalid key name {token[:40]!r}")


def normalize_keys(keys: Any) -> str:
    """'Ctrl+S', ['control', 's'], 'cmd+shift+T' -> 'ctrl+s', 'ctrl+s', 'shift+super+t' (xdotool syntax).

    Modifiers come first in a fixed order, so equal combinations compare equal; letters in a combination
    are lower-cased (the modifier says shift, not the letter's case). Idempotent.
    """
    if isinstance(keys, str):
        if len(keys) > MAX_KEYS_CHARS:
            raise ActionError("'keys' is too long")
        if keys in ("+", " "):
            parts = [keys]
        elif keys.endswith("++"):  # "ctrl++": the last key is plus
            parts = [*keys[:-2].split("+"), "+"]
        else:
            parts = keys.split("+")
        parts = [p if p == " " else p.strip() for p in parts]
    elif isinstance(keys, list | tuple) and keys and all(isinstance(k, str) for k in keys):
        parts = list(keys)
    else:
        raise ActionError("'keys' must be a string like 'ctrl+s' or a non-empty list of key names")
    if any(p == "" for p in parts):
        raise ActionError(f"empty key name in {keys!r}")
    if len(parts) > MAX_KEYS:
        raise ActionError(f"'keys' combines at most {MAX_KEYS} keys")
    syms = [_keysym(p) for p in parts]
    mods = [m for m in MODIFIER_ORDER if m in syms]
    rest = [s for s in syms if s not in MODIFIER_ORDER]
    if mods:
        rest = [s.lower() if len(s) == 1 else s for s in rest]
    return "+".join(mods + rest)


# ------------------------------------------------------------------------------- shared field checks


def check_text(field: str, text: Any, allow_empty: bool = False) -> str:
    if not isinstance(text, str):
        raise ActionError(f"'{field}' must be a string, got {type(text).__name__}")
    if not text and not allow_empty:
        raise ActionError(f"'{field}' must not be empty")
    if len(text) > MAX_TEXT:
        raise ActionError(f"'{field}' is longer than {MAX_TEXT} characters ({len(text)})")
    if "\x00" in text:
        raise ActionError(f"'{field}' contains a NUL character")
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise ActionError(f"'{field}' contains a lone surrogate (not Unicode text; it cannot be typed)")
    return text


def check_seconds(seconds: Any) -> float:
    s = seconds
    if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s <= MAX_WAIT_S:
        raise ActionError(f"'seconds' must be a number in [0, {MAX_WAIT_S}], got {s!r}")
    return float(s)


def check_wait_change(payload: dict[str, Any]) -> float:
    """An action's `wait_change_s` (0: do not wait)."""
    s = payload.get("wait_change_s", 0)
    if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s <= MAX_WAIT_CHANGE_S:
        raise ActionError(f"'wait_change_s' must be a number in [0, {MAX_WAIT_CHANGE_S:g}]")
    return float(s)


# -- answers the host can trust ----------------------------------------------------------------------------
NONCE_HEADER = "X-CUA-Nonce"  # the client's, fresh for each request
PROOF_HEADER = "X-CUA-Proof"  # the server's signature of its answer to that request


def signature(proof: str, nonce: str, result_header: str, body: bytes) -> str:
    """What the server signs each answer with: the client's nonce for this request (no replay), the action
    result header, the body. Only the server holds `proof`, so a process that relays or replaces it cannot
    change an answer, a reward above all."""
    msg = b"\n".join([nonce.encode(), result_header.encode(), body])
    return hmac.new(proof.encode(), msg, hashlib.sha256).hexdigest()
