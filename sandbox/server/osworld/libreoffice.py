"""LibreOffice's user profile in a box: a fresh one per episode, in the box user's (RAM) home."""

from __future__ import annotations

import shutil
from pathlib import Path

# A first start shows a tip dialog and a what's-new bar, and saving in a Microsoft format asks whether to
# keep it: a profile that has seen the first two and does not ask. OSWorld's VM must not ask either: 45 of
# its office tasks save with Ctrl+S alone before they are scored (others press Enter after it, harmless
# once the file is saved).
_ITEM = '<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>'
_OSWORLD = (
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "99.0"),
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "false"),
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "false"),
)
# Our suite's also has no autosave or recovery (a box serves one episode).
_QUIET = (
    ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "false"),
)


def fresh_profile(home: Path, osworld_defaults: bool) -> None:
    """Writes a new profile under `home`. `osworld_defaults`: LibreOffice's own settings beyond the above,
    which OSWorld's tasks start from (some change the autosave interval); False: our suite's."""
    settings = [*_OSWORLD, *(() if osworld_defaults else _QUIET)]
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
