"""Where the pointer ended up after a pointer action, through a stand-in `xdotool` on PATH (the real one
needs an X display; this one follows its `getmouselocation --shell` output): an X server that applies the
move late, as a loaded machine's does, is waited for; a move that never lands is an error naming both
places."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from sandbox.server.display import Display, DisplayError

# Reports the pointer at (1, 1) until the clock passes the time in `arrives` (never, if that file is
# absent), then at (93, 686).
FAKE_XDOTOOL = """#!/bin/sh
here=$(dirname "$0")
now=$(date +%s%N)
if [ -f "$here/arrives" ] && [ "$now" -ge "$(cat "$here/arrives")" ]; then x=93; y=686; else x=1; y=1; fi
printf 'X=%s\\nY=%s\\nSCREEN=0\\nWINDOW=1\\n' "$x" "$y"
"""


@pytest.fixture
def display(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Display:
    fake = tmp_path / "xdotool"
    fake.write_text(FAKE_XDOTOOL)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return Display(display=":99", window_manager=False)


def test_a_move_the_x_server_applies_late_is_waited_for(display: Display, tmp_path: Path):
    (tmp_path / "arrives").write_text(str(time.time_ns() + 200_000_000))  # 0.2 s after the move
    assert display.run_input(["mousemove", "93", "686"], expect_pointer=(93, 686)) == {"pointer": [93, 686]}


def test_a_move_that_never_lands_names_both_places(display: Display):
    started = time.monotonic()
    with pytest.raises(DisplayError, match=r"pointer is at \(1, 1\), expected \(93, 686\)"):
        display.run_input(["mousemove", "93", "686"], expect_pointer=(93, 686))
    assert time.monotonic() - started < 3  # a bounded wait, not a hang
