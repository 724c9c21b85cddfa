"""System prompt and chat messages for one agent turn, within an enforced token budget.

Layout of the messages (OpenAI chat format), the family's `layout` (families.py):
"project" (qwen2.5-vl):
    system     the action space and the output format of the model family
    user       task instruction; a text log of earlier turns whose screenshots are not sent; the first
               screenshot of the window
    assistant  the model's own output of that turn (echoed verbatim, less vision markup)
    user       what that action did; the next screenshot
    ...        (one assistant/user pair per turn inside the window)
    user       ends with the current screenshot; the model answers next.
"qwen" (qwen3-vl): the same, each user turn with its screenshot first, as Qwen's cookbook and OSWorld's
    Qwen3-VL harness send it; the first user text is the instruction (then the log), with no labels.
"ui-tars": system "You are a helpful assistant."; user: UI-TARS's prompt ending with the instruction;
    every past answer as an assistant turn, each answer in the window after an image-only user turn with
    the screenshot it answered; the current screenshot last (OSWorld's UI-TARS-1.5 harness). Its older
    answers stand where the other layouts have their text log.
The window holds the last K screenshots. A budget drops, in order: the oldest log lines (ui-tars: the
oldest past answers), then the oldest screenshots in the window (their turns move to the log); never the
instruction or the current screenshot.

Render a deep copy with an HF processor: transformers 5.3's processor.apply_chat_template rewrites
image_url parts in place into {"type": "image", "url": ...}, which is no longer OpenAI format.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cua_agent.episode import ui_tars
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import DEFAULT_FAMILY, FAMILIES, ModelFamily
from cua_agent.episode.turn import Turn

# The model's own input markup, stripped from its text before it is echoed into later prompts: the chat
# template would turn it back into vision placeholders and shift the image slots.
_VISION_MARKUP = re.compile(r"<\|(?:vision_start|vision_end|image_pad|video_pad)\|>")

NOTE_CHARS = 200  # a result note longer than this is cut: notes are for the model, not for debugging

Messages = list[dict[str, Any]]
TokenCounter = Callable[[Messages], int]


@dataclass(frozen=True)
class Prompt:
    messages: Messages
    images: list[bytes]  # exactly the screenshots embedded in `messages`, in order of appearance
    image_indices: list[int]  # their positions in the `screenshots` argument
    n_tokens: int | None  # count_tokens(messages) + image_tokens * len(images); None without a counter
    omitted_turns: int  # turns left out of the text log by the budget


class PromptBudgetError(ValueError):
    """Even instruction + current screenshot does not fit the budget."""

    def __init__(self, needed: int, budget: int, image_tokens: int) -> None:
        super().__init__(
            f"prompt needs at least {needed} tokens (instruction, system prompt and the current screenshot "
            f"at {image_tokens} image tokens), budget is {budget}"
        )
        self.needed = needed
        self.budget = budget


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"},
    }


def _note(text: str) -> str:
    one_line = " ".join(str(text).split())
    return one_line if len(one_line) <= NOTE_CHARS else one_line[: NOTE_CHARS - 3] + "..."


def _log_line(i: int, turn: Turn, mapping: CoordinateMapping, family: ModelFamily) -> str:
    # in the model's own form and coordinates, as it would have written it
    what = "(no action parsed)" if turn.action is None else family.log_entry(turn.action, mapping)
    return f"Turn {i + 1}: {what} -> {_note(turn.note)}"


def _render(
    instruction: str,
    history: Sequence[Turn],
    parts: dict[int, dict[str, Any]],  # by screenshot index: those a window can hold
    window: int,
    log_kept: int,
    mapping: CoordinateMapping,
    family: ModelFamily,
    system: str,
) -> tuple[Messages, list[int]]:
    """Messages with the last `window` screenshots and the last `log_kept` turns before the window as text
    (ui-tars: as assistant turns)."""
    n = len(history)
    first = n + 1 - window  # index of the first screenshot sent; turns before it are text only
    omitted = first - log_kept
    if family.layout == "ui-tars":
        return _render_ui_tars(instruction, history, parts, first, omitted, system), list(range(first, n + 1))
    image_first = family.layout == "qwen"
    text = instruction if image_first else f"Task: {instruction}"
    if first > 0:
        lines = ["\n\nEarlier turns (screenshots not shown, coordinates as you wrote them):"]
        if omitted:
            lines.append(f"[{omitted} earlier turn{'s' if omitted > 1 else ''} omitted]")
        lines += [_log_line(i, history[i], mapping, family) for i in range(omitted, first)]
        text += "\n".join(lines)

    def user(text: str, label: str, image: dict[str, Any]) -> dict[str, Any]:
        if image_first:  # no label: the screenshot comes first
            return {"role": "user", "content": [image, {"type": "text", "text": text}]}
        return {"role": "user", "content": [{"type": "text", "text": f"{text}\n\n{label}"}, image]}

    def label(i: int) -> str:  # of screenshot i
        return "Current screenshot:" if i == n else f"Screenshot before turn {i + 1}:"

    messages: Messages = [{"role": "system", "content": system}, user(text, label(first), parts[first])]
    for i in range(first, n):
        messages.append({"role": "assistant", "content": _VISION_MARKUP.sub("", history[i].output)})
        messages.append(user(f"Turn {i + 1} result: {_note(history[i].note)}", label(i + 1), parts[i + 1]))
    return messages, list(range(first, n + 1))


def _render_ui_tars(
    instruction: str,
    history: Sequence[Turn],
    parts: dict[int, dict[str, Any]],  # by screenshot index: those a window can hold
    first: int,
    omitted: int,
    system: str,
) -> Messages:
    def answer(i: int) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": ui_tars.with_box_tokens(_VISION_MARKUP.sub("", history[i].output)),
        }

    messages: Messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": [{"type": "text", "text": ui_tars.instruction_prompt(instruction)}]},
    ]
    messages += [answer(i) for i in range(omitted, first)]
    for i in range(first, len(history)):
        messages += [{"role": "user", "content": [parts[i]]}, answer(i)]
    messages.append({"role": "user", "content": [parts[len(history)]]})
    return messages


def build_messages(
    instruction: str,
    history: Sequence[Turn],
    screenshots: Sequence[bytes],
    k_last: int,
    mapping: CoordinateMapping,
    *,
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
    image_tokens: int = 0,
    family: ModelFamily = FAMILIES[DEFAULT_FAMILY],
    mime: str = "image/png",
) -> Prompt:
    """Chat messages for the next model call.

    screenshots[i] is the observation before turn i (so len(screenshots) == len(history) + 1 and the last
    one is the current screen). k_last: how many of the latest screenshots to send.
    Budget (with max_tokens): total = count_tokens(messages) + image_tokens * images must be <= max_tokens.
    image_tokens is what each image costs beyond what count_tokens sees (with a real tokenizer and chat
    template, the image's expanded token count minus its placeholder). Raises PromptBudgetError when even
    the system prompt, the instruction and the current screenshot do not fit.
    """
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("instruction must be a non-empty string")
    if len(screenshots) != len(history) + 1:
        raise ValueError(
            f"need one screenshot per past turn plus the current one: {len(history)} turns, "
            f"{len(screenshots)} screenshots"
        )
    if k_last < 1:
        raise ValueError(f"k_last must be >= 1, got {k_last}")
    if (max_tokens is None) != (count_tokens is None):
        raise ValueError("max_tokens and count_tokens go together")
    if image_tokens < 0:
        raise ValueError("image_tokens must be >= 0")
    system = family.system_prompt(mapping)
    n = len(history)
    max_window = min(k_last, n + 1)
    # Only the screenshots a window can hold are encoded (once, reused by every candidate layout): the
    # earlier ones are never sent, and encoding them all each turn costs a long episode dearly.
    parts = {i: image_part(screenshots[i], mime) for i in range(n + 1 - max_window, n + 1)}

    def render(window: int, log_kept: int) -> tuple[Messages, list[int]]:
        return _render(instruction, history, parts, window, log_kept, mapping, family, system)

    def prompt(msgs: Messages, idx: list[int], omitted: int) -> Prompt:
        cost = None if count_tokens is None else count_tokens(msgs) + image_tokens * len(idx)
        return Prompt(msgs, [screenshots[i] for i in idx], idx, cost, omitted)

    if count_tokens is None or max_tokens is None:
        return prompt(*render(max_window, n + 1 - max_window), 0)

    for window in range(max_window, 0, -1):
        n_log = n + 1 - window  # turns before the window
        best = prompt(*render(window, 0), n_log)
        if best.n_tokens is None or best.n_tokens > max_tokens:
            continue  # even without the log this window is too big: drop the oldest screenshot
        # The longest log (newest lines kept) that fits: binary search, every candidate measured.
        lo, hi = 1, n_log
        while lo <= hi:
            mid = (lo + hi) // 2
            cand = prompt(*render(window, mid), n_log - mid)
            if cand.n_tokens is not None and cand.n_tokens <= max_tokens:
                best, lo = cand, mid + 1
            else:
                hi = mid - 1
        return best
    minimum = prompt(*render(1, 0), n).n_tokens
    raise PromptBudgetError(minimum or 0, max_tokens, image_tokens)
