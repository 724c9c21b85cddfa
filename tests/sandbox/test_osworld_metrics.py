"""OSWorld's metrics as the boxes implement them, on files made for each case: one that must pass and one
that must not. They run in the in-box server's host environment (openpyxl, python-docx, python-pptx: the
trainer's environment has none), the same code and pins as in the image."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.base import cua_home

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

CASES = r"""
import json, sys, openpyxl, docx
from docx.enum.text import WD_ALIGN_PARAGRAPH, WD_BREAK
from docx.shared import Pt
from openpyxl.styles import Font, PatternFill
from sandbox.server.osworld.metrics import metric
d = sys.argv[1]
out = {}

def doc(name, paragraphs, **kw):
    document = docx.Document()
    for i, text in enumerate(paragraphs):
        p = document.add_paragraph()
        run = p.add_run(text)
        if kw.get("center_first") and i == 0: p.alignment = WD_ALIGN_PARAGRAPH.CENTER
        if kw.get("spacing"): p.paragraph_format.line_spacing = kw["spacing"]
        if kw.get("italic14") is not None and i == 0: run.italic = True; run.font.size = Pt(kw["italic14"])
        if kw.get("strike_last") and i == len(paragraphs) - 1: run.font.strike = True
        if kw.get("font"): run.font.name = kw["font"]
        if kw.get("page_break") and i == 0: run.add_break(WD_BREAK.PAGE)
    if kw.get("footer"): document.sections[0].footer.paragraphs[0].text = kw["footer"]
    path = f"{d}/{name}.docx"; document.save(path); return path

text = ["First line.", "Second line."]
gold = doc("gold", text)
out["compare_docx_files"] = [metric("compare_docx_files")(doc("a", text), gold),
                             metric("compare_docx_files")(doc("b", ["First line.", "Other."]), gold)]
out["compare_line_spacing"] = [metric("compare_line_spacing")(doc("c", text, spacing=2.0), doc("g2", text, spacing=2.0)),
                               metric("compare_line_spacing")(doc("d", text, spacing=1.5), doc("g3", text, spacing=2.0))]
out["contains_page_break"] = [metric("contains_page_break")(doc("e", text, page_break=True), {"page_break_count": 1}),
                              metric("contains_page_break")(doc("f", text), {})]
out["is_first_line_centered"] = [metric("is_first_line_centered")(doc("g", text, center_first=True)),
                                 metric("is_first_line_centered")(doc("h", text))]
out["check_italic_font_size_14"] = [metric("check_italic_font_size_14")(doc("i", text, italic14=14), gold),
                                    metric("check_italic_font_size_14")(doc("j", text, italic14=12), gold)]
out["compare_font_names"] = [metric("compare_font_names")(doc("k", text, font="Liberation Serif"), {"font_name": "Liberation Serif"}),
                             metric("compare_font_names")(doc("l", text, font="DejaVu Sans"), {"font_name": "Liberation Serif"})]
out["has_page_numbers_in_footers"] = [metric("has_page_numbers_in_footers")(doc("m", text, footer="Page 1")),
                                      metric("has_page_numbers_in_footers")(doc("n", text, footer="Page"))]
out["evaluate_strike_through_last_paragraph"] = [
    metric("evaluate_strike_through_last_paragraph")(doc("o", text, strike_last=True), gold),
    metric("evaluate_strike_through_last_paragraph")(doc("p", text), gold)]
xcu = '<oor:items xmlns:oor="http://openoffice.org/2001/registry"><item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name="Standard" oor:op="fuse"><value>{}</value></prop></item></oor:items>'
for name, font in (("q", "Liberation Serif"), ("r", "DejaVu Sans")):
    open(f"{d}/{name}.xcu", "w").write(xcu.format(font))
out["find_default_font"] = [metric("find_default_font")(f"{d}/q.xcu", {"font_name": "Liberation Serif"}),
                            metric("find_default_font")(f"{d}/r.xcu", {"font_name": "Liberation Serif"})]

def book(name, bold=False, fill=None, freeze=None, zoom=None, merge=False, b2=42):
    wb = openpyxl.Workbook(); ws = wb.active
    ws.append(["name", "value"]); ws.append(["answer", b2])
    ws["B2"].font = Font(bold=bold)
    if fill: ws["B2"].fill = PatternFill("solid", fgColor=fill)
    if freeze: ws.freeze_panes = freeze
    if zoom: ws.sheet_view.zoomScale = zoom
    if merge: ws.merge_cells("A1:B1")
    path = f"{d}/{name}.xlsx"; wb.save(path); return path

table = metric("compare_table")
cell = lambda props: {"rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": "B2", "props": props}]}
out["check_cell"] = [
    table(book("s", bold=True, fill="FFFF0000"), None, **cell({"value": {"method": "eq", "ref": 42},
          "font_bold": {"method": "eq", "ref": True}, "bgcolor": {"method": "eq", "ref": "FFFF0000"}})),
    table(book("t", bold=False, fill="FFFF0000"), None, **cell({"font_bold": {"method": "eq", "ref": True}})),
]
out["merge"] = [
    table(book("u", merge=True), None, rules=[{"type": "check_cell", "sheet_idx": 0, "coordinate": "B1", "props": {"merge": {"method": "eq", "ref": True}}}]),
    table(book("v"), None, rules=[{"type": "check_cell", "sheet_idx": 0, "coordinate": "B1", "props": {"merge": {"method": "eq", "ref": True}}}]),
]
freeze = {"rules": [{"type": "freeze", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}
out["freeze"] = [table(book("w", freeze="A2"), book("x", freeze="A2"), **freeze),
                 table(book("y", freeze="B2"), book("z", freeze="A2"), **freeze)]
zoom = {"rules": [{"type": "zoom", "sheet_idx": 0, "method": "eq", "ref": 150}]}
out["zoom"] = [table(book("z1", zoom=150), None, **zoom), table(book("z2"), None, **zoom)]
for name, value in (("q2", "3"), ("r2", "10")):
    open(f"{d}/{name}.xcu", "w").write(xcu.replace("/org.openoffice.Office.Writer/DefaultFont", "/org.openoffice.Office.Common/Save/Document").replace("Standard", "AutoSaveTimeIntervall").format(value))
out["check_auto_saving_time"] = [metric("check_auto_saving_time")(f"{d}/q2.xcu", {"minutes": 3}),
                                 metric("check_auto_saving_time")(f"{d}/r2.xcu", {"minutes": 3})]
for name, value in (("q3", "false"), ("r3", "true")):
    open(f"{d}/{name}.xcu", "w").write(xcu.replace("/org.openoffice.Office.Writer/DefaultFont", "/org.openoffice.Office.Impress/Misc/Start").replace("Standard", "EnablePresenterScreen").format(value))
out["check_presenter_console_disable"] = [metric("check_presenter_console_disable")(f"{d}/q3.xcu"),
                                          metric("check_presenter_console_disable")(f"{d}/r3.xcu")]

from pptx import Presentation
from pptx.oxml.ns import qn
from lxml import etree
def deck(name, portrait=False, transition=None):
    prs = Presentation()
    if portrait: prs.slide_width, prs.slide_height = prs.slide_height, prs.slide_width
    slide = prs.slides.add_slide(prs.slide_layouts[5]); slide.shapes.title.text = "T"
    if transition:
        t = etree.SubElement(slide._element, qn("p:transition")); etree.SubElement(t, qn(f"p:{transition}"))
    path = f"{d}/{name}.pptx"; prs.save(path); return path
out["check_slide_orientation_Portrait"] = [metric("check_slide_orientation_Portrait")(deck("s1", portrait=True)),
                                           metric("check_slide_orientation_Portrait")(deck("s2"))]
rule = {"slide_idx": 0, "transition_type": "dissolve"}
out["check_transition"] = [metric("check_transition")(deck("s3", transition="dissolve"), rule),
                           metric("check_transition")(deck("s4", transition="fade"), rule)]
print(json.dumps(out))
"""


def test_each_metric_passes_its_case_and_fails_the_other(tmp_path):
    python = (cua_home() / "sandbox" / "host-python").read_text().strip()
    out = subprocess.run(
        [python, "-c", CASES, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout)
    assert {name: scores for name, scores in results.items() if scores != [1.0, 0.0]} == {}
    assert len(results) == 17


# -- evaluate(): which failures score 0 and which are the evaluation's error, as in OSWorld's evaluate ----


class _Display:
    width, height = 1920, 1080

    def env(self) -> dict[str, str]:
        return {}


def _env(tmp_path: Path):
    from sandbox.server.osworld.env import TaskEnv

    return TaskEnv(display=_Display(), home=tmp_path, assets=lambda url: tmp_path / url)  # type: ignore[arg-type]


def _missing(env, spec):
    raise FileNotFoundError(spec["path"])


@pytest.fixture
def fake_evaluation(monkeypatch: pytest.MonkeyPatch):
    """Getters `file` (its spec's path) and `missing` (FileNotFoundError); metrics `same` (1 when result
    equals expected) and `gone` (FileNotFoundError). Returns the metrics called."""
    from sandbox.server.osworld import evaluate as ev

    calls: list[str] = []

    def same(result, expected=None, **opts):
        calls.append("same")
        return float(result == expected)

    def gone(result, expected=None, **opts):
        calls.append("gone")
        raise FileNotFoundError("a file the metric opens")

    monkeypatch.setitem(ev.GETTERS, "file", lambda env, spec: spec["path"])
    monkeypatch.setitem(ev.GETTERS, "missing", _missing)
    monkeypatch.setattr(ev, "metric", {"same": same, "gone": gone}.__getitem__)
    return calls


def _task(funcs, results, expecteds, conj="and"):
    return {"evaluator": {"func": funcs, "result": results, "expected": expecteds, "conj": conj}}


def test_a_missing_result_file_scores_that_metric_0(tmp_path, fake_evaluation):
    from sandbox.server.osworld.evaluate import evaluate

    ok, gone = {"type": "file", "path": "a"}, {"type": "missing", "path": "x"}
    assert evaluate(_env(tmp_path), _task("same", gone, ok))["score"] == 0.0
    assert evaluate(_env(tmp_path), _task(["same", "same"], [gone, ok], [ok, ok]))["score"] == 0.0
    assert fake_evaluation == []  # under "and" the first 0 ends the evaluation
    # Under "or" OSWorld's loop reads an unbound (or the previous metric's) result and raises or scores
    # stale state; the boxes score that metric 0 and go on.
    out = evaluate(_env(tmp_path), _task(["same", "same"], [gone, ok], [ok, ok], conj="or"))
    assert out == {"score": 1.0, "metrics": [{"func": "same", "score": 0.0}, {"func": "same", "score": 1.0}]}


def test_a_missing_gold_or_a_metric_failing_is_the_evaluations_error(tmp_path, fake_evaluation):
    """OSWorld catches FileNotFoundError from the result getter only: the expected getter's or the
    metric's propagates out of evaluate()."""
    from sandbox.server.osworld.evaluate import evaluate

    ok, gone = {"type": "file", "path": "a"}, {"type": "missing", "path": "gold"}
    with pytest.raises(FileNotFoundError, match="gold"):
        evaluate(_env(tmp_path), _task("same", ok, gone))
    with pytest.raises(FileNotFoundError, match="a file the metric opens"):
        evaluate(_env(tmp_path), _task("gone", ok, ok))


def test_a_command_getter_naming_a_missing_program_gives_none(tmp_path):
    """OSWorld's server answers 500 for a command it cannot start, and its getter returns None (the metric
    then scores it); a program that fails is its output."""
    from sandbox.server.osworld.getters import vm_command_error, vm_command_line

    env = _env(tmp_path)
    assert vm_command_line(env, {"command": ["no-such-program-here", "x"]}) is None
    assert vm_command_error(env, {"command": "no-such-program-here x"}) is None
    assert vm_command_line(env, {"command": "no-such-program-here x", "shell": True}) == ""
    assert vm_command_line(env, {"command": ["echo", "hi"]}) == "hi\n"


def test_a_file_still_being_saved_is_read_once_it_holds_still(tmp_path: Path):
    """l3afpad saves with fopen("w") (the file is empty, its mtime new) and writes the text at fclose: a file
    scored in between is empty. OSWorld's runners wait 5-20 s before they evaluate; vm_file waits until the
    file has not changed for FILE_QUIET_S."""
    import threading

    from sandbox.server.osworld.getters import FILE_QUIET_S, vm_file

    path = tmp_path / "notes.txt"
    path.write_text("old\n")
    os.utime(path, (0, 0))  # saved long ago: read at once
    began = time.monotonic()
    assert Path(vm_file(_env(tmp_path), {"path": str(path)})).read_text() == "old\n"
    assert time.monotonic() - began < FILE_QUIET_S  # no wait (a wait is at least FILE_QUIET_S)

    def save() -> None:  # as l3afpad: truncate, then the text 0.2 s later
        with open(path, "w") as f:
            f.flush()
            time.sleep(0.2)
            f.write("old\nnew\n")

    saving = threading.Thread(target=save)
    saving.start()
    while path.stat().st_size:  # truncated
        time.sleep(0.001)
    assert Path(vm_file(_env(tmp_path), {"path": str(path)})).read_text() == "old\nnew\n"
    saving.join()
