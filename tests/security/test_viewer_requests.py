"""Requests a hostile page or record can make of the viewer (cua_agent/viewer), sent to the real server
over HTTP: a DNS-rebound page (its own Host name on 127.0.0.1), a turn number that is a digit only to
str.isdigit, and a record whose drag and scroll fields carry markup. Each once answered (rollouts read by
another site), killed the request, or put the markup in the page."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from cua_agent.viewer.__main__ import make_server
from cua_agent.viewer.runs import Run
from tests.unit.test_viewer import episode, png

INJECTED = "1'/><script>alert(1)</script><x y='"


@pytest.fixture
def viewer(tmp_path: Path):
    drag = {**episode("aaaaaa01", "g1", 1.0)}
    drag["turns"] = [
        {**drag["turns"][0], "action": {"type": "drag", "x": 5, "y": 5, "to_x": 9, "to_y": INJECTED}}
    ]
    scroll = {**episode("aaaaaa02", "g1", 0.0)}
    scroll["turns"] = [
        {**scroll["turns"][0], "action": {"type": "scroll", "x": 5, "y": 5, "dx": "9" * 9, "dy": 1}}
    ]
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(drag) + "\n" + json.dumps(scroll) + "\n")
    for ep in ("aaaaaa01", "aaaaaa02"):
        (tmp_path / "screenshots" / ep).mkdir(parents=True)
        (tmp_path / "screenshots" / ep / "turn00.png").write_bytes(png(20, 20))
    run = Run(tmp_path)
    run.refresh()
    server = make_server(run, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def get(port: int, path: str, host: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace")
    conn.close()
    return resp.status, body


def test_a_page_of_another_site_rebound_to_127_0_0_1_is_refused(viewer: int):
    assert get(viewer, "/")[0] == 200
    assert get(viewer, "/", host=f"localhost:{viewer}")[0] == 200
    status, body = get(viewer, "/", host=f"attacker.example:{viewer}")
    assert status == 403 and "Host" in body
    from cua_agent.viewer.__main__ import host_allowed

    assert host_allowed("anything.example", "0.0.0.0", 80)  # every interface: warned at start instead


def test_a_turn_that_is_a_digit_only_to_isdigit_is_not_found_not_a_crash(viewer: int):
    for path in (
        "/turn?src=rollouts.jsonl&ep=aaaaaa01&turn=" + quote("²"),
        "/shot?src=rollouts.jsonl&ep=aaaaaa01&turn=" + quote("²"),
    ):
        assert get(viewer, path)[0] == 404
    assert get(viewer, "/turn?src=rollouts.jsonl&ep=aaaaaa01&turn=0")[0] == 200


def test_a_records_drag_and_scroll_fields_cannot_put_markup_in_the_page(viewer: int):
    for ep in ("aaaaaa01", "aaaaaa02"):
        status, page = get(viewer, f"/turn?src=rollouts.jsonl&ep={ep}&turn=0")
        assert status == 200 and "<script>" not in page, page[-500:]
    status, page = get(viewer, "/group?src=rollouts.jsonl&id=g1")
    assert status == 200 and "<script>" not in page
