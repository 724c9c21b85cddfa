"""LibreOffice's settings, read from the user profile's registrymodifications.xcu (OSWorld's names and
arguments): what the agent changed in Tools > Options is there once the application wrote it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

OOR = "{http://openoffice.org/2001/registry}"


def setting(path: str | None, item_path: str, name: str) -> str | None:
    """The value of property `name` under `item_path`, or None (no file, no such setting)."""
    if not path:
        return None
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    found = None
    for item in root.iter("item"):
        if item.get(f"{OOR}path") != item_path:
            continue
        for prop in item.iter("prop"):
            if prop.get(f"{OOR}name") == name:
                value = prop.find("value")
                found = value.text if value is not None else None
    return found


def find_default_font(result: str | None, rules: dict[str, Any]) -> float:
    """Writer's default font is `rules["font_name"]`."""
    return float(
        setting(result, "/org.openoffice.Office.Writer/DefaultFont", "Standard") == rules["font_name"]
    )


def check_auto_saving_time(result: str | None, rules: dict[str, Any]) -> float:
    """The autosave interval is `rules["minutes"]`."""
    value = setting(result, "/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall")
    return float(value is not None and value.strip().isdigit() and int(value) == rules["minutes"])


def check_presenter_console_disable(result: str | None) -> float:
    """Impress's presenter console is turned off."""
    value = setting(result, "/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen")
    return float(value is not None and value.strip().lower() == "false")
