"""Sandboxes spread over several Docker endpoints (sandbox.backends.multi).

The first half checks the placement/backoff/routing logic with in-memory fake endpoints (pure logic, no
containers). The slow half runs a real second podman engine next to the primary one and drives real boxes
on both through their Docker APIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends import make_backend
from sandbox.backends.multi import MultiBackend
from sandbox.base import Backend, Sandbox, SandboxSpec, owner_labels
from sandbox.errors import SandboxError, SandboxStartError
from sandbox.pool import SandboxPool
from tests.sandbox.owner_process import spawn_owner

REPO = Path(__file__).resolve().parents[2]
SPEC = SandboxSpec()


class _Capture(logging.Handler):
    """The warnings of sandbox.backends.multi, captured on that logger itself: pytest's caplog listens on
    the root logger, which AReaL's and Hydra's logging setup (imported by other tests in the same process)
    cut these records off from."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @contextlib.contextmanager
    def at_level(self, level: int, logger: str = "") -> Iterator[None]:
        yield


@pytest.fixture
def caplog() -> Iterator[_Capture]:
    from sandbox.backends import multi

    logger = multi.log  # the module's own object: a logging reset elsewhere may have replaced the name's
    capture = _Capture()
    saved = logger.disabled, logger.level
    logger.disabled = False
    logger.setLevel(logging.WARNING)
    logger.addHandler(capture)
    yield capture
    logger.removeHandler(capture)
    logger.disabled, logger.level = saved


# -- fake endpoints (logic only) ----------------------------------------------------------------------
class FakeClient:
    async def health(self, timeout: float = 5.0) -> dict[str, Any]:
        return {"ok": True}

    async def aclose(self) -> None:
        pass


class FakeEngine(Backend):
    """One endpoint; `down` makes every call fail like an engine that stopped answering. Box ids repeat
    across endpoints with `shared_ids` (box1, box2, ...), so that removal has to be routed to the right one
    (the pool itself needs ids unique across endpoints, as real container names are)."""

    name = "fake"

    def __init__(self, endpoint: str, run_id: str, shared_ids: bool = False) -> None:
        super().__init__(run_id)
        self.endpoint, self.down, self.starts, self.lists = endpoint, False, 0, 0
        self.prefix = "" if shared_ids else f"{endpoint}-"
        self.boxes: dict[str, dict[str, str]] = {}  # id -> labels
        self.exited: set[str] = set()  # boxes that ended and were not removed yet

    def _check(self) -> None:
        if self.down:
            raise ConnectionError(f"{self.endpoint} does not answer")

    async def start(self, spec: SandboxSpec) -> Sandbox:
        self.starts += 1
        self._check()
        box_id = f"{self.prefix}box{self.starts}"
        await asyncio.sleep(0.01)
        self.boxes[box_id] = owner_labels(self.run_id)
        return Sandbox(id=box_id, backend=self, client=FakeClient(), spec=spec)  # type: ignore[arg-type]

    def remove_sync(self, box_id: str) -> None:
        self._check()
        self.boxes.pop(box_id, None)

    def list_boxes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        self.lists += 1
        self._check()
        return [
            {"id": b, "labels": labels, "status": "exited" if b in self.exited else "running"}
            for b, labels in self.boxes.items()
            if run_id in (None, labels["cua.run_id"])
        ]


def fleet(
    *endpoints: str, engines: dict[str, FakeEngine] | None = None, run_id: str = "multi-run", **kw: Any
) -> tuple[MultiBackend, dict[str, FakeEngine]]:
    """A MultiBackend over fake engines; endpoints named dead* cannot even be connected to. `engines`:
    those of another fleet, i.e. another process on the same engines. Ties go to the first listed endpoint
    unless `tie_start` says otherwise, so that placements can be asserted."""
    shared_ids = kw.pop("shared_ids", False)
    kw.setdefault("tie_start", 0)
    if engines is None:
        engines = {ep: FakeEngine(ep, run_id, shared_ids) for ep in endpoints if not ep.startswith("dead")}

    def connect(ep: str, rid: str) -> Backend:
        assert rid == run_id  # every endpoint labels its boxes with the one run id
        if ep not in engines:
            raise ConnectionError(f"cannot connect to {ep}")
        return engines[ep]

    return MultiBackend(list(endpoints), connect, name="fake", run_id=run_id, **kw), engines


def _pool(backend: Backend, **kw: Any) -> SandboxPool:
    kw.setdefault("reap_orphans", False)
    return SandboxPool(backend, SPEC, install_handlers=False, **kw)


def _counts(engines: dict[str, FakeEngine]) -> dict[str, int]:
    return {ep: len(e.boxes) for ep, e in engines.items()}


async def test_boxes_go_to_the_least_loaded_endpoint_and_are_removed_where_they_live():
    mb, eng = fleet("a", "b", "c")
    async with _pool(mb, max_size=6) as pool:
        boxes = await asyncio.gather(*(pool.acquire() for _ in range(6)))  # concurrent starts spread too
        assert _counts(eng) == {"a": 2, "b": 2, "c": 2} == mb.loads()
        assert all(sb.id in eng[sb.meta["endpoint"]].boxes for sb in boxes)
        for sb in [sb for sb in boxes if sb.meta["endpoint"] == "b"]:
            await pool.release(sb, broken=True)
        assert _counts(eng) == {"a": 2, "b": 0, "c": 2} == mb.loads()
        refill = await asyncio.gather(pool.acquire(), pool.acquire())
        assert [sb.meta["endpoint"] for sb in refill] == ["b", "b"]
        for sb in [sb for sb in boxes if sb.meta["endpoint"] != "b"] + refill:
            await pool.release(sb)
    assert _counts(eng) == {"a": 0, "b": 0, "c": 0} == mb.loads()


async def test_another_processs_boxes_count_as_load_so_this_processs_next_boxes_go_elsewhere():
    """Ranks sharing the endpoints: each must see the boxes the others already run there."""
    now = [0.0]
    _, eng = fleet("a", "b")
    for i in range(3):  # another trainer rank's boxes (another run id), already running on a
        eng["a"].boxes[f"other-{i}"] = owner_labels("another-rank")
    eng["b"].boxes["ended"] = owner_labels("another-rank")
    eng["b"].exited.add("ended")  # a box that ended holds nothing
    mb, _ = fleet("a", "b", engines=eng, clock=lambda: now[0])
    boxes = [await mb.start(SPEC) for _ in range(3)]
    assert [sb.meta["endpoint"] for sb in boxes] == ["b", "b", "b"]
    assert mb.loads() == {"a": 3, "b": 3}
    for i in range(3):  # the other rank ends its boxes; seen once the listing is a second old
        eng["a"].boxes.pop(f"other-{i}")
    now[0] = 1.5
    more = await asyncio.gather(*(mb.start(SPEC) for _ in range(3)))
    assert [sb.meta["endpoint"] for sb in more] == ["a", "a", "a"]
    for sb in boxes + list(more):
        await sb.close()


async def test_concurrent_starts_list_each_engine_once_a_second_not_once_per_start():
    now = [0.0]
    mb, eng = fleet("a", "b", clock=lambda: now[0])
    boxes = list(await asyncio.gather(*(mb.start(SPEC) for _ in range(8))))
    assert _counts(eng) == {"a": 4, "b": 4} and (eng["a"].lists, eng["b"].lists) == (1, 1)
    now[0] = 0.9
    boxes.append(await mb.start(SPEC))
    assert (eng["a"].lists, eng["b"].lists) == (1, 1)
    now[0] = 2.0
    boxes.append(await mb.start(SPEC))
    assert (eng["a"].lists, eng["b"].lists) == (2, 2)
    for sb in boxes:
        await sb.close()


async def test_ties_do_not_always_go_to_the_first_listed_endpoint():
    """Each process breaks ties from its own endpoint: ranks starting their first boxes at once spread."""
    firsts = set()
    for _ in range(40):  # 40 processes' first boxes all on one endpoint: a chance of 2 in 2**40
        mb, _ = fleet("a", "b", tie_start=None)
        firsts.add((await mb.start(SPEC)).meta["endpoint"])
    assert firsts == {"a", "b"}


async def test_ties_go_to_the_first_listed_endpoint_and_removal_is_routed():
    mb, eng = fleet("a", "b", shared_ids=True)
    sb = await mb.start(SPEC)
    assert sb.meta["endpoint"] == "a" and sb.backend is mb
    sb2 = await mb.start(SPEC)
    assert sb2.meta["endpoint"] == "b" and sb2.id == sb.id == "box1"  # same id on both endpoints
    await sb2.close()
    assert set(eng["a"].boxes) == {"box1"} and eng["b"].boxes == {}
    await sb.close()
    assert _counts(eng) == {"a": 0, "b": 0}


async def test_failing_endpoint_is_skipped_with_backoff_and_logged_then_used_again(caplog):
    now = [0.0]
    mb, eng = fleet("a", "b", backoff_s=5, clock=lambda: now[0])
    eng["a"].down = True
    with caplog.at_level(logging.WARNING, logger="sandbox.backends.multi"):
        boxes = [await mb.start(SPEC) for _ in range(3)]
        assert [sb.meta["endpoint"] for sb in boxes] == ["b", "b", "b"]
        assert eng["a"].starts == 1  # tried once, then skipped while backing off
        assert "sandbox endpoint a: start failed" in caplog.text and "skipping it for 5.0 s" in caplog.text
        now[0] = 5.0
        boxes.append(await mb.start(SPEC))  # a is due again, still down: backoff doubles, b takes the box
        assert eng["a"].starts == 2 and boxes[-1].meta["endpoint"] == "b"
        assert "skipping it for 10.0 s" in caplog.text
        eng["a"].down = False
        now[0] = 14.9
        boxes.append(await mb.start(SPEC))
        assert eng["a"].starts == 2 and boxes[-1].meta["endpoint"] == "b"
    now[0] = 15.0
    back = await mb.start(SPEC)  # recovered and least loaded
    assert back.meta["endpoint"] == "a" and mb.loads() == {"a": 1, "b": 5}
    eng["a"].down = True
    now[0] = 16.0
    boxes.append(await mb.start(SPEC))  # a success reset the backoff: the next failure waits 5 s again
    assert boxes[-1].meta["endpoint"] == "b" and caplog.text.count("skipping it for 5.0 s") == 2
    eng["a"].down = False
    for sb in [*boxes, back]:
        await sb.close()
    assert _counts(eng) == {"a": 0, "b": 0}


async def test_every_endpoint_failing_is_a_start_error_naming_each_and_they_are_still_tried():
    mb, eng = fleet("a", "b", backoff_s=30)
    eng["a"].down = eng["b"].down = True
    with pytest.raises(SandboxStartError, match=r"a: a does not answer; b: b does not answer"):
        await mb.start(SPEC)
    # All backing off: tried anyway (soonest due first) rather than failing the acquire untried.
    eng["b"].down = False
    sb = await mb.start(SPEC)
    assert sb.meta["endpoint"] == "b" and (eng["a"].starts, eng["b"].starts) == (2, 2)
    assert mb.loads() == {"a": 0, "b": 1}  # failed starts leave no phantom load
    await sb.close()


async def test_unreachable_endpoint_breaks_neither_construction_nor_reaping_nor_close(caplog):
    mb, eng = fleet("a", "dead", "b")  # construction connects nothing
    orphan = {**owner_labels("old-run"), "cua.owner_pid": "999999999", "cua.owner_start": "1"}
    eng["a"].boxes["orphan-a"] = dict(orphan)
    eng["b"].boxes["orphan-b"] = dict(orphan)
    eng["b"].boxes["alive-b"] = owner_labels("another-live-run")
    pool = _pool(mb, max_size=2, reap_orphans=True)
    with caplog.at_level(logging.WARNING, logger="sandbox.backends.multi"):
        await pool.start()
    assert "sandbox endpoint dead: reaping failed" in caplog.text
    assert pool.stats["reaped"] == 2 and set(eng["a"].boxes) == set() and set(eng["b"].boxes) == {"alive-b"}
    boxes = [await pool.acquire(), await pool.acquire()]
    assert [sb.meta["endpoint"] for sb in boxes] == ["a", "a"]  # b runs another live run's box
    listed = mb.list_boxes(run_id=mb.run_id)
    assert sorted((b["endpoint"], b["id"]) for b in listed) == sorted(
        (sb.meta["endpoint"], sb.id) for sb in boxes
    )
    # A start cut short leaves a labelled box this process never saw: close finds it by label.
    eng["b"].boxes["cut-short"] = owner_labels(mb.run_id)
    await pool.close()
    assert set(eng["a"].boxes) == set() and set(eng["b"].boxes) == {"alive-b"}


def test_listing_and_reaping_fail_only_when_no_endpoint_answers():
    mb, eng = fleet("a", "dead")
    eng["a"].boxes["x"] = owner_labels("r")
    assert [(b["endpoint"], b["id"]) for b in mb.list_boxes()] == [("a", "x")]
    eng["a"].down = True  # e.g. a preflight check can still tell that nothing is reachable
    with pytest.raises(
        SandboxError, match=r"listing boxes: no endpoint answered: a: .*; dead: cannot connect"
    ):
        mb.list_boxes()
    with pytest.raises(SandboxError, match=r"reaping: no endpoint answered"):
        mb.reap()


async def test_one_endpoint_failing_to_remove_does_not_stop_cleanup_of_the_others():
    mb, eng = fleet("a", "b")
    pool = _pool(mb, max_size=2)
    await pool.start()
    await pool.acquire()
    await pool.acquire()
    eng["a"].down = True
    await pool.close()  # a's removal fails (logged by the pool), b's box still goes
    assert _counts(eng) == {"a": 1, "b": 0} and mb.loads() == {"a": 0, "b": 0}


# -- construction and validation (no engine contacted) -----------------------------------------------
def test_several_hosts_make_a_lazy_multibackend():
    hosts = ["unix:///run/cua/none-1.sock", "tcp://127.0.0.1:1", "unix:///run/cua/none-2.sock"]
    mb = make_backend("docker", docker_hosts=hosts, run_id="r")
    assert isinstance(mb, MultiBackend) and mb.name == "docker" and mb.endpoints == hosts and mb.run_id == "r"


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (["http://host:2375"], r"docker_hosts\[0\]: scheme must be one of"),
        ([""], r"docker_hosts\[0\]: scheme"),
        (["unix://run/podman.sock"], r"docker_hosts\[0\]: expected unix:///absolute/path"),
        (["unix:///a.sock", "tcp://localhost"], r"docker_hosts\[1\]: expected tcp://127.0.0.1:port"),
        # engines elsewhere cannot bind-mount the control folder made here; tcp:// would also carry root in clear
        (
            ["unix:///a.sock", "tcp://nodeb:2375"],
            r"docker_hosts\[1\]: 'tcp://nodeb:2375' is an engine on another",
        ),
        (["tcp://10.0.0.2:2376"], r"docker_hosts\[0\]: .* must run on this machine .* unencrypted"),
        (["ssh://user@nodeb"], r"docker_hosts\[0\]: 'ssh://user@nodeb': ssh:// engines are not supported"),
        (
            ["unix:///run/a.sock", "unix:///run/x/../a.sock"],
            r"docker_hosts\[1\]: .* same endpoint as docker_hosts\[0\]",
        ),
        (
            ["tcp://LOCALHOST:1", "tcp://localhost:1/"],
            r"docker_hosts\[1\]: .* same endpoint as docker_hosts\[0\]",
        ),
    ],
)
def test_bad_docker_hosts_name_the_entry(hosts, message):
    with pytest.raises(ValueError, match=message):
        make_backend("docker", docker_hosts=hosts)


def test_a_remote_docker_host_in_the_environment_is_refused_naming_it(monkeypatch):
    from sandbox.backends.docker import DockerBackend

    monkeypatch.setenv("DOCKER_HOST", "tcp://nodeb:2375")
    with pytest.raises(
        ValueError, match=r"DOCKER_HOST\[0\]: 'tcp://nodeb:2375' is an engine on another machine"
    ):
        DockerBackend()


def test_machines_sharing_a_home_folder_keep_their_control_folders_apart(monkeypatch, tmp_path):
    """Every node's default engine has the same URL: a node's reaping must never reach another's folders."""
    from sandbox.backends import docker as docker_backend

    monkeypatch.setenv("CUA_HOME", str(tmp_path))  # one home, as on NFS
    folders = set()
    for node in ("node-a", "node-b"):
        monkeypatch.setattr(docker_backend.socket, "gethostname", lambda node=node: node)
        folders.add(docker_backend.DockerBackend(docker_host="unix:///run/cua/podman.sock").run_dir)
    assert len(folders) == 2 and all(f.parent == tmp_path / "sandbox" / "run" for f in folders)


def test_docker_hosts_only_for_docker():
    with pytest.raises(ValueError, match="docker_hosts: only for the docker backend"):
        make_backend("local", docker_hosts=["unix:///a.sock"])
    with pytest.raises(ValueError, match="docker_hosts or docker_host"):
        make_backend("docker", docker_hosts=["unix:///a.sock"], docker_host="unix:///b.sock")


def test_config_field_loads_from_yaml_and_overrides(tmp_path):
    import yaml
    from areal.api.cli_args import load_expr_config

    from cua_agent.config import CUAGRPOConfig

    for name in ("local_cpu.yaml", "cua_grpo.yaml"):  # present, so overrides need no "+"
        assert yaml.safe_load((REPO / "configs" / name).read_text())["sandbox"]["docker_hosts"] == []
    hosts = ["unix:///run/cua/podman.sock", "unix:///run/cua/podman2.sock"]
    argv = ["--config", str(REPO / "configs" / "cua_grpo.yaml"), f"cluster.fileroot={tmp_path}"]
    argv += [f"sandbox.docker_hosts=[{','.join(hosts)}]"]
    assert load_expr_config(argv, CUAGRPOConfig)[0].sandbox.docker_hosts == hosts


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"docker_hosts": ["unix:///a.sock", "unix:///a.sock"]},
            r"^sandbox\.docker_hosts\[1\]: .*same endpoint",
        ),
        ({"docker_hosts": ["podman.sock"]}, r"^sandbox\.docker_hosts\[0\]: scheme"),
        (
            {"docker_hosts": ["unix:///a.sock"], "backend": "local"},
            r"^sandbox\.docker_hosts: only for sandbox.backend",
        ),
    ],
)
def test_config_errors_name_the_field(fields, message):
    from cua_agent.config import ConfigError, SandboxConfig

    with pytest.raises(ConfigError, match=message):
        SandboxConfig(**fields)


# -- two real podman engines (the second: tests/sandbox/second_engine.py) -------------------------------


@pytest.fixture(scope="module")
def engines(second_engine: str) -> Iterator[dict[str, Any]]:
    """Both endpoints with a plain backend each, to look at every engine through its own API."""
    from sandbox.backends.docker import DockerBackend, default_docker_host

    probes = {
        url: DockerBackend(run_id="pytest-probe", docker_host=url)
        for url in (default_docker_host(), second_engine)
    }
    yield probes
    for probe in probes.values():
        probe.close()


def _ids(probe: Any, run_id: str) -> set[str]:
    return {b["id"] for b in probe.list_boxes(run_id=run_id)}


@contextlib.asynccontextmanager
async def _boxes_of_another_owner(engines: dict[str, Any], counts: dict[str, int]) -> AsyncIterator[None]:
    """`counts[url]` sleeping containers on each engine, labelled as boxes of another live owner (this test
    process, under another run id): load that a MultiBackend must count."""
    made = []
    try:
        for url, n in counts.items():
            for _ in range(n):
                run = engines[url].docker.containers.run
                made.append(
                    await asyncio.to_thread(
                        run,
                        SPEC.image,
                        entrypoint=["sleep", "600"],
                        detach=True,
                        network_mode="none",
                        labels=owner_labels(f"pytest-multi-other-{os.getpid()}"),
                    )
                )
        for c in made:
            await asyncio.to_thread(c.reload)
            assert c.status == "running", c.status  # load only while it runs
        yield
    finally:
        for c in made:
            await asyncio.to_thread(c.remove, force=True)


async def _levelled(engines: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[None]:
    """Boxes of another owner that even out what other live runs (e.g. another test session) hold on the
    engines, so that a new owner's first box on each engine is one box per engine."""
    probe = MultiBackend(list(engines), lambda url, _: engines[url], name="docker", run_id="pytest-level")
    load = await asyncio.to_thread(probe.loads)
    return _boxes_of_another_owner(engines, {url: max(load.values()) - n for url, n in load.items()})


async def _owner_of_a_box_on_each(engines: dict[str, Any], run_id: str) -> tuple[subprocess.Popen, list[str]]:
    """An owner process (tests/sandbox/owner_process.py) with one box on each engine. Its pool places them by
    the engines' load, which counts every live process's boxes: boxes of the other test worker that come or
    go on the primary engine between the levelling and the owner's starts put both on one engine (CI, once).
    Such an owner is killed, its boxes removed, and another started (the next test checks placement)."""
    for _ in range(4):
        async with await _levelled(engines):
            proc, box_ids = await asyncio.to_thread(spawn_owner, "docker", run_id, list(engines))
        placed = [_ids(probe, run_id) for probe in engines.values()]
        if [len(ids) for ids in placed] == [1, 1] and set().union(*placed) == set(box_ids):
            return proc, box_ids
        proc.kill()
        proc.wait()
        for probe, ids in zip(engines.values(), placed, strict=True):
            for box_id in ids:
                await asyncio.to_thread(probe.remove_sync, box_id)
    raise AssertionError(
        f"4 owners in a row did not have one box on each engine; the last: {box_ids}, {placed}"
    )


@pytest.mark.slow
async def test_pool_spreads_real_boxes_over_two_engines_skips_a_dead_one_and_removes_all(engines, caplog):
    primary, second = engines
    dead = f"unix:///run/cua/no-engine-{os.getpid()}.sock"
    run_id = f"pytest-multi-{os.getpid()}"
    backend = make_backend("docker", docker_hosts=[primary, dead, second], run_id=run_id)
    pool = SandboxPool(backend, SandboxSpec(), max_size=4, install_handlers=False)
    with caplog.at_level(logging.WARNING, logger="sandbox.backends.multi"):
        async with pool:
            before = await asyncio.to_thread(backend.loads)  # other live runs' boxes count (other sessions)
            boxes = await asyncio.gather(*(pool.acquire(timeout=180) for _ in range(4)))
            by_engine = {url: _ids(probe, run_id) for url, probe in engines.items()}
            assert by_engine == {
                url: {sb.id for sb in boxes if sb.meta["endpoint"] == url} for url in engines
            }
            assert sum(len(ids) for ids in by_engine.values()) == 4  # none on the dead endpoint
            # Balanced: no box went to an engine more loaded than another (both 2 when nothing else runs).
            total = {url: before[url] + len(ids) for url, ids in by_engine.items()}
            assert max(total[url] for url, ids in by_engine.items() if ids) - 1 <= min(total.values()), before
            # Reaping each engine (no orphans here) must not touch the live boxes' socket folders.
            assert await asyncio.to_thread(backend.reap) == []
            assert all(Path(sb.meta["socket"]).exists() for sb in boxes)  # new connections still possible
            for i, sb in enumerate(boxes):  # each one works through its own control socket
                result, png = await sb.step({"type": "move", "x": 10 + i, "y": 20}, max_width=320)
                assert result["pointer"] == [10 + i, 20] and png.startswith(b"\x89PNG")
            for sb in boxes:
                await pool.release(sb)
    assert f"sandbox endpoint {dead}: reaping failed" in caplog.text
    for url, probe in engines.items():
        assert _ids(probe, run_id) == set(), url
        assert not any((probe.run_dir / sb.id).exists() for sb in boxes)


@pytest.mark.slow
@pytest.mark.parametrize("reaper", ["next pool", "reap script"])
async def test_sigkilled_owner_of_boxes_on_both_engines_is_reaped_on_both(reaper, engines):
    hosts = list(engines)
    run_id = f"pytest-multi-orphan-{reaper.replace(' ', '-')}-{os.getpid()}"
    proc, box_ids = await _owner_of_a_box_on_each(engines, run_id)
    # Any process's pool reaps orphans when it starts: on the primary engine the other test worker's (its
    # trainer ranks) can get there first. Only this unit uses the second engine, so its orphan must wait for
    # the reaper under test, and be named by it.
    primary, second = engines.values()
    [on_second] = _ids(second, run_id)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _ids(second, run_id) == {on_second} and len(_ids(primary, run_id)) <= 1  # orphans now
    if reaper == "next pool":
        pool = SandboxPool(
            make_backend("docker", docker_hosts=hosts, run_id="pytest-reaper"), install_handlers=False
        )
        await pool.start()
        await pool.close()
    else:
        args = [a for h in hosts for a in ("--docker-host", h)]
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(REPO / "scripts" / "reap_sandboxes.py"), "--backend", "docker", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        assert on_second in out.stdout, out.stdout
    for url, probe in engines.items():
        assert _ids(probe, run_id) == set(), url
        assert not any((probe.run_dir / b).exists() for b in box_ids)  # socket folders too


@pytest.mark.slow
async def test_sigterm_removes_the_owners_boxes_on_both_engines(engines):
    run_id = f"pytest-multi-term-{os.getpid()}"
    proc, box_ids = await _owner_of_a_box_on_each(engines, run_id)
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 60) == -signal.SIGTERM
    assert [_ids(probe, run_id) for probe in engines.values()] == [set(), set()]
    assert not any((probe.run_dir / b).exists() for probe in engines.values() for b in box_ids)


@pytest.mark.slow
def test_one_host_is_the_plain_docker_backend(engines):
    from sandbox.backends.docker import DockerBackend

    for url in engines:
        backend = make_backend("docker", docker_hosts=[url])
        assert type(backend) is DockerBackend and backend.docker_host == url
        backend.close()


@pytest.mark.slow
async def test_boxes_of_another_process_on_an_engine_send_the_next_real_box_to_the_other(engines):
    """Load read from the engines themselves: containers of another live owner on the second engine (plain
    sleeping containers with its labels) make this process's next box start on the primary, though the
    second is listed first and this process has no box anywhere."""
    from sandbox.backends.docker import DockerBackend

    primary, second = engines
    run_id = f"pytest-multi-load-{os.getpid()}"
    backend = MultiBackend(
        [second, primary],
        lambda host, rid: DockerBackend(run_id=rid, docker_host=host),
        name="docker",
        run_id=run_id,
        tie_start=0,  # ties to the second engine: only the load counted on the engines can avoid it
    )
    try:
        load = await asyncio.to_thread(backend.loads)
        # the second engine: 2 boxes more than the primary runs, whatever else runs there
        async with _boxes_of_another_owner(engines, {second: load[primary] - load[second] + 2}):
            await asyncio.sleep(backend.listing_ttl_s)  # the next start lists the engines again
            sb = await backend.start(SPEC)
            try:
                assert sb.meta["endpoint"] == primary
                assert _ids(engines[primary], run_id) == {sb.id} and _ids(engines[second], run_id) == set()
            finally:
                await sb.close()
    finally:
        backend.close()
