"""The office suite: tasks in LibreOffice Calc, Writer and Impress, the text editor, the terminal and the
browser, generated from a seed as OSWorld tasks.

Each task makes, from its seed, the file the agent edits (values, names and text vary with the seed), the
OSWorld task that opens it and scores the result, and what the scripted oracles need: the edit that solves
it and a plausible wrong one (sandbox/oracles/office.py). Files are made with openpyxl, python-docx and
python-pptx; the verifiers read what the application saved, its profile (the browser's bookmarks) or what is on disk
(sandbox/server/osworld/metrics), never the screen. A gold file is made only when the episode is scored.

One module per application (calc, writer, impress, editor, terminal, browser), each with its tasks by name;
common.py holds what they share. `TASKS` is every task, by name.
"""

from __future__ import annotations

from collections.abc import Callable

from sandbox.server.office_suite import browser, calc, editor, impress, terminal, writer
from sandbox.server.office_suite.common import Generated

__all__ = ["TASKS", "Generated"]

TASKS: dict[str, Callable[[int], Generated]] = {
    **calc.TASKS,
    **writer.TASKS,
    **impress.TASKS,
    **editor.TASKS,
    **terminal.TASKS,
    **browser.TASKS,
}
