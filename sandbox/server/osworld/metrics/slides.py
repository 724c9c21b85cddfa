"""Presentations: OSWorld's `compare_pptx_files`, read with python-pptx from the saved .pptx file.

Checked, each switchable by its OSWorld option (all on by default): `examine_number_of_slides`,
`examine_shape` (position and size, within `approximately_tolerance`), `examine_text`, `examine_font_name`,
`examine_font_size`, `examine_font_bold`, `examine_font_italic`, `examine_font_underline`,
`examine_color_rgb`, `examine_strike_through`, `examine_alignment`, `examine_run_count`, `examine_note`.
OSWorld's bullet, indent, background and special position checks are not made (OPTIONS_UNCHECKED); a task
that turns one of the special ones on is refused at load time (support.py).
"""

from __future__ import annotations

from typing import Any

CHECKS = (
    "examine_number_of_slides",
    "examine_shape",
    "examine_text",
    "examine_font_name",
    "examine_font_size",
    "examine_font_bold",
    "examine_font_italic",
    "examine_font_underline",
    "examine_color_rgb",
    "examine_strike_through",
    "examine_alignment",
    "examine_run_count",
    "examine_note",
)
# On by default in OSWorld, not checked here: a task may leave them on or turn them off.
OPTIONS_UNCHECKED = (
    "examine_bullets",
    "examine_indent",
    "examine_background_color",
    "examine_shape_for_shift_size",
)
OPTIONS = frozenset({*CHECKS, *OPTIONS_UNCHECKED, "approximately_tolerance", "enable_debug"})


def _close(a: float | None, b: float | None, tol: float) -> bool:
    if a == b:
        return True
    if not a or not b:
        return False
    return abs(a - b) / max(abs(a), abs(b)) <= tol


def _color(font: Any) -> Any:
    try:
        return font.color.rgb if font.color and font.color.type is not None else None
    except AttributeError:
        return None


def _strike(run: Any) -> Any:
    return run.font._element.get("strike")  # python-pptx has no API for it: the XML attribute


def compare_pptx_files(result: str | None, expected: str | None, **options: Any) -> float:
    from pptx import Presentation

    if not result or not expected:
        return 0.0
    try:
        a, b = Presentation(result), Presentation(expected)
    except Exception:
        return 0.0
    on = {k: bool(options.get(k, True)) for k in CHECKS}
    tol = float(options.get("approximately_tolerance", 0.005))
    if on["examine_number_of_slides"] and len(a.slides) != len(b.slides):
        return 0.0
    for s1, s2 in zip(a.slides, b.slides, strict=False):
        if on["examine_note"]:
            n1 = s1.notes_slide.notes_text_frame.text if s1.has_notes_slide else ""
            n2 = s2.notes_slide.notes_text_frame.text if s2.has_notes_slide else ""
            if n1.strip() != n2.strip():
                return 0.0
        shapes1, shapes2 = list(s1.shapes), list(s2.shapes)
        if len(shapes1) != len(shapes2):
            return 0.0
        for x, y in zip(shapes1, shapes2, strict=False):
            if on["examine_shape"] and not all(
                _close(getattr(x, k), getattr(y, k), tol) for k in ("left", "top", "width", "height")
            ):
                return 0.0
            if x.has_text_frame != y.has_text_frame:
                return 0.0
            if not x.has_text_frame:
                continue
            if on["examine_text"] and x.text_frame.text.strip() != y.text_frame.text.strip():
                return 0.0
            for p1, p2 in zip(x.text_frame.paragraphs, y.text_frame.paragraphs, strict=False):
                if on["examine_alignment"] and p1.alignment != p2.alignment:
                    return 0.0
                r1 = [r for r in p1.runs if r.text.strip()]
                r2 = [r for r in p2.runs if r.text.strip()]
                if on["examine_run_count"] and len(r1) != len(r2):
                    return 0.0
                for u, v in zip(r1, r2, strict=False):
                    checks = {
                        "examine_font_name": (u.font.name, v.font.name),
                        "examine_font_size": (u.font.size, v.font.size),
                        "examine_font_bold": (u.font.bold, v.font.bold),
                        "examine_font_italic": (u.font.italic, v.font.italic),
                        "examine_font_underline": (u.font.underline, v.font.underline),
                        "examine_color_rgb": (_color(u.font), _color(v.font)),
                        "examine_strike_through": (_strike(u), _strike(v)),
                    }
                    if any(on[k] and p != q for k, (p, q) in checks.items()):
                        return 0.0
    return 1.0


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
