"""Prompt construction: layout, the last-K screenshot window, the enforced token budget, real chat template."""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import re
from typing import Any

import pytest
from PIL import Image

from cua_agent.episode.actions import Click, Drag, Key, TypeText
from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.parser import ParsedAction, parse_action
from cua_agent.episode.prompting import Prompt, PromptBudgetError, build_messages
from cua_agent.episode.tool_calls import computer_system_prompt as system_prompt
from cua_agent.episode.tool_calls import format_tool_call
from cua_agent.episode.turn import Turn
from cua_agent.inference.model_call import ModelCall

TINY_MODEL = os.path.expanduser("~/.cache/cua-areal/models/tiny-qwen2.5-vl")
SCREEN = CoordinateMapping.identity(1280, 800)
RELATIVE = CoordinateMapping(1280, 800, 644, 392, "relative_1000")
INSTRUCTION = "Open the file report.txt and type the total."


def png(i: int, size: tuple[int, int] = (32, 20)) -> bytes:
    """A distinct small PNG per index, so identity of embedded images is checkable."""
    buf = io.BytesIO()
    Image.new("RGB", size, (i * 37 % 256, i * 91 % 256, i * 53 % 256)).save(buf, format="PNG")
    return buf.getvalue()


def episode(n_turns: int, size: tuple[int, int] = (32, 20)) -> tuple[list[Turn], list[bytes]]:
    history = []
    for i in range(n_turns):
        act = [Click(10 * i, 5 * i), TypeText(f"text {i}"), Key("ctrl+s"), None, Drag(1, 2, 3 * i, 4)][i % 5]
        out = f"turn {i} thinking. " + (format_tool_call(act, SCREEN) if act else "I am not sure what to do")
        note = "ok" if act else "no valid action: no action found"
        history.append(Turn(ModelCall(out), act, note))
    return history, [png(i, size) for i in range(n_turns + 1)]


def embedded_images(messages: list[dict[str, Any]]) -> list[bytes]:
    out = []
    for m in messages:
        if isinstance(m["content"], list):
            for part in m["content"]:
                if part["type"] == "image_url":
                    url = part["image_url"]["url"]
                    assert url.startswith("data:image/png;base64,")
                    out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


def texts(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        if isinstance(m["content"], str):
            out.append(m["content"])
        else:
            out += [p["text"] for p in m["content"] if p["type"] == "text"]
    return "\n".join(out)


def log_turns(prompt: Prompt) -> list[int]:
    """Turn numbers (1-based) in the text log of the first user message."""
    first_user = prompt.messages[1]["content"][0]["text"]
    return [int(n) for n in re.findall(r"^Turn (\d+): ", first_user, re.M)]


def check_well_formed(prompt: Prompt, screenshots: list[bytes]) -> None:
    msgs = prompt.messages
    assert msgs[0]["role"] == "system"
    roles = [m["role"] for m in msgs[1:]]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]  # alternates, ends on the user
    assert embedded_images(msgs) == prompt.images == [screenshots[i] for i in prompt.image_indices]
    assert prompt.images[-1] == screenshots[-1]  # the current screen is always sent
    assert prompt.image_indices == list(range(len(screenshots) - len(prompt.images), len(screenshots)))
    assert INSTRUCTION in msgs[1]["content"][0]["text"]
    json.dumps(msgs)  # goes over HTTP as is


def test_first_turn_is_system_and_one_user_message():
    history, shots = episode(0)
    p = build_messages(INSTRUCTION, history, shots, 3, SCREEN)
    assert [m["role"] for m in p.messages] == ["system", "user"]
    assert p.images == shots and p.image_indices == [0] and p.omitted_turns == 0 and p.n_tokens is None
    assert "Earlier turns" not in texts(p.messages)
    check_well_formed(p, shots)


def test_last_k_screenshots_are_sent_older_turns_become_a_text_log():
    history, shots = episode(6)
    p = build_messages(INSTRUCTION, history, shots, 3, SCREEN)
    check_well_formed(p, shots)
    assert p.image_indices == [4, 5, 6] and p.images == shots[4:]
    for old in shots[:4]:
        assert old not in p.images
    assert "screenshots not shown" in p.messages[1]["content"][0]["text"]
    assert log_turns(p) == [1, 2, 3, 4]
    # Turns inside the window are echoed verbatim as assistant messages, their results follow as user text.
    assistants = [m["content"] for m in p.messages if m["role"] == "assistant"]
    assert assistants == [history[4].output, history[5].output]
    assert "Turn 4: (no action parsed) -> no valid action: no action found" in texts(p.messages)
    assert "Turn 5 result: ok" in texts(p.messages) and "Turn 6 result: ok" in texts(p.messages)
    assert p.messages[-1]["content"][0]["text"].endswith("Current screenshot:")


def test_k_larger_than_the_episode_sends_everything():
    history, shots = episode(2)
    p = build_messages(INSTRUCTION, history, shots, 10, SCREEN)
    check_well_formed(p, shots)
    assert p.images == shots and log_turns(p) == []
    assert [m["content"] for m in p.messages if m["role"] == "assistant"] == [t.output for t in history]


def test_k_of_one_keeps_only_the_current_screen():
    history, shots = episode(4)
    p = build_messages(INSTRUCTION, history, shots, 1, SCREEN)
    check_well_formed(p, shots)
    assert [m["role"] for m in p.messages] == ["system", "user"]
    assert p.images == [shots[-1]] and log_turns(p) == [1, 2, 3, 4]


def test_log_uses_the_models_coordinates_and_says_what_happened():
    history = [
        Turn(ModelCall("x"), Click(640, 400), "ok"),
        Turn(ModelCall("garbage"), None, "no valid action:\n  unknown action 'fly'"),
        Turn(ModelCall("y"), TypeText("hi"), "error: " + "e" * 1000),
    ]
    shots = [png(i) for i in range(4)]
    p = build_messages(INSTRUCTION, history, shots, 1, RELATIVE)
    log = p.messages[1]["content"][0]["text"]
    assert 'Turn 1: {"action": "click", "coordinate": [500, 500]} -> ok' in log  # relative_1000, not pixels
    assert "Turn 2: (no action parsed) -> no valid action: unknown action 'fly'" in log  # one line
    line3 = next(line for line in log.splitlines() if line.startswith("Turn 3:"))
    assert len(line3) < 300 and line3.endswith("...")
    # What the log shows parses back to the same action under the same mapping.
    shown = re.search(r"Turn 1: (\{.*\}) ->", log)
    assert shown is not None
    back = parse_action(shown.group(1), RELATIVE)
    assert isinstance(back, ParsedAction) and back.action == Click(640, 400)


def test_system_prompt_teaches_the_format_the_parser_prefers():
    for mapping in (SCREEN, RELATIVE, CoordinateMapping(1280, 800, 644, 392)):
        text = system_prompt(mapping)
        example = re.search(r"<tool_call>\n(.*)\n</tool_call>", text)
        assert example is not None
        out = parse_action(example.group(0), mapping)
        assert isinstance(out, ParsedAction) and out.format == "tool_call"
        for name in ("click", "double_click", "right_click", "move", "drag", "scroll", "type", "key", "wait"):
            assert f'"{name}"' in text
        assert '"done"' in text
    assert "0-1000" in system_prompt(RELATIVE)
    assert "644x392" in system_prompt(CoordinateMapping(1280, 800, 644, 392))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"instruction": ""}, "instruction"),
        ({"screenshots": [png(0)]}, "one screenshot per past turn"),
        ({"k_last": 0}, "k_last"),
        ({"max_tokens": 100}, "together"),
        ({"count_tokens": len}, "together"),
        ({"count_tokens": len, "max_tokens": 100, "image_tokens": -1}, "image_tokens"),
    ],
)
def test_bad_arguments(kwargs, match):
    history, shots = episode(2)
    args: dict[str, Any] = {
        "instruction": INSTRUCTION,
        "history": history,
        "screenshots": shots,
        "k_last": 2,
        "mapping": SCREEN,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        build_messages(**args)


# ------------------------------------------------------------------------------------------- budget


def word_count(messages: list[dict[str, Any]]) -> int:
    """A deterministic stand-in tokenizer: words in text, 4 per message, 1 per image placeholder."""
    n = 0
    for m in messages:
        n += 4
        if isinstance(m["content"], str):
            n += len(m["content"].split())
        else:
            for p in m["content"]:
                n += len(p["text"].split()) if p["type"] == "text" else 1
    return n


IMAGE_TOKENS = 50


def budgeted(history: list[Turn], shots: list[bytes], k: int, budget: int) -> Prompt:
    return build_messages(
        INSTRUCTION,
        history,
        shots,
        k,
        SCREEN,
        count_tokens=word_count,
        max_tokens=budget,
        image_tokens=IMAGE_TOKENS,
    )


def test_budget_that_fits_changes_nothing():
    history, shots = episode(8)
    free = build_messages(INSTRUCTION, history, shots, 3, SCREEN)
    full = word_count(free.messages) + IMAGE_TOKENS * 3
    p = budgeted(history, shots, 3, full)
    assert p.messages == free.messages and p.n_tokens == full and p.omitted_turns == 0


def test_budget_drops_oldest_log_lines_first_then_oldest_screenshots():
    history, shots = episode(8)
    k = 4
    free = build_messages(INSTRUCTION, history, shots, k, SCREEN)
    full = word_count(free.messages) + IMAGE_TOKENS * k
    seen: list[tuple[int, int]] = []  # (screenshots sent, log lines kept) as the budget shrinks
    prev: Prompt | None = None
    budget = full
    while True:
        try:
            p = budgeted(history, shots, k, budget)
        except PromptBudgetError as exc:
            assert prev is not None and len(prev.images) == 1 and exc.needed == budget + 1
            assert exc.budget == budget and str(budget) in str(exc) and str(exc.needed) in str(exc)
            break
        check_well_formed(p, shots)
        assert p.n_tokens == word_count(p.messages) + IMAGE_TOKENS * len(p.images) <= budget
        n_before_window = len(shots) - len(p.images)
        kept = log_turns(p)
        # The log keeps the newest turns before the window: a contiguous run ending right before it.
        assert kept == list(range(n_before_window - len(kept) + 1, n_before_window + 1))
        assert p.omitted_turns == n_before_window - len(kept)
        if p.omitted_turns:
            assert f"[{p.omitted_turns} earlier turn" in p.messages[1]["content"][0]["text"]
        if prev is not None and len(p.images) < len(prev.images):
            # A screenshot goes only once the log before the larger window was empty.
            assert log_turns(prev) == [] and len(p.images) == len(prev.images) - 1
        seen.append((len(p.images), len(kept)))
        prev = p
        budget -= 1
    # Lexicographic order: fewer screenshots only after fewer log lines, and every window size was used.
    windows = [w for w, _ in seen]
    assert windows == sorted(windows, reverse=True) and set(windows) == set(range(1, k + 1))
    for w in range(1, k + 1):
        logs = [n for ww, n in seen if ww == w]
        assert logs == sorted(logs, reverse=True)


def test_budget_error_names_the_numbers():
    history, shots = episode(3)
    with pytest.raises(PromptBudgetError) as info:
        budgeted(history, shots, 2, 40)
    err = info.value
    assert err.budget == 40 and err.needed > 40
    assert "40" in str(err) and str(err.needed) in str(err) and str(IMAGE_TOKENS) in str(err)
    # A budget of exactly `needed` fits.
    p = budgeted(history, shots, 2, err.needed)
    assert p.n_tokens == err.needed and p.images == [shots[-1]] and p.omitted_turns == 3


def test_huge_model_outputs_in_history_are_budgeted_away():
    history, shots = episode(4)
    history[3] = Turn(ModelCall("word " * 5000), None, "no valid action")
    p = budgeted(history, shots, 3, 600)
    check_well_formed(p, shots)
    assert p.n_tokens is not None and p.n_tokens <= 600
    assert all("word word" not in (m["content"] if isinstance(m["content"], str) else "") for m in p.messages)


# ------------------------------------------------------------------------------ real tiny processor


@pytest.fixture(scope="module")
def processor():
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(TINY_MODEL, use_fast=False)


def test_real_chat_template_and_tokenizer_enforce_the_budget(processor):
    tok = processor.tokenizer
    pad = processor.image_token
    assert len(tok(pad, add_special_tokens=False).input_ids) == 1  # a placeholder costs one token

    size = (320, 200)
    grid = processor.image_processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"]
    per_image = int(grid.prod()) // processor.image_processor.merge_size**2
    assert per_image > 10

    def render(messages: list[dict[str, Any]]) -> str:
        # transformers 5.3 rewrites image_url parts in place ({"type": "image", "url": ...}): render a copy.
        return processor.apply_chat_template(
            copy.deepcopy(messages), tokenize=False, add_generation_prompt=True
        )

    def count(messages: list[dict[str, Any]]) -> int:
        return len(tok(render(messages), add_special_tokens=False).input_ids)

    history, shots = episode(6, size)
    free = build_messages(INSTRUCTION, history, shots, 3, SCREEN)
    full = count(free.messages) + (per_image - 1) * 3
    budgets = [full, full - 1, full - per_image, full - 2 * per_image - 30, full - 3 * per_image]
    sizes = []
    for budget in budgets:
        p = build_messages(
            INSTRUCTION,
            history,
            shots,
            3,
            SCREEN,
            count_tokens=count,
            max_tokens=budget,
            image_tokens=per_image - 1,
        )
        check_well_formed(p, shots)
        text = render(p.messages)
        assert text.count(pad) == len(p.images) and system_prompt(SCREEN) in text
        # What the server will see: the processor on exactly the returned images expands each placeholder.
        images = [Image.open(io.BytesIO(b)).convert("RGB") for b in p.images]
        ids = processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
        assert len(ids) == p.n_tokens <= budget
        assert ids.count(tok.convert_tokens_to_ids(pad)) == per_image * len(p.images)
        sizes.append((len(p.images), p.omitted_turns))
    assert sizes[0] == (3, 0) and sizes[1][0] == 3 and sizes[1][1] >= 1
    assert [s[0] for s in sizes] == sorted((s[0] for s in sizes), reverse=True) and sizes[-1][0] < 3
    with pytest.raises(PromptBudgetError):
        build_messages(
            INSTRUCTION,
            history,
            shots,
            3,
            SCREEN,
            count_tokens=count,
            max_tokens=per_image,
            image_tokens=per_image - 1,
        )
