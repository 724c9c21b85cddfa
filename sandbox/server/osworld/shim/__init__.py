"""Stand-ins for the modules OSWorld's task commands import (this folder goes on their PYTHONPATH)."""

from __future__ import annotations

import ast
from pathlib import Path


def pyautogui_names() -> set[str]:
    """The functions pyautogui.py provides, read without importing it (it needs a display)."""
    tree = ast.parse((Path(__file__).parent / "pyautogui.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    names |= {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    return names
