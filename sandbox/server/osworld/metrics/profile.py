"""LibreOffice's settings, read from the user profile's registrymodifications.xcu (OSWorld's names and
arguments): what the agent changed in Tools > Options is there once the application wrote it.

Each metric finds its setting the way OSWorld's does (desktop-env 1.0.2), since a file may hold a setting
twice or a value in an odd form: which occurrence counts and how the value is compared are per metric.
Deliberate difference: where OSWorld's raises or returns None (a file that is missing or not XML for the
autosave interval, a value that is not an integer), these score 0."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

OOR = "{http://openoffice.org/2001/registry}"


def _items(path: str | None, item_path: str) -> list[ET.Element] | None:
    """The `<item>`s at `item_path`, in file order; None when there is no file or it is not XML."""
    if not path:
        return None
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    return [item for item in root.iterfind(".//item") if item.get(f"{OOR}path") == item_path]


def _props(item: ET.Element, name: str, nested: bool = True) -> list[ET.Element]:
    """`item`'s properties called `name`: at any depth (inside `<node>`s too), or only its children."""
    return [p for p in item.iterfind(".//prop" if nested else "prop") if p.get(f"{OOR}name") == name]


def find_default_font(result: str | None, rules: dict[str, Any]) -> float:
    """Writer's default font is `rules["font_name"]`: the last value given for it in the file, compared
    exactly."""
    want = rules["font_name"]
    if not result:
        return 0.0
    font = None
    for item in _items(result, "/org.openoffice.Office.Writer/DefaultFont") or []:
        for prop in _props(item, "Standard"):
            for value in prop.findall("value"):
                font = value.text
    return float(font == want)


def check_auto_saving_time(result: str | None, rules: dict[str, Any]) -> float:
    """The autosave interval is `rules["minutes"]`: the first property of the last item that gives it,
    read as Python reads an integer (" 5 " is 5)."""
    minutes = rules["minutes"]
    text = None
    for item in _items(result, "/org.openoffice.Office.Common/Save/Document") or []:
        for prop in _props(item, "AutoSaveTimeIntervall")[:1]:
            value = prop.find(".//value")
            if value is None:
                return 0.0
            text = value.text
    if text is None:
        return 0.0
    try:
        return float(int(text) == minutes)
    except ValueError:
        return 0.0


def check_presenter_console_disable(result: str | None) -> float:
    """Impress's presenter console is turned off: the first value given for it is "false" in any case (no
    spaces around it)."""
    for item in _items(result, "/org.openoffice.Office.Impress/Misc/Start") or []:
        for prop in _props(item, "EnablePresenterScreen", nested=False):
            value = prop.find("value")
            return float(value is not None and value.text is not None and value.text.lower() == "false")
    return 0.0
