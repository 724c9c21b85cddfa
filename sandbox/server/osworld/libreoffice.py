"""LibreOffice's user profile in a box: a fresh one per episode, in the box user's (RAM) home."""

from __future__ import annotations

import shutil
from pathlib import Path

# A first start shows a tip dialog and a what's-new bar: a profile that has seen them (OSWorld's VM image
# has them dismissed the same way). Saving in a Microsoft format asks whether to keep it unless told not to.
_ITEM = '<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>'
_SETTINGS = (
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "99.0"),
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "false"),
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "false"),
    ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "false"),
)


def fresh_profile(home: Path, ask_before_foreign_formats: bool) -> None:
    """Writes a new profile under `home`. `ask_before_foreign_formats`: LibreOffice's default, which
    OSWorld's tasks expect (their save steps press Enter on that question); False saves with Ctrl+S alone."""
    settings = [
        *_SETTINGS,
        (
            "/org.openoffice.Office.Common/Save/Document",
            "WarnAlienFormat",
            str(ask_before_foreign_formats).lower(),
        ),
    ]
    items = "\n".join(_ITEM.format(path=p, name=n, value=v) for p, n, v in settings)
    root = home / ".config/libreoffice"
    shutil.rmtree(root, ignore_errors=True)
    profile = root / "4/user"
    profile.mkdir(parents=True)
    (profile / "registrymodifications.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"'
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{items}\n</oor:items>\n"
    )
