"""Model families: one config choice (`agent.model_family`) that decides how the agent talks to a model —
the system prompt with its tool schema, the layout of the chat messages (prompting.py), the form actions are
written in (past actions in the prompt's log, demonstrations) and the coordinate convention. The parser
reads a family's output as the family's own harness does (parser.py).

    qwen2.5-vl  the project's `computer` tool (tool_calls.py) and layout; absolute pixels of the resized
                screenshot
    qwen3-vl    Qwen's `computer_use` function and Qwen's message layout, as in its cookbook
                (computer_use.py); 0-1000 coordinates
    ui-tars     UI-TARS-1.5's prompt, message layout and Thought/Action format, as its harness prompts it
                (ui_tars.py); absolute pixels of the resized screenshot
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cua_agent.episode import computer_use, tool_calls, ui_tars
from cua_agent.episode.actions import Action
from cua_agent.episode.coordinates import Convention, CoordinateMapping

# How a prompt's messages are laid out (prompting.py): "project" the task and its labels before each
# screenshot; "qwen" each screenshot before its text, as Qwen's cookbook and OSWorld's Qwen3-VL harness send
# them; "ui-tars" UI-TARS-1.5's harness layout (ui_tars.py).
Layout = Literal["project", "qwen", "ui-tars"]


@dataclass(frozen=True)
class ModelFamily:
    name: str
    model_types: tuple[str, ...]  # config.json `model_type` of its checkpoints
    convention: Convention
    system_prompt: Callable[[CoordinateMapping], str]
    answer: Callable[[Action, CoordinateMapping], str]  # an action as the model is taught to write it
    log_entry: Callable[[Action, CoordinateMapping], str]  # a past action in the prompt's text log
    layout: Layout = "project"


def _json_args(to_arguments: Callable[[Action, CoordinateMapping], dict]) -> Callable[..., str]:
    return lambda action, mapping: json.dumps(to_arguments(action, mapping), ensure_ascii=False)


FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        ModelFamily(
            "qwen2.5-vl",
            ("qwen2_5_vl",),
            "absolute",
            tool_calls.computer_system_prompt,
            tool_calls.format_tool_call,
            _json_args(tool_calls.to_arguments),
        ),
        ModelFamily(
            "qwen3-vl",
            ("qwen3_vl", "qwen3_vl_moe"),
            "relative_1000",
            computer_use.system_prompt,
            computer_use.format_tool_call,
            _json_args(computer_use.to_arguments),
            "qwen",
        ),
        ModelFamily(
            "ui-tars",
            ("qwen2_5_vl",),  # UI-TARS-1.5-7B is a Qwen2.5-VL
            "absolute",
            ui_tars.system_prompt,
            ui_tars.format_action,
            ui_tars.action_text,
            "ui-tars",
        ),
    )
}
DEFAULT_FAMILY = "qwen2.5-vl"


class ModelFamilyError(ValueError):
    """An unknown family, or one that does not match the checkpoint's config.json."""


def family_named(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise ModelFamilyError(f"agent.model_family must be one of {list(FAMILIES)}, got {name!r}")
    return FAMILIES[name]


def check_checkpoint(name: str, model_dir: str | Path) -> None:
    """Refuse a family whose checkpoints have another architecture than the model's config.json says."""
    fam = family_named(name)
    path = Path(model_dir) / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError) as exc:
        raise ModelFamilyError(f"cannot read the model's architecture from {path}: {exc}") from exc
    if model_type not in fam.model_types:
        fits = [f.name for f in FAMILIES.values() if model_type in f.model_types]
        raise ModelFamilyError(
            f"agent.model_family is {name!r} (model_type {' or '.join(fam.model_types)}), but {path} says "
            f"model_type {model_type!r}" + (f": set agent.model_family to one of {fits}" if fits else "")
        )
