"""Presentations: OSWorld's `compare_pptx_files`, read with python-pptx from the saved .pptx file.

The rules are OSWorld's (desktop-env 1.0.2), normalisations and quirks included, so that a pair of decks gets
the score OSWorld gives it (tests/sandbox/test_osworld_reference_slides.py proves it on generated decks):
- the slide count (`examine_number_of_slides`); per slide, its background (`examine_background_color`: the
  slide's solid fill, or the master's solid fill when the slide inherits; other fills count as none) and its
  notes, stripped (`examine_note`); the number of shapes, always;
- per top-level shape: position and size within `approximately_tolerance` (`examine_shape`, pictures,
  tables and groups included); a table's dimensions and, per cell, paragraph and run counts and each run's
  bold, italic, underline (always) and colour (`examine_color_rgb`), not its text;
- per text shape: the stripped text (`examine_text`), the paragraph count (always); per paragraph the
  alignment (`examine_alignment`, None counts as LEFT), the unstripped text (`examine_text`), the level
  (`examine_indent`) and the run count (always); per run the font name and size, bold and italic (None ==
  False), underline (None == False; None vs True or two different set values differ), colour (compared only
  when both runs carry an explicit sRGB: theme or inherited colours are skipped), strike (missing ==
  "noStrike"), each behind its `examine_*` option;
- bullets (`examine_bullets`), from the slide's XML as OSWorld reads it once a paragraph with runs is
  reached: for every paragraph with text on the slide, its level, bullet character and text. A paragraph
  without `a:pPr` has level "No Level", one with `a:pPr` but no `lvl` has "0"; OSWorld's own reads of a
  paragraph's level add `a:pPr` (python-pptx does), so the paragraphs already visited count as "0". OSWorld
  skips the check when the slide has an empty `a:t`;
- the text shapes of the slide, groups' members included: their count (always), and with
  `examine_alignment` their stripped text (`examine_text`), paragraph count and alignments.
OSWorld ignores options it does not know (`examine_run_count`, `examine_shape_lenient_height`: they are
accepted and ignored here too); its special position checks (SPECIAL, off by default) are not made here,
and a task that turns one on is refused at load time (support.py).

Deliberate difference: where OSWorld's function raises (a file python-pptx cannot open, a solid background
or an sRGB-less colour it reads `.rgb` from, a notes slide without a body, a table paired with another kind
of shape, a shape without a position), the evaluation errors in OSWorld; here the pair scores 0.
"""

from __future__ import annotations

from typing import Any

# Checks OSWorld makes unless a task turns them off.
CHECKS = (
    "examine_number_of_slides",
    "examine_shape",
    "examine_text",
    "examine_indent",
    "examine_font_name",
    "examine_font_size",
    "examine_font_bold",
    "examine_font_italic",
    "examine_color_rgb",
    "examine_font_underline",
    "examine_strike_through",
    "examine_alignment",
    "examine_bullets",
    "examine_background_color",
    "examine_note",
)
# OSWorld's special position checks, off by default: not made here (support.py refuses a task turning one on).
SPECIAL = (
    "examine_title_bottom_position",
    "examine_table_bottom_position",
    "examine_right_position",
    "examine_top_position",
    "examine_shape_for_shift_size",
    "examine_image_size",
    "examine_modify_height",
)
_GEOMETRY = ("left", "top", "width", "height")


def _close(a: Any, b: Any, tol: float) -> bool:
    """OSWorld's relative tolerance; a missing position (None) against a number raises, as there."""
    if a == b:
        return True
    if a == 0 or b == 0:
        return False
    return abs(a - b) / max(abs(a), abs(b)) <= tol


def _background(slide: Any) -> Any:
    from pptx.enum.dml import MSO_FILL

    fill = slide.background.fill
    if fill.type == MSO_FILL.SOLID:
        return fill.fore_color.rgb
    if fill.type == MSO_FILL.BACKGROUND:  # no fill of its own: the master's
        master = slide.slide_layout.slide_master.background.fill
        return master.fore_color.rgb if master.type == MSO_FILL.SOLID else None
    return None


def _rgb(font: Any) -> Any:
    """The run's explicit sRGB colour, None for theme, preset, system or inherited colours."""
    try:
        return font.color.rgb
    except AttributeError:
        return None


def _text_shapes(shapes: Any) -> list[Any]:
    out = []
    for shape in shapes:
        if hasattr(shape, "text") and hasattr(shape, "text_frame"):
            out.append(shape)
        if hasattr(shape, "shapes"):  # a group
            out += _text_shapes(shape.shapes)
    return out


def _bullets(slide: Any) -> list[tuple[str, Any, str]] | None:
    """(level, bullet character, text) per paragraph with text, None where OSWorld's reading fails."""
    from pptx.oxml.ns import qn

    out = []
    for p in slide._element.iter(qn("a:p")):
        texts = [t.text for t in p.iter(qn("a:t"))]
        if None in texts:  # an empty a:t: OSWorld's join fails and it skips the check
            return None
        ppr = p.find(qn("a:pPr"))
        if ppr is None:
            level, char = "No Level", "No Bullet"
        else:
            bu = ppr.find(qn("a:buChar"))
            level = "0" if ppr.get("lvl") is None else ppr.get("lvl")
            char = bu.get("char") if bu is not None else "No Bullet"
        if "".join(texts).strip():
            out.append((level, char, "".join(texts)))
    return out


def _underline_differs(a: Any, b: Any) -> bool:
    return a != b and (
        (a is not None and b is not None) or (a is None and b is True) or (a is True and b is None)
    )


def _same_font_basics(f: Any, g: Any, on: dict[str, Any], options: bool) -> bool:
    """Bold, italic, underline and colour; `options`: behind their examine_* options (text shapes) or
    bold, italic and underline always (table cells), as OSWorld does."""
    c1, c2 = _rgb(f), _rgb(g)
    if c1 is not None and c2 is not None and c1 != c2 and on["examine_color_rgb"]:
        return False
    if bool(f.bold) != bool(g.bold) and (on["examine_font_bold"] or not options):
        return False
    if bool(f.italic) != bool(g.italic) and (on["examine_font_italic"] or not options):
        return False
    return not (
        _underline_differs(f.underline, g.underline) and (on["examine_font_underline"] or not options)
    )


def _same_table(x: Any, y: Any, on: dict[str, Any]) -> bool:
    t1, t2 = x.table, y.table
    if len(t1.rows) != len(t2.rows) or len(t1.columns) != len(t2.columns):
        return False
    for row in range(len(t1.rows)):
        for col in range(len(t1.columns)):
            ps1, ps2 = t1.cell(row, col).text_frame.paragraphs, t2.cell(row, col).text_frame.paragraphs
            if len(ps1) != len(ps2):
                return False
            for p, q in zip(ps1, ps2, strict=True):
                if len(p.runs) != len(q.runs):
                    return False
                for u, v in zip(p.runs, q.runs, strict=True):
                    if not _same_font_basics(u.font, v.font, on, options=False):
                        return False
    return True


def _align(paragraph: Any) -> Any:
    from pptx.enum.text import PP_ALIGN

    return PP_ALIGN.LEFT if paragraph.alignment is None else paragraph.alignment


def _same_text_shape(x: Any, y: Any, s1: Any, s2: Any, on: dict[str, Any]) -> bool:
    if on["examine_text"] and x.text.strip() != y.text.strip():
        return False
    ps1, ps2 = x.text_frame.paragraphs, y.text_frame.paragraphs
    if len(ps1) != len(ps2):
        return False
    for p, q in zip(ps1, ps2, strict=True):
        if on["examine_alignment"] and _align(p) != _align(q):
            return False
        if on["examine_text"] and p.text != q.text:
            return False
        levels = p.level, q.level  # read whatever the option: the read adds a:pPr, which bullets then see
        if on["examine_indent"] and levels[0] != levels[1]:
            return False
        if len(p.runs) != len(q.runs):
            return False
        for u, v in zip(p.runs, q.runs, strict=True):
            f, g = u.font, v.font
            if on["examine_font_name"] and f.name != g.name:
                return False
            if on["examine_font_size"] and f.size != g.size:
                return False
            if not _same_font_basics(f, g, on, options=True):
                return False
            strikes = (r.font._element.get("strike", "noStrike") for r in (u, v))  # no python-pptx API
            if on["examine_strike_through"] and len(set(strikes)) > 1:
                return False
        if p.runs and on["examine_bullets"]:
            b1, b2 = _bullets(s1), _bullets(s2)
            if b1 is not None and b2 is not None and b1 != b2:
                return False
    return True


def _same_slide(s1: Any, s2: Any, on: dict[str, Any], tol: float) -> bool:
    backgrounds = _background(s1), _background(s2)  # read whatever the option, as OSWorld does
    if on["examine_background_color"] and backgrounds[0] != backgrounds[1]:
        return False
    notes = [s.notes_slide.notes_text_frame.text.strip() for s in (s1, s2)]
    if on["examine_note"] and notes[0] != notes[1]:
        return False
    text1, text2 = _text_shapes(s1.shapes), _text_shapes(s2.shapes)
    if len(s1.shapes) != len(s2.shapes):
        return False
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for x, y in zip(s1.shapes, s2.shapes, strict=True):
        same_place = all(_close(getattr(x, k), getattr(y, k), tol) for k in _GEOMETRY)
        if on["examine_shape"] and not same_place:
            return False
        if x.shape_type == MSO_SHAPE_TYPE.TABLE and not _same_table(x, y, on):
            return False
        if hasattr(x, "text") and hasattr(y, "text") and not _same_text_shape(x, y, s1, s2, on):
            return False
    if len(text1) != len(text2):
        return False
    if on["examine_alignment"]:
        for x, y in zip(text1, text2, strict=True):
            if on["examine_text"] and x.text.strip() != y.text.strip():
                return False
            ps1, ps2 = x.text_frame.paragraphs, y.text_frame.paragraphs
            if len(ps1) != len(ps2) or any(_align(p) != _align(q) for p, q in zip(ps1, ps2, strict=True)):
                return False
    return True


def compare_pptx_files(result: str | None, expected: str | None, **options: Any) -> float:
    from pptx import Presentation

    if not result or not expected:
        return 0.0
    on = {k: options.get(k, True) for k in CHECKS}
    tol = options.get("approximately_tolerance", 0.005)
    try:
        a, b = Presentation(result), Presentation(expected)
        if on["examine_number_of_slides"] and len(a.slides) != len(b.slides):
            return 0.0
        return float(all(_same_slide(s1, s2, on, tol) for s1, s2 in zip(a.slides, b.slides, strict=False)))
    except Exception:  # OSWorld's function raises here (the evaluation errors): scored 0 (module docstring)
        return 0.0


def check_slide_orientation_Portrait(result: str | None) -> float:
    from pptx import Presentation

    if not result:
        return 0.0
    try:
        prs = Presentation(result)
    except Exception:
        return 0.0
    return float(prs.slide_width < prs.slide_height)


def check_transition(result: str | None, rules: dict[str, Any]) -> float:
    """Slide `rules["slide_idx"]` (from 0) has a transition of type `rules["transition_type"]` (the
    element's name in PresentationML, e.g. "dissolve")."""
    import xml.etree.ElementTree as ET
    import zipfile

    if not result:
        return 0.0
    p = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
    try:
        with zipfile.ZipFile(result) as z:
            root = ET.fromstring(z.read(f"ppt/slides/slide{rules['slide_idx'] + 1}.xml"))
    except (KeyError, zipfile.BadZipFile, ET.ParseError, OSError):
        return 0.0
    transition = root.find(f".//{p}transition")
    return float(transition is not None and transition.find(f".//{p}{rules['transition_type']}") is not None)
