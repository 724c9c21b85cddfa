"""UI-TARS-1.5's computer-use format (model family ui-tars): `Thought: ...` then `Action: click(...)` in its
own function-call syntax, with absolute coordinates on the resized screenshot it saw (it is a Qwen2.5-VL).

Prompted as its harness prompts it (OSWorld's UI-TARS-1.5 agent): the system message "You are a helpful
assistant.", then its official COMPUTER_USE prompt (UI-TARS's codes/prompts.py, language English) as the
first user message, ending with "## User Instruction" and the task; each screenshot an image-only user turn,
and each past answer an assistant turn, its boxes in the box tokens the harness puts back (`with_box_tokens`:
a server that skips special tokens returns `start_box='(x,y)'`). Kept of our layout: the number of
screenshots (agent.history_screenshots, the harness sends 5) and the token budget, which drops the oldest
past answers first; the sandbox's note on a turn (a refused action, an answer with no action) is not shown,
as the harness shows none.

Its action space is offered word for word (`start_box='<|box_start|>(x,y)<|box_end|>'`, `hotkey(key='')`,
`type(content=...)`, `finished(content=...)`); parser.py reads these forms back, and `call_user()` of the
harness's other prompt. As the prompt and harness say: `wait()` sleeps 5 s and a scroll is 5 wheel clicks.
UI-TARS has no pointer move and no middle click: those are written in its style (`move`, `middle_click`).
"""

from __future__ import annotations

import re

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

SCROLL_CLICKS = 5  # wheel clicks of one scroll(...)
WAIT_S = 5.0  # "wait() #Sleep for 5s"
SYSTEM = "You are a helpful assistant."
LANGUAGE = "English"
# UI-TARS-1.5's COMPUTER_USE prompt, verbatim (the trailing space after "end of content." included).
COMPUTER_USE = """You are a GUI agent. You are given a task and your action history, with screenshots. You need \
to perform the next action to complete the task.

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
hotkey(key='')
type(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the \
content in normal python string format. If you want to submit your input, use \\n at the end of content.\x20
scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')
wait() #Sleep for 5s and take a screenshot to check for any changes.
finished(content='xxx') # Use escape characters \\', \\", and \\n in content part to ensure we can parse the \
content in normal python string format.


## Note
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in \
`Thought` part.

## User Instruction
{instruction}
"""
_BOX = "<|box_start|>({x},{y})<|box_end|>"
_BARE_BOX = re.compile(r"\b(start_box|end_box)='\((\d+),\s*(\d+)\)'")


def _box(mapping: CoordinateMapping, x: int, y: int) -> str:
    mx, my = mapping.to_model(x, y)
    return "'" + _BOX.format(x=mx, y=my) + "'"


def _at(mapping: CoordinateMapping, x: int, y: int) -> str:
    mx, my = mapping.to_model(x, y)
    return f"({mx},{my})"


def _quoted(text: str) -> str:
    """A Python string literal in single quotes, escaped as UI-TARS is taught (\\', \\n)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def system_prompt(mapping: CoordinateMapping) -> str:
    return SYSTEM


def instruction_prompt(instruction: str) -> str:
    """The first user message: the COMPUTER_USE prompt with the task."""
    return COMPUTER_USE.format(language=LANGUAGE, instruction=instruction)


def with_box_tokens(answer: str) -> str:
    """A past answer as its harness echoes it: `start_box='(x,y)'` after the `Action:` in box tokens."""
    thought, sep, action = answer.partition("Action: ")
    if not sep:
        return answer
    return thought + sep + _BARE_BOX.sub(lambda m: f"{m[1]}='{_BOX.format(x=m[2], y=m[3])}'", action)


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
        if action.success is False and action.answer is None:
            return "call_user()"
        return f"finished(content={_quoted(action.answer or '')})"
    return "wait()"


def thought(action: Action, mapping: CoordinateMapping) -> str:
    """One sentence that says what the action does, as the Thought of a demonstration (the oracle knows
    the action, not the element's name)."""
    if isinstance(action, Drag):
        return f"I drag from {_at(mapping, action.x, action.y)} to {_at(mapping, action.x2, action.y2)}."
    if isinstance(action, Scroll):
        return f"I scroll {action.direction} at {_at(mapping, action.x, action.y)}."
    if isinstance(action, Move):
        return f"I move the pointer to {_at(mapping, action.x, action.y)}."
    if isinstance(action, Click | DoubleClick | RightClick | MiddleClick):
        verb = {
            Click: "click",
            DoubleClick: "double-click",
            RightClick: "right-click",
            MiddleClick: "middle-click",
        }
        return f"I {verb[type(action)]} the element at {_at(mapping, action.x, action.y)}."
    if isinstance(action, TypeText):
        return "I type the text into the focused field" + (
            " and submit it." if action.text.endswith("\n") else "."
        )
    if isinstance(action, Key):
        return f"I press {action.keys}."
    if isinstance(action, Wait):
        return "I wait for the screen to change."
    if action.success is False and action.answer is None:
        return "The task cannot be done without the user, so I hand it back."
    return (
        "The task is complete." if action.answer is None else "The task is complete, and I give its answer."
    )


def format_action(action: Action, mapping: CoordinateMapping) -> str:
    """An action as a demonstration writes it: a one-sentence Thought, then the Action line."""
    return f"Thought: {thought(action, mapping)}\nAction: {action_text(action, mapping)}"
