"""A tolerant parser of model output: the first valid action, in screen pixels, or a failure with a reason.

`parse_action` never raises. Model output is untrusted and may be megabytes of garbage, so the input and
the decode attempts are bounded.

Only the answer is read, never the reasoning before it: text up to the last `</think>` (a Thinking model's
reasoning) is skipped, and a reasoning cut off before its `</think>` is no action. Given the model family
(`family`), the parser reads as that family's own harness does:
- qwen3-vl: a `<tool_call>` or JSON object only, never function-call prose (a Thinking model's reasoning cut
  off by the token limit carries no `<think>` of its own: its `<think>` ends the prompt);
- ui-tars: only the text after the last `Action:` (never a call-like phrase in the `Thought:`), with a
  `type(content='...')` whose inner single quotes are not escaped repaired as UI-TARS's parser does.
Qwen's computer_use acts at the pointer when a click or a scroll has no `coordinate`, and drags from it to
`coordinate` (`left_click_drag`); a UI-TARS scroll with no point turns the wheel at the pointer too:
`pointer`, where the episode's last pointer action left it, is that point (a scroll before any pointer
action turns the wheel at the screen's centre). UI-TARS's `scroll` is 5 wheel clicks and its `wait()` 5 s,
as its harness does them; its `call_user()` ends the task as not doable (OSWorld's FAIL).

One action a turn: of several calls in one answer, only the first (of the most explicit form) runs; each
family's prompt asks for one action, and running the rest unseen would act on a screen the model has not
looked at.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cua_agent.episode import ui_tars
from cua_agent.episode.actions import (
    ACTION_CLASSES,
    DIRECTIONS,
    Action,
    Done,
    Drag,
    Key,
    Scroll,
    TypeText,
    Wait,
)
from cua_agent.episode.coordinates import CoordinateError, CoordinateMapping, finite_number, round_half_up
from sandbox.server.protocol import DEFAULT_SCROLL, DEFAULT_WAIT_S, MAX_SCROLL, MAX_WAIT_S, ActionError

# Work bounds: model output is untrusted and may be megabytes of garbage.
MAX_INPUT_CHARS = 64 * 1024
MAX_CANDIDATES = 64  # decode attempts per parse, over all forms
MAX_CALL_CHARS = 4096  # argument text of one function-call candidate
MAX_LITERAL_CHARS = 8192  # Python-literal fallback (single quotes, True/None)
EXCERPT_CHARS = 200


@dataclass(frozen=True)
class ParsedAction:
    action: Action
    format: str  # where it was found: "tool_call", "fenced", "json" or "function_call"
    raw: str  # excerpt of the text it came from


@dataclass(frozen=True)
class ParseFailure:
    reason: str
    raw: str  # excerpt of the input (or of the failing candidate)


# Action names and aliases -> (canonical name, fields the name implies).
_NAME_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {}
for _canon, _aliases in {
    "click": ("click", "left_click", "leftclick", "left_single", "single_click", "tap"),
    # Qwen's triple_click is "simulated as double-click" in its own description: the sandbox has no click count
    "double_click": (
        "double_click",
        "doubleclick",
        "dblclick",
        "left_double",
        "double_left_click",
        "triple_click",
        "tripleclick",
    ),
    "right_click": ("right_click", "rightclick", "context_click", "right_single"),
    "middle_click": ("middle_click", "middleclick", "middle_single"),
    "move": ("move", "mouse_move", "mousemove", "move_mouse", "move_to", "moveto", "hover"),
    "drag": ("drag", "left_click_drag", "drag_to", "dragto", "drag_and_drop"),
    "scroll": ("scroll", "mouse_scroll", "wheel"),
    "type": ("type", "input", "write", "type_text", "typing", "typewrite", "input_text", "enter_text"),
    "key": ("key", "keys", "hotkey", "key_press", "keypress", "press", "press_key", "key_combination"),
    "wait": ("wait", "sleep", "pause"),
    "done": ("done", "finish", "finished", "terminate", "stop", "complete", "answer", "task_complete"),
}.items():
    for _a in _aliases:
        _NAME_ALIASES[_a] = (_canon, {})
for _d in DIRECTIONS:
    _NAME_ALIASES[f"scroll_{_d}"] = ("scroll", {"direction": _d})
# Qwen3-VL's sideways scroll: its signed `pixels` mean right (> 0) and left (< 0).
_NAME_ALIASES["hscroll"] = ("scroll", {"_horizontal": True})
# UI-TARS's call_user(): it needs the user to go on, which an episode has not: the task is given up.
_NAME_ALIASES["call_user"] = ("done", {"success": False})
# Known actions the sandbox cannot perform: refused with the reason, not as unknown.
_UNSUPPORTED = {
    name: "the sandbox presses keys only as a whole (key down and up in one action); use hotkey or key"
    for name in ("keydown", "keyup", "key_down", "key_up")
}

# Function-call text: only known names, at a word start, so prose words are not candidates and the
# match cannot backtrack over long words.
_CALL_NAMES = sorted(
    {n for a in (*_NAME_ALIASES, *_UNSUPPORTED) for n in (a, a.replace("_", "-"))}, key=len, reverse=True
)
_CALL_RE = re.compile(
    r"(?<![A-Za-z0-9_\-])(" + "|".join(map(re.escape, _CALL_NAMES)) + r")[ \t]{0,4}\(", re.I
)
_TOOL_OPEN = re.compile(r"<tool_call>", re.I)
_TOOL_CLOSE = re.compile(r"</tool_call>", re.I)
_JSON_TOKENS = re.compile(r'[{}"\\]')
_CALL_TOKENS = re.compile(r"[()\[\]{}\"'\\]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_NUMERIC_STR = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_NONFINITE = re.compile(r"\b(?:nan|inf|infinity)\b", re.I)
_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"</think>", re.I)
_UI_TARS_ACTION = re.compile(r"(?<![A-Za-z_])Action:")
_UI_TARS_THOUGHT = re.compile(r"(?<![A-Za-z_])Thought:")
_UI_TARS_TYPE = re.compile(r"\s*type\(\s*content\s*=\s*'")
_UI_TARS_TYPE_END = re.compile(r"'\s*\)(?=[ \t]*(?:\n|$))")
_UNESCAPED_QUOTE = re.compile(r"(?<!\\)'")


def _canonical_name(name: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(name, str) or len(name) > 40:
        return None
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = key.rsplit(".", 1)[-1]  # pyautogui.click, computer.click
    return _NAME_ALIASES.get(key)


def _excerpt(s: str) -> str:
    return s if len(s) <= EXCERPT_CHARS else s[: EXCERPT_CHARS - 3] + "..."


class _Budget:
    """Caps decode attempts per parse, so adversarial input cannot multiply the work."""

    def __init__(self, n: int) -> None:
        self.left = n

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


# ---- candidate extraction. A candidate is ("obj", python object) or ("call", (name, args, kwargs)).


def _brace_spans(s: str, limit: int) -> list[tuple[int, int, int]]:
    """Top-level {...} spans of s, JSON-string aware: (start, end, unclosed depth at end)."""
    spans: list[tuple[int, int, int]] = []
    depth, start, in_str, skip_to = 0, -1, False, -1
    for m in _JSON_TOKENS.finditer(s):
        i = m.start()
        if i < skip_to:
            continue
        c = s[i]
        if in_str:
            if c == "\\":
                skip_to = i + 2
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = depth > 0  # quotes in prose between objects are not strings
        elif c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1, 0))
                if len(spans) >= limit:
                    return spans
    if depth > 0:
        spans.append((start, len(s), depth))
    return spans


def _loads(text: str) -> Any:
    """JSON, else a Python literal (single quotes, True/None, trailing commas). Raises ValueError."""
    try:
        return json.loads(text, strict=False)
    except (ValueError, RecursionError):
        pass
    if len(text) <= MAX_LITERAL_CHARS:
        try:
            return ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    raise ValueError("not JSON")


def _join_surrogate_pairs(text: str) -> str:
    """The character a UTF-16 escape pair names (\\ud800\\udc00 -> U+10000): a Python-literal decode keeps
    the two halves apart; lone halves stay and are refused by check_text."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _json_candidates(s: str, budget: _Budget, depth: int = 0) -> Iterator[tuple[str, Any, str]]:
    for start, end, unclosed in _brace_spans(s, limit=MAX_CANDIDATES):
        if not budget.take():
            return
        span = s[start:end]
        attempts = [span] if not unclosed else [span + "}" * min(unclosed, 8), span]
        obj: Any = None
        for a in attempts:
            try:
                obj = _loads(a)
                break
            except ValueError:
                continue
        if isinstance(obj, dict | list):
            yield "obj", obj, span
        elif depth < 2 and end - start > 2 and budget.left > 0:
            # Braces in prose around a real object ("{ here: {...} }"): look inside.
            yield from _json_candidates(span[1:], budget, depth + 1)


def _literal(node: ast.AST, keyword: bool = False) -> Any:
    # scroll(direction=down): a bare word as a keyword value is meant as a string. Not positionally, so
    # prose like "type (text)" is not read as an action.
    if keyword and isinstance(node, ast.Name):
        return node.id
    return ast.literal_eval(node)


def _call_args(text: str, open_end: int) -> str | None:
    """Argument text between the '(' ending at open_end and its matching ')' (quote and bracket aware)."""
    stop = min(len(text), open_end + MAX_CALL_CHARS)
    depth, quote, skip_to = 1, "", -1
    for m in _CALL_TOKENS.finditer(text, open_end, stop):
        i = m.start()
        if i < skip_to:
            continue
        c = text[i]
        if quote:
            if c == "\\":
                skip_to = i + 2
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[open_end:i]
    if stop == len(text):  # unterminated at the end of the output (cut by max tokens)
        return text[open_end:stop]
    return None


def _call_candidates(s: str, budget: _Budget) -> Iterator[tuple[str, Any, str]]:
    for m in _CALL_RE.finditer(s):
        if not budget.take():
            return
        args = _call_args(s, m.end())
        if args is None:
            continue
        raw = s[m.start() : m.end() + len(args) + 1]
        try:
            node = ast.parse(f"f({args})", mode="eval").body
            if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            pos = [_literal(a) for a in node.args]
            kw = {k.arg: _literal(k.value, keyword=True) for k in node.keywords if k.arg is not None}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        yield "call", (m.group(1), pos, kw), raw


def _tool_call_bodies(s: str) -> Iterator[str]:
    for n, m in enumerate(_TOOL_OPEN.finditer(s)):
        if n >= MAX_CANDIDATES:
            return
        close = _TOOL_CLOSE.search(s, m.end())
        nxt = _TOOL_OPEN.search(s, m.end())
        ends = [x.start() for x in (close, nxt) if x is not None]
        yield s[m.end() : min(ends) if ends else len(s)]


def _fenced_bodies(s: str) -> Iterator[str]:
    pos, n = 0, 0
    while n < MAX_CANDIDATES:
        start = s.find("```", pos)
        if start < 0:
            return
        end = s.find("```", start + 3)
        body = s[start + 3 : end if end >= 0 else len(s)]
        first, nl, rest = body.partition("\n")
        if nl and len(first.strip()) <= 20 and " " not in first.strip():  # ```json, ```python, ```tool_call
            body = rest
        yield body
        if end < 0:
            return
        pos, n = end + 3, n + 1


def _candidates(text: str, budget: _Budget, prose_calls: bool = True) -> Iterator[tuple[str, str, Any, str]]:
    """(format, kind, value, raw) in order of preference: the most explicit form first. prose_calls: also
    function-call text outside a <tool_call>."""
    for body in _tool_call_bodies(text):
        for kind, val, raw in _json_candidates(body, budget):
            yield "tool_call", kind, val, raw
        for kind, val, raw in _call_candidates(body, budget):
            yield "tool_call", kind, val, raw
    for body in _fenced_bodies(text):
        for kind, val, raw in _json_candidates(body, budget):
            yield "fenced", kind, val, raw
        if prose_calls:
            for kind, val, raw in _call_candidates(body, budget):
                yield "fenced", kind, val, raw
    for kind, val, raw in _json_candidates(text, budget):
        yield "json", kind, val, raw
    if prose_calls:
        for kind, val, raw in _call_candidates(text, budget):
            yield "function_call", kind, val, raw


def _last_end(pattern: re.Pattern[str], text: str) -> int | None:
    end = None
    for m in pattern.finditer(text):
        end = m.end()
    return end


def _answer(text: str, family: str | None) -> tuple[str, str | None]:
    """(the part of the output that holds the answer, None) or ("", why there is none)."""
    end = _last_end(_THINK_CLOSE, text)
    if end is not None:
        text = text[end:]
        if not text.strip():
            return "", "no action after the reasoning (nothing follows </think>)"
    elif _THINK_OPEN.search(text):
        return "", "the reasoning was cut off before </think>: no action"
    if family == "ui-tars":
        end = _last_end(_UI_TARS_ACTION, text)
        if end is not None:
            text = _repair_ui_tars_type(text[end:])
        elif _UI_TARS_THOUGHT.search(text):
            return "", "a Thought with no 'Action:' line after it (cut off?): no action"
    return text, None


def _repair_ui_tars_type(action: str) -> str:
    """UI-TARS's `type(content='it's fine')`: single quotes inside the content are escaped, as its own
    parser does, up to the `')` that ends the line."""
    m = _UI_TARS_TYPE.match(action)
    if m is None:
        return action
    end = _UI_TARS_TYPE_END.search(action, m.end())
    if end is None:
        return action
    content = action[m.end() : end.start()]
    if not _UNESCAPED_QUOTE.search(content):
        return action
    escaped = _UNESCAPED_QUOTE.sub(lambda _: "\\'", content)
    return "type(content='" + escaped + "')" + action[end.end() :]


# ---- interpretation of a candidate


def _lower_keys(d: dict[Any, Any]) -> dict[str, Any]:
    return {k.strip().lower(): v for k, v in d.items() if isinstance(k, str)}


def _resolve_obj(obj: Any, depth: int = 0) -> tuple[str, dict[str, Any]]:
    """A decoded JSON object in any accepted tool-call shape -> (action name, fields)."""
    if depth > 4:
        raise ActionError("tool call nested too deeply")
    if isinstance(obj, list):  # e.g. an OpenAI tool_calls array: first valid entry
        err = ActionError("empty list")
        for item in obj[:8]:
            try:
                return _resolve_obj(item, depth + 1)
            except ActionError as exc:
                err = exc
        raise err
    if not isinstance(obj, dict):
        raise ActionError("expected a JSON object")
    kw = _lower_keys(obj)
    if "tool_calls" in kw:
        return _resolve_obj(kw["tool_calls"], depth + 1)
    if isinstance(kw.get("function"), dict):
        return _resolve_obj(kw["function"], depth + 1)
    for key in ("arguments", "args", "parameters", "params", "input"):
        if key not in kw:
            continue
        args = kw[key]
        if isinstance(args, str):  # OpenAI: arguments is a JSON string
            try:
                args = _loads(args[:MAX_INPUT_CHARS])
            except ValueError:
                raise ActionError(f"'{key}' is not valid JSON") from None
        if not isinstance(args, dict):
            raise ActionError(f"'{key}' must be an object")
        inner = _lower_keys(args)
        if "action" in inner or "action_type" in inner:
            return _resolve_obj(args, depth + 1)
        for key2 in ("action", "name"):  # {"name": "click", "arguments": {...}}
            if _canonical_name(kw.get(key2)) is not None:
                return kw[key2], inner
        raise ActionError("tool call has no 'action'")
    action = kw.get("action", kw.get("action_type"))
    if isinstance(action, dict):  # {"action": {"type": "click", ...}}
        return _resolve_obj(action, depth + 1)
    if isinstance(action, str):
        return action, kw
    for key in ("name", "type"):
        if _canonical_name(kw.get(key)) is not None:
            return kw[key], kw
    raise ActionError("no 'action' field")


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) or (
        isinstance(v, str) and len(v) <= 32 and _NUMERIC_STR.fullmatch(v.strip()) is not None
    )


def _num(v: Any, what: str) -> float:
    if isinstance(v, str) and _is_num(v):
        v = float(v.strip())
    return finite_number(v, what)


def _to_point(v: Any, what: str) -> tuple[float, float]:
    """[x, y], (x, y), a box [x1, y1, x2, y2] (its centre), {"x":, "y":} or a string holding 2 or 4 numbers."""
    if isinstance(v, dict):
        d = _lower_keys(v)
        if "x" in d and "y" in d:
            return _num(d["x"], f"{what}.x"), _num(d["y"], f"{what}.y")
        raise ActionError(f"'{what}' object needs x and y")
    if isinstance(v, str):
        if len(v) > 200:
            raise ActionError(f"'{what}' string is too long")
        nums: list[Any] = _NUMBER.findall(v)
        if _NONFINITE.search(v):
            raise CoordinateError(f"'{what}' is not finite")
    elif isinstance(v, list | tuple):
        nums = list(v)
    else:
        raise ActionError(f"'{what}' must be [x, y], got {type(v).__name__}")
    if len(nums) == 2:
        return _num(nums[0], f"{what}[0]"), _num(nums[1], f"{what}[1]")
    if len(nums) == 4:
        x1, y1, x2, y2 = (_num(n, what) for n in nums)
        return (x1 + x2) / 2, (y1 + y2) / 2
    raise ActionError(f"'{what}' must hold 2 numbers (x, y), got {len(nums)}")


def _get(kw: dict[str, Any], *names: str) -> tuple[str, Any] | None:
    for n in names:
        if kw.get(n) is not None:
            return n, kw[n]
    return None


_POINT_KEYS = ("coordinate", "coordinates", "coords", "coord", "position", "point", "pos", "location", "xy")
_START_KEYS = ("start_coordinate", "start_coordinates", "start", "start_point", "start_box", "from", "source")
_END_KEYS = (
    "end_coordinate",
    "end_coordinates",
    "end",
    "end_point",
    "end_box",
    "to",
    "target",
    "destination",
)


def _point(
    kw: dict[str, Any], pos: list[Any], keys: tuple[str, ...], xkey: str, ykey: str
) -> tuple[float, float] | None:
    """A point from named fields, else from the front of the positional arguments (consumed)."""
    hit = _get(kw, *keys)
    if hit is not None:
        return _to_point(hit[1], hit[0])
    if xkey in kw or ykey in kw:
        if kw.get(xkey) is None or kw.get(ykey) is None:
            raise ActionError(f"need both '{xkey}' and '{ykey}'")
        return _num(kw[xkey], xkey), _num(kw[ykey], ykey)
    if len(pos) >= 2 and _is_num(pos[0]) and _is_num(pos[1]):
        x, y = pos.pop(0), pos.pop(0)
        return _num(x, xkey), _num(y, ykey)
    if pos and isinstance(pos[0], list | tuple | dict | str):
        try:
            p = _to_point(pos[0], xkey + ykey)
        except CoordinateError:
            raise  # a coordinate-looking argument that is NaN/inf is an error, not "no coordinate"
        except ActionError:
            return None
        pos.pop(0)
        return p
    return None


def _first_str(pos: list[Any]) -> str | None:
    for i, v in enumerate(pos):
        if isinstance(v, str):
            return pos.pop(i)
    return None


def _success(v: Any) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("success", "succeeded", "successful", "true", "yes", "done", "completed", "ok"):
            return True
        if low in ("failure", "fail", "failed", "false", "no", "infeasible", "impossible"):
            return False
    raise ActionError(f"'success' must be a bool or 'success'/'failure', got {str(v)[:40]!r}")


def _build(
    name: Any,
    kw: dict[str, Any],
    pos: list[Any],
    mapping: CoordinateMapping,
    pointer: tuple[int, int] | None,
    family: str | None,
) -> Action:
    canon = _canonical_name(name)
    if canon is None:
        why = _UNSUPPORTED.get(str(name).strip().lower().replace("-", "_")) if isinstance(name, str) else None
        if why is not None:
            raise ActionError(f"{str(name).strip()!r} is not supported: {why}")
        raise ActionError(f"unknown action {str(name)[:40]!r}")
    kind, implied = canon
    kw = {**_lower_keys(kw), **implied}
    pos = list(pos)

    def screen(p: tuple[float, float] | None, what: str) -> tuple[int, int]:
        if p is None:
            raise ActionError(f"'{kind}' needs {what} [x, y]")
        return mapping.to_screen(*p)

    def at_pointer(what: str) -> tuple[int, int]:
        if pointer is None:
            raise ActionError(
                f"{str(name)[:40]!r} {what} the pointer, whose position is not known (no pointer action has "
                "run in this episode): give the coordinate"
            )
        return pointer

    if kind in ("click", "double_click", "right_click", "middle_click", "move"):
        p = _point(kw, pos, _POINT_KEYS + _START_KEYS, "x", "y")
        # Qwen's computer_use: a click with no coordinate clicks where the pointer is. A move must say where.
        x, y = (
            at_pointer("with no coordinate acts at")
            if p is None and kind != "move"
            else screen(p, "a coordinate")
        )
        return ACTION_CLASSES[kind](x, y)  # type: ignore[call-arg,return-value]
    if kind == "drag":
        named_start = (
            _get(kw, *_START_KEYS) is not None or kw.get("x1") is not None or kw.get("y1") is not None
        )
        start_keys = _START_KEYS if named_start else _POINT_KEYS
        # Anthropic's left_click_drag: start_coordinate + coordinate (the end).
        end_keys = _END_KEYS + (_POINT_KEYS if start_keys is _START_KEYS else ())
        start = _point(kw, pos, start_keys, "x", "y")
        if start is None:
            start = _point(kw, pos, (), "x1", "y1")
        end = _point(kw, pos, end_keys, "x2", "y2")
        if end is None:
            end = _point(kw, pos, (), "to_x", "to_y") or _point(kw, pos, (), "end_x", "end_y")
        if end is None and start is not None and not named_start:
            # One point, not named as the start: Qwen's left_click_drag (and pyautogui's dragTo) drag from
            # the pointer to it.
            x2, y2 = screen(start, "an end coordinate")
            x, y = at_pointer("with one coordinate drags from")
            return Drag(x, y, x2, y2)
        x, y = screen(start, "a start coordinate")
        x2, y2 = screen(end, "an end coordinate")
        return Drag(x, y, x2, y2)
    if kind == "scroll":
        p = _point(kw, pos, _POINT_KEYS + _START_KEYS, "x", "y")  # UI-TARS: start_box
        # No position: the wheel turns where the pointer is; before any pointer action its place is not
        # known, and the middle of the screen is where it matters least to guess.
        if p is not None:
            x, y = screen(p, "")
        else:
            x, y = pointer or (mapping.screen_w // 2, mapping.screen_h // 2)
        hit = _get(kw, "direction", "dir", "scroll_direction")
        direction = hit[1] if hit else _first_str(pos)
        amount_hit = _get(kw, "amount", "clicks", "scroll_amount", "steps", "times", "distance")
        amount: Any = amount_hit[1] if amount_hit else None
        # Signed forms: Qwen's pixels (positive = up; in hscroll, right), wheel dy/dx (positive = down).
        pixels = ("pixels", "left", "right") if kw.get("_horizontal") else ("pixels", "down", "up")
        if direction is None:
            for key, neg, posdir in (pixels, ("dy", "up", "down"), ("dx", "left", "right")):
                if _is_num(kw.get(key)):
                    v = _num(kw[key], key)
                    if v != 0:
                        direction, amount = (posdir if v > 0 else neg), abs(v)
                        break
        if amount is None and pos and _is_num(pos[0]):
            amount = pos.pop(0)
        if not isinstance(direction, str) or direction.strip().lower() not in DIRECTIONS:
            raise ActionError(f"'scroll' needs a direction (up/down/left/right), got {str(direction)[:20]!r}")
        default = ui_tars.SCROLL_CLICKS if family == "ui-tars" else DEFAULT_SCROLL
        n = default if amount is None else abs(_num(amount, "amount"))
        n = min(max(round_half_up(n), 1), MAX_SCROLL)
        return Scroll(x, y, direction.strip().lower(), n)
    if kind == "type":
        hit = _get(kw, "text", "content", "value", "string", "input")
        text: Any = hit[1] if hit else (pos[0] if pos else None)
        if isinstance(text, int | float) and not isinstance(text, bool):
            text = str(text)
        if text is None:
            raise ActionError("'type' needs 'text'")
        return TypeText(_join_surrogate_pairs(text) if isinstance(text, str) else text)
    if kind == "key":
        hit = _get(kw, "keys", "key", "combo", "combination", "hotkey", "value", "text")
        if hit is not None:
            keys: Any = hit[1]
        elif len(pos) > 1 and all(isinstance(p, str) for p in pos):  # hotkey('ctrl', 's')
            keys = pos
        else:
            keys = pos[0] if pos else None
        if keys is None:
            raise ActionError("'key' needs 'keys'")
        try:
            return Key(keys)
        except ActionError:
            # UI-TARS-1.5 writes combinations with spaces: hotkey(key='ctrl c'). Tried second, so that a key
            # name with a space ('page down') stays one key.
            if not isinstance(keys, str) or "+" in keys or len(keys.split()) < 2:
                raise
            return Key(keys.split())
    if kind == "wait":
        hit = _get(kw, "seconds", "time", "duration", "secs", "second")
        default_s = ui_tars.WAIT_S if family == "ui-tars" else DEFAULT_WAIT_S
        secs: Any = hit[1] if hit else (pos[0] if pos else default_s)
        s = _num(secs, "seconds")
        if s < 0:
            raise ActionError(f"'seconds' must not be negative, got {s}")
        return Wait(min(s, MAX_WAIT_S))
    # done
    hit = _get(kw, "success", "status", "ok", "succeeded")
    success_raw: Any = hit[1] if hit else next((p for p in pos if isinstance(p, bool)), None)
    ans_hit = _get(kw, "answer", "text", "message", "content", "response", "result", "output")
    answer: Any = ans_hit[1] if ans_hit else _first_str(pos)
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        answer = str(answer)
    return Done(_success(success_raw), answer)


def _interpret(
    kind: str, val: Any, mapping: CoordinateMapping, pointer: tuple[int, int] | None, family: str | None
) -> Action:
    if kind == "call":
        name, pos, kw = val
        return _build(name, kw, pos, mapping, pointer, family)
    name, fields_ = _resolve_obj(val)
    return _build(name, fields_, [], mapping, pointer, family)


def parse_action(
    text: Any,
    mapping: CoordinateMapping,
    *,
    family: str | None = None,
    pointer: tuple[int, int] | None = None,
) -> ParsedAction | ParseFailure:
    """Model output -> the first valid action of its most explicit form, in screen pixels.

    Forms, most explicit first: <tool_call>{...}</tool_call> (the closing tag may be missing), ```json
    fenced blocks, JSON objects in prose (tool-call, OpenAI function and flat shapes), function-call text
    like click(100, 200). Never raises; the input is capped at MAX_INPUT_CHARS.
    family: the model family's name (families.py), to read its output as its harness does (module doc);
    None reads every family's forms from anywhere in the answer. pointer: where the pointer is, in screen
    pixels (None: not known), for a click with no coordinate and a drag from the pointer.
    """
    try:
        return _parse(text, mapping, family, pointer)
    except Exception as exc:  # the contract is "never raises"; a bug here must not kill an episode
        raw = _excerpt(text) if isinstance(text, str) else ""
        return ParseFailure(f"internal parser error: {type(exc).__name__}: {str(exc)[:100]}", raw)


def _parse(
    text: Any, mapping: CoordinateMapping, family: str | None, pointer: tuple[int, int] | None
) -> ParsedAction | ParseFailure:
    if isinstance(text, bytes | bytearray):
        text = bytes(text[: MAX_INPUT_CHARS * 4]).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return ParseFailure(f"model output must be text, got {type(text).__name__}", "")
    text = text[:MAX_INPUT_CHARS]
    if not text.strip():
        return ParseFailure("empty output", "")
    answer, why = _answer(text, family)
    if why is not None:
        return ParseFailure(why, _excerpt(text))
    budget = _Budget(MAX_CANDIDATES)
    first_error: ParseFailure | None = None
    for fmt, kind, val, raw in _candidates(answer, budget, prose_calls=family != "qwen3-vl"):
        try:
            return ParsedAction(_interpret(kind, val, mapping, pointer, family), fmt, _excerpt(raw))
        except (ValueError, TypeError, ArithmeticError, RecursionError) as exc:
            if first_error is None:
                first_error = ParseFailure(f"{fmt}: {exc}"[:300], _excerpt(raw))
    if first_error is not None:
        return first_error
    expected = (
        "Action: and a call of the action space" if family == "ui-tars" else "<tool_call>{...}</tool_call>"
    )
    return ParseFailure(f"no action found (expected {expected})", _excerpt(answer))
