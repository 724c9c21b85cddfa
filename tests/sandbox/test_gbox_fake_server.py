"""The fake GBox server against the real gbox-sdk: request shapes, strict response models, faults, cleanup."""

from __future__ import annotations

import base64
import io
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import gbox_sdk
import pytest
from gbox_sdk.types.v1 import LinuxBox
from PIL import Image

from tests.sandbox.gbox_fake import FakeGbox, start_fake_gbox

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sandbox_setup) -> Iterator[FakeGbox]:
    fake = start_fake_gbox(tmp_path_factory.mktemp("gbox"))
    yield fake
    fake.stop()  # when the SIGTERM test did not run (or failed early)


@pytest.fixture(scope="module")
async def box(server: FakeGbox) -> AsyncIterator[LinuxBox]:
    async with server.client() as gbox:
        created = await gbox.v1.boxes.create_linux(
            config={"labels": {"cua.run_id": "t1"}, "expiresIn": "10m"}, api_timeout="60s"
        )
    yield created
    if server.proc.poll() is None:
        async with server.client() as gbox:
            await gbox.v1.boxes.terminate(created.id)


@pytest.mark.timeout(300)
async def test_create_get_list_display(server: FakeGbox, box: LinuxBox) -> None:
    assert box.status == "running" and box.type == "linux"
    assert box.config.labels == {"cua.run_id": "t1"}
    assert box.expires_at is not None and box.expires_at > box.created_at
    async with server.client() as gbox:
        got = await gbox.v1.boxes.retrieve(box.id)
        assert isinstance(got, LinuxBox) and got.id == box.id and got.status == "running"
        listed = await gbox.v1.boxes.list(labels={"cua.run_id": "t1"}, status=["running", "pending"])
        assert [b.id for b in listed.data] == [box.id] and listed.total == 1
        assert (await gbox.v1.boxes.list(labels={"cua.run_id": "other"})).total == 0
        display = await gbox.v1.boxes.display(box.id)
        assert (display.resolution.width, display.resolution.height) == (1280, 800)


@pytest.mark.timeout(300)
async def test_screenshot_is_a_png_of_the_screen(server: FakeGbox, box: LinuxBox) -> None:
    async with server.client() as gbox:
        shot = await gbox.v1.boxes.actions.screenshot(box.id)
        prefix = "data:image/png;base64,"
        assert shot.uri.startswith(prefix)
        img = Image.open(io.BytesIO(base64.b64decode(shot.uri[len(prefix) :])))
        assert img.format == "PNG" and img.size == (1280, 800)
        clipped = await gbox.v1.boxes.actions.screenshot(
            box.id, clip={"x": 10, "y": 20, "width": 100, "height": 50}
        )
        img = Image.open(io.BytesIO(base64.b64decode(clipped.uri[len(prefix) :])))
        assert img.size == (100, 50)


@pytest.mark.timeout(300)
async def test_actions_are_performed_and_logged(server: FakeGbox, box: LinuxBox) -> None:
    async with server.client() as gbox, server.fake() as fake:
        clicked = await gbox.v1.boxes.actions.click(box.id, x=100, y=120)
        assert clicked.message == "success" and clicked.action_id
        await gbox.v1.boxes.actions.press_key(box.id, keys=["control", "a"], combination=True)
        with pytest.raises(gbox_sdk.BadRequestError):
            await gbox.v1.boxes.actions.press_key(box.id, keys=["Enter"])  # type: ignore[list-item]
        log = (await fake.get(f"/_fake/boxes/{box.id}/actions")).json()["actions"]
        assert [a["name"] for a in log] == ["click", "press-key"]
        assert log[1]["body"] == {"keys": ["control", "a"], "combination": True}


@pytest.mark.timeout(300)
async def test_commands_see_the_display_and_time_out(server: FakeGbox, box: LinuxBox) -> None:
    async with server.client() as gbox:
        out = await gbox.v1.boxes.execute_commands(box.id, command='echo $DISPLAY; python3 -c "import mss"')
        assert out.exit_code == 0, out.stderr
        assert out.stdout.strip().startswith(":")
        start = time.monotonic()
        slow = await gbox.v1.boxes.execute_commands(
            box.id, command="echo started; sleep 20", api_timeout="1s"
        )
        assert slow.exit_code == 124 and slow.stdout == "started\n"
        assert time.monotonic() - start < 10


@pytest.mark.timeout(300)
async def test_file_round_trip(server: FakeGbox, box: LinuxBox) -> None:
    path = f"{box.config.working_dir}/sub/dir/note.txt"
    async with server.client() as gbox:
        written = await gbox.v1.boxes.fs.write(box.id, path=path, content="hello gbox")
        assert written.path == path and written.size == "10"
        assert (await gbox.v1.boxes.fs.read(box.id, path=path)).content == "hello gbox"
        await gbox.v1.boxes.fs.write(box.id, path="bin.dat", content=b"raw bytes")  # multipart
        assert (await gbox.v1.boxes.fs.read(box.id, path="bin.dat")).content == "raw bytes"
        with pytest.raises(gbox_sdk.PermissionDeniedError):
            await gbox.v1.boxes.fs.read(box.id, path="/etc/hostname")


@pytest.mark.timeout(300)
async def test_errors(server: FakeGbox) -> None:
    async with server.client() as gbox, server.client(key="wrong-key") as intruder:
        with pytest.raises(gbox_sdk.NotFoundError):
            await gbox.v1.boxes.retrieve("no-such-box")
        with pytest.raises(gbox_sdk.AuthenticationError) as err:
            await intruder.v1.boxes.list()
        assert err.value.body == {"statusCode": 401, "message": "Unauthorized", "error": "Unauthorized"}
        with pytest.raises(gbox_sdk.BadRequestError):
            await gbox.v1.boxes.create_linux(api_timeout="soon")


@pytest.mark.timeout(300)
async def test_terminate_keeps_the_box_readable(server: FakeGbox, box: LinuxBox) -> None:
    async with server.client() as gbox:
        await gbox.v1.boxes.terminate(box.id)
        assert (await gbox.v1.boxes.retrieve(box.id)).status == "terminated"
        await gbox.v1.boxes.terminate(box.id)  # again: still fine
        with pytest.raises(gbox_sdk.NotFoundError):  # 404, never the retried 409
            await gbox.v1.boxes.actions.click(box.id, x=1, y=1)
        assert not (server.state_dir / Path(box.config.working_dir).parent.name).exists()


@pytest.mark.timeout(300)
async def test_create_timeout_is_408_and_leaves_no_box(server: FakeGbox) -> None:
    async with server.client() as gbox, server.fake() as fake:
        await fake.post("/_fake/faults", json={"create_delay_s": 5})
        try:
            with pytest.raises(gbox_sdk.APIStatusError) as err:
                await gbox.v1.boxes.create_linux(config={"labels": {"cua.run_id": "t408"}}, api_timeout="1s")
        finally:
            await fake.post("/_fake/faults", json={"create_delay_s": 0})
        assert err.value.status_code == 408
        assert (await gbox.v1.boxes.list(labels={"cua.run_id": "t408"})).total == 0
        boxes = (await fake.get("/_fake/boxes")).json()["boxes"]
        assert not [b for b in boxes if b["status"] in ("running", "pending")]
        assert any(b["deleted"] for b in boxes)


@pytest.mark.timeout(300)
async def test_sigterm_terminates_every_box(server: FakeGbox) -> None:
    async with server.client() as gbox:
        created = await gbox.v1.boxes.create_linux(api_timeout="60s")
        out = await gbox.v1.boxes.execute_commands(
            created.id, command="nohup sleep 600 >/dev/null 2>&1 & echo $!"
        )
        background = int(out.stdout)
    assert _alive(background)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(60) == 0
    assert not _alive(background)
    assert not any(server.state_dir.iterdir()), list(server.state_dir.iterdir())
