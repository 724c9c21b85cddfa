"""OSWorld's metric functions that the boxes implement, by OSWorld's names: `fn(result, expected?, **options)`.

Entry points are "module:function" under this package, imported when a task is scored (the file libraries
load only then). `OPTIONS` is what each metric accepts (None: any its signature takes); support.py refuses a
task that passes others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox.server.task_families import load

_M = "sandbox.server.osworld.metrics."
METRICS: dict[str, str] = {
    **{
        name: f"{_M}general:{name}"
        for name in (
            "exact_match",
            "match_in_list",
            "is_in_list",
            "literal_match",
            "check_include_exclude",
            "check_direct_json_object",
            "compare_text_file",
            "compare_csv",
            "diff_text_file",
            "check_list",
        )
    },
    "compare_table": f"{_M}table:compare_table",
    "compare_docx_files": f"{_M}docs:compare_docx_files",
    "compare_docx_tables": f"{_M}docs:compare_docx_tables",
    **{
        name: f"{_M}docs:{name}"
        for name in (
            "compare_line_spacing",
            "contains_page_break",
            "is_first_line_centered",
            "check_italic_font_size_14",
            "compare_font_names",
            "has_page_numbers_in_footers",
            "evaluate_strike_through_last_paragraph",
        )
    },
    **{
        name: f"{_M}profile:{name}"
        for name in ("find_default_font", "check_auto_saving_time", "check_presenter_console_disable")
    },
    "check_slide_orientation_Portrait": f"{_M}slides:check_slide_orientation_Portrait",
    "check_transition": f"{_M}slides:check_transition",
    "compare_pptx_files": f"{_M}slides:compare_pptx_files",
}


def metric(name: str) -> Callable[..., Any]:
    return load(METRICS[name])
