"""UI-TARS-1.5's computer-use format (model family ui-tars): `Thought: ...` then `Action: click(...)` in its
own function-call syntax, with absolute coordinates on the resized screenshot it saw (it is a Qwen2.5-VL).

Its action space is offered as it was trained (`start_box='<|box_start|>(x,y)<|box_end|>'`, `hotkey(key='ctrl
c')`, `type(content=...)`, `finished(content=...)`); parser.py reads these forms back. UI-TARS has no
pointer move; a scroll is 3 wheel clicks and `wait()` waits the protocol's default.
"""

from __future__ import annotations

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
)
from cua_agent.episode.coordinates import CoordinateMapping

_BOX = "<|box_start|>({x},{y})<|box_end|>"


def _box(mapping: CoordinateMapping, x: int, y: int) -> str:
    mx, my = mapping.to_model(x, y)
    return "'" + _BOX.format(x=mx, y=my) + "'"


def _quoted(text: str) -> str:
    """A Python string literal in single quotes, escaped as UI-TARS is taught (\\', \\n)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def system_prompt(mapping: CoordinateMapping) -> str:
    w, h = mapping.model_size
    return f"""You are a GUI agent. You are given a task and your action history, with screenshots. You need to \
perform the next action to complete the task.

## Output Format
```
Thought: ...
Action: ...
```

## Action Space
click(start_box='<|box_start|>(x1,y1)<|box_end|>')
left_double(start_box='<|box_start|>(x1,y1)<|box_end|>')
right_single(start_box='<|box_start|>(x1,y1)<|box_end|>')
drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')
hotkey(key='ctrl c') # Split keys with a space and use lowercase. Do not use more than 3 keys in one hotkey.
type(content='xxx') # Escape \\', \\" and \\n in content. To submit your input, end content with \\n.
scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')
wait() # Wait, then take a screenshot to check for changes.
finished(content='xxx') # The task is done; content answers its question, if it asks one.

## Note
- Coordinates are pixels of the screenshot as you see it ({w}x{h}).
- Write a small plan and summarize your next action (with its target element) in one sentence in the \
`Thought` part."""


def action_text(action: Action, mapping: CoordinateMapping) -> str:
    """The action in UI-TARS's syntax, e.g. click(start_box='<|box_start|>(320,200)<|box_end|>')."""
    if isinstance(action, Drag):
        start, end = _box(mapping, action.x, action.y), _box(mapping, action.x2, action.y2)
        return f"drag(start_box={start}, end_box={end})"
    if isinstance(action, Scroll):
        return f"scroll(start_box={_box(mapping, action.x, action.y)}, direction='{action.direction}')"
    if isinstance(action, DoubleClick | RightClick | MiddleClick | Move):
        # UI-TARS's action space has no middle click and no move: those two are written in its style.
        name = {
            DoubleClick: "left_double",
            RightClick: "right_single",
            MiddleClick: "middle_click",
            Move: "move",
        }[type(action)]
        return f"{name}(start_box={_box(mapping, action.x, action.y)})"
    if isinstance(action, Click):
        return f"click(start_box={_box(mapping, action.x, action.y)})"
    if isinstance(action, TypeText):
        return f"type(content={_quoted(action.text)})"
    if isinstance(action, Key):
        return f"hotkey(key={_quoted(' '.join(action.keys.lower().split('+')))})"
    if isinstance(action, Done):
        return f"finished(content={_quoted(action.answer or '')})"
    return "wait()"


def format_action(action: Action, mapping: CoordinateMapping) -> str:
    return f"Action: {action_text(action, mapping)}"
