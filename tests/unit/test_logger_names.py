"""Logger names of our modules are unique (AReaL's logging keeps only the newest logger of a name)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_areal_logger_name_is_used_once():
    """AReaL's getLogger makes a new logger object at every call and `setup_file_logging` adds the file
    handler to the newest object of each name only: a second module with the same name would take the
    first one's lines out of training.log (the resume message once went missing that way)."""
    names: dict[str, list[str]] = {}
    for path in sorted((REPO / "cua_agent").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.setdefault(node.args[0].value, []).append(str(path.relative_to(REPO)))
    assert names, "no logger found: the check is looking in the wrong place"
    shared = {n: files for n, files in names.items() if len(files) > 1}
    assert not shared, f"logger names used by several modules: {shared}"
