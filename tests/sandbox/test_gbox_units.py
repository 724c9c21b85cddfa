"""The gbox backend's pure parts: key names, the harness it uploads, its configuration errors."""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from sandbox.backends.gbox import GboxBackend, gbox_keys, harness_tarball
from sandbox.errors import SandboxStartError
from sandbox.server.protocol import ActionError


def test_wire_keys_become_gbox_press_key_names():
    assert gbox_keys("ctrl+c") == ["control", "c"]
    assert gbox_keys(["Return"]) == ["enter"]
    assert gbox_keys("cmd+shift+T") == ["shift", "meta", "t"]
    assert gbox_keys("page down") == ["pageDown"]
    assert gbox_keys("F5") == ["f5"]
    assert gbox_keys(";") == [";"]
    assert gbox_keys("A") == ["shift", "a"]
    with pytest.raises(ActionError, match="no GBox press-key name"):
        gbox_keys("XF86AudioMute")


def test_the_harness_is_what_the_image_ships():
    with tarfile.open(fileobj=io.BytesIO(harness_tarball()), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {"sandbox/__init__.py", "sandbox/server/app.py", "sandbox/server/call.py"} <= names
    assert "sandbox/server/runtimes/miniwob.py" in names
    assert not [n for n in names if n.startswith(("sandbox/backends", "sandbox/oracles", "sandbox/testing"))]
    first = harness_tarball()
    time.sleep(1.1)  # gzip's header would hold the second it was made
    assert harness_tarball() == first  # deterministic: no times or owners inside


def test_no_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("GBOX_API_KEY", raising=False)
    with pytest.raises(SandboxStartError, match="GBOX_API_KEY"):
        GboxBackend()


def test_wait_change_is_checked_by_one_rule_for_every_backend():
    from sandbox.server.protocol import check_wait_change

    assert check_wait_change({"type": "click"}) == 0.0 and check_wait_change({"wait_change_s": 2}) == 2.0
    for bad in (True, -1, 5.5, "1"):
        with pytest.raises(ActionError, match=r"'wait_change_s' must be a number in \[0, 5\]"):
            check_wait_change({"wait_change_s": bad})
