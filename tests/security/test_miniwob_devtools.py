"""MiniWoB's reward lives in its page's JavaScript, and F12 is a key the policy may press: DevTools' console
would let it set the reward itself. The chromium that chromedriver drives in the boxes refuses DevTools
("DevTools not allowed on this page": a dialog dims the page until it is dismissed); this keeps it so, in a
real box of the sandbox image under podman: after F12, Ctrl+Shift+I or Ctrl+Shift+J (and OK on the dialog)
the screen is the page as it was, with no DevTools docked in it or in a window of its own, and the
episode's reward is still the page's own verdict."""

from __future__ import annotations

import asyncio
import io
import os

import numpy as np
import pytest
from PIL import Image

from sandbox.backends.docker import DockerBackend
from sandbox.base import SandboxSpec
from tests.security.box_shell import box_shell

pytestmark = pytest.mark.slow


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


WINDOWS = "for d in /tmp/.X11-unix/X*; do DISPLAY=:${d##*X} xwininfo -root -tree; done 2>&1"


async def test_f12_and_ctrl_shift_i_open_no_devtools(sandbox_setup):
    backend = DockerBackend(run_id=f"pytest-devtools-{os.getpid()}")
    sb = await backend.start(SandboxSpec())
    try:
        await sb.reset("miniwob/click-test", 0)
        shell = box_shell(backend, sb.id)
        before, shown = shell(WINDOWS), pixels(await sb.screenshot())
        assert "chromium" in before.lower() or "miniwob" in before.lower(), before[:2000]
        for keys in ("F12", "ctrl+shift+i", "ctrl+shift+j"):
            await sb.act({"type": "key", "keys": keys})
            await asyncio.sleep(1)
            await sb.act({"type": "key", "keys": "Return"})  # OK on chromium's "DevTools not allowed" dialog
        await asyncio.sleep(1)  # DevTools would be up by now
        after = shell(WINDOWS)
        assert "devtools" not in after.lower(), after[:4000]  # undocked: a window of its own
        now = pixels(await sb.screenshot())
        changed = float((now != shown).any(axis=-1).mean())
        assert changed < 0.01, f"{changed:.1%} of the screen changed (docked DevTools take a third or more)"
        assert (await sb.evaluate(wait_s=0.1))["reward"] == 0.0, "nothing clicked: the page's own 0"
    finally:
        await sb.close()
        assert backend.list_boxes(run_id=backend.run_id) == []
        backend.close()
