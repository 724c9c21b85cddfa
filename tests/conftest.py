"""Session-wide fixtures: real vLLM CPU servers (started once, shared), test artefact directory."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from cua_agent.openmp import sleep_while_waiting

sleep_while_waiting()  # the suite's own torch (references) shares the cores with servers and trainers, as they do

from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS, WARM_MODEL, VLLMProcess, start_vllm  # noqa: E402
from tests.sandbox.second_engine import second_engine  # noqa: E402, F401  (a session fixture: a second podman engine)

# What the tests hand to boxes and images (an R2E-style repository's own hidden tests among them): not ours.
collect_ignore = ["fixtures"]
SERVER_START_TIMEOUT_S = float(os.environ.get("CUA_TEST_VLLM_TIMEOUT", "400"))

# The suite's time budget: a run that takes longer fails, so a slow creep shows up long before CI's
# 90-minute limit stops anything from landing. On two workers the whole suite took 37 to 42 minutes on one
# 2-core machine and 54 to 60 on slower ones or busier hosts (docs/setup.md): the budget leaves room for them.
SUITE_BUDGET_S = float(os.environ.get("CUA_SUITE_BUDGET_S", str(75 * 60)))


def cpu_probe_s() -> float:
    """Seconds `sum(range(10**8))` takes on one core here, from the best of 3 runs of a tenth of it: the
    same code's suite time differs by machine and by how busy the host is (docs/setup.md), so each run
    says what speed it had."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        sum(range(10**7))
        best = min(best, time.perf_counter() - start)
    return best * 10


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # before xdist starts its workers (its hook runs last)
        session.config.stash[_PROBE_START] = cpu_probe_s()
        session.config.pluginmanager.register(BudgetWatch(session), BudgetWatch.NAME)
    session.config.stash[_STARTED] = time.monotonic()


class BudgetWatch:
    """In the controller: a failure is named the moment it is known, and no new work starts once the
    budget is spent; a run that CI stops at its limit prints no summary, and what failed would be lost."""

    NAME = "cua-budget-watch"

    def __init__(self, session: pytest.Session) -> None:
        self.session, self.stopping = session, False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        config = self.session.config
        if report.failed and config.option.verbose <= 0:  # -v names every result already
            crash = getattr(report.longrepr, "reprcrash", None)
            why = crash.message.splitlines()[0][:200] if crash and crash.message else ""
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter._tw.width_of_current_line:  # after progress dots (xdist's are not pytest's own)
                reporter._tw.line()
            what = "FAILED" if report.when == "call" else "ERROR"  # as pytest's summary says it
            reporter.write_line(
                f"{what} {report.nodeid} ({report.when}, {report.duration:.0f} s): {why}", red=True
            )
        if not self.stopping and time.monotonic() - config.stash[_STARTED] > SUITE_BUDGET_S:
            self.stopping = True
            why = f"the suite's budget of {SUITE_BUDGET_S:.0f} s (CUA_SUITE_BUDGET_S) is spent: no new test starts"
            dsession = config.pluginmanager.get_plugin("dsession")  # xdist's controller, with workers
            if dsession is not None:
                dsession.shouldstop = why  # each worker ends the unit it holds, then the summary prints
            else:
                self.session.shouldstop = why


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the budget is the whole run's
        return
    took = time.monotonic() - session.config.stash[_STARTED]
    session.config.stash[_TOOK] = took
    session.config.stash[_PROBE_END] = cpu_probe_s()  # the workers are done: an idle machine again
    if took > SUITE_BUDGET_S:
        session.config.stash[_OVER] = took
        if (
            exitstatus == pytest.ExitCode.OK
            or session.config.pluginmanager.get_plugin(BudgetWatch.NAME).stopping
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a failure, not pytest's "interrupted"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if (took := config.stash.get(_TOOK, None)) is not None:
        terminalreporter.write_line(
            f"suite: {took:.0f} s ({took / 60:.1f} min); CPU probe (sum(range(10**8)), one core):"
            f" {config.stash[_PROBE_START]:.2f} s before it, {config.stash[_PROBE_END]:.2f} s after it"
        )
    if (took := config.stash.get(_OVER, None)) is not None:
        terminalreporter.write_line(
            f"FAILED: the suite took {took:.1f} s ({took / 60:.1f} min), over its budget of {SUITE_BUDGET_S:.0f} s"
            " (CUA_SUITE_BUDGET_S): make it faster where it repeats work (the slowest tests are listed"
            " above) before CI's 90-minute limit stops submissions from landing",
            red=True,
            bold=True,
        )


_STARTED = pytest.StashKey[float]()
_TOOK = pytest.StashKey[float]()
_OVER = pytest.StashKey[float]()
_PROBE_START = pytest.StashKey[float]()
_PROBE_END = pytest.StashKey[float]()


# `make test` runs the suite on two pytest-xdist workers: a real-component test leaves a core idle about a
# quarter of its time (one rank importing AReaL, a box booting, a server waiting), and two at once took
# 292 s where one after the other took ~430 (2 cores). A work unit runs on one worker: a module (its tests
# share module fixtures: boxes, a trained run), each test of a PER_TEST module, or a shared unit: the
# modules that name one of its fixtures (some get theirs by name: getfixturevalue), and the PER_TEST tests
# that take one.
SHARED_UNITS = {
    # One Ray cluster on the second podman engine at a time: a test lists every box of that engine, and
    # every Ray trainer process of the machine.
    # Also tests that start boxes in bursts on the main engine (BOXES_IN_BURSTS): the multi-endpoint tests
    # check that boxes are spread by each engine's load, which such a burst changes under them.
    "engine2": ("second_engine", "BOXES_IN_BURSTS"),
    "office": ("office_image", "office_pool"),  # one worker builds the image on first use
    # Servers on one worker only (one holds ~2.4 GB): the tests of the Qwen3-VL and the warm start's.
    "qwen3-vl": ("qwen3_vl_servers", "qwen3_vl_lora_server", "qwen3_vl_rollout_engine"),
    "warm-start": ("warm_server",),
}
PER_TEST = ("tests/rehearsal/",)  # each rehearsal starts its own runs: nothing shared to keep together
# The longest units first (measured, 2 cores), so that the other worker plays the short ones meanwhile
# rather than both ending on a long one.
LONGEST_FIRST = (
    "engine2",
    "warm-start",
    "qwen3-vl",
    "tests/deploy/test_cpu_stack.py",
    "office",
    "tests/training/test_faults_training.py",
    "tests/training/test_resume.py",
    "tests/rehearsal/test_rehearsals.py::test_cua_grpo_with_mixed_gui_and_repository_rows",
    "tests/rehearsal/test_rehearsals.py::test_cua_grpo_single_gpu",
)


@functools.cache
def work_unit(nodeid: str) -> str:
    module, _, test = nodeid.partition("::")
    name = test.split("[")[0]
    text = _source(module)
    if module.startswith(PER_TEST):  # the test's own parameters: the fixtures it takes
        signature = re.search(rf"def {re.escape(name)}\((.*?)\)", text, re.S)
        text = signature.group(1) if signature else ""
    for unit, fixtures in SHARED_UNITS.items():
        if any(re.search(rf"\b{f}\b", text) for f in fixtures):
            return unit
    return f"{module}::{name}" if module.startswith(PER_TEST) else module


@functools.cache
def _source(module: str) -> str:
    return (Path(__file__).resolve().parents[1] / module).read_text()


class WorkUnitScheduling(LoadScopeScheduling):
    """xdist's scheduling by scope (a unit at a time to an idle worker, in collection order), with
    work_unit's units as the scopes."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> WorkUnitScheduling:
    config.option.loadscopereorder = False  # the order is LONGEST_FIRST's (below), not by test count
    return WorkUnitScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(work_unit(item.nodeid), len(order)))  # stable: the rest in place


@pytest.fixture(scope="session")
def sandbox_setup() -> None:
    """Idempotent (seconds when done): packages, podman config + service, images, host venv."""
    setup = Path(__file__).resolve().parents[1] / "scripts" / "setup_sandbox.sh"
    subprocess.run(["bash", str(setup)], check=True, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def office_image(sandbox_setup: None) -> str:
    """The office flavour (LibreOffice over the desktop image): built by setup on first use, else a no-op."""
    setup = Path(__file__).resolve().parents[1] / "scripts" / "setup_sandbox.sh"
    subprocess.run(["bash", str(setup), "office_image"], check=True, stdin=subprocess.DEVNULL)
    return f"{os.environ.get('CUA_OFFICE_IMAGE', 'cua-sandbox-office')}:latest"  # the build script's name


@pytest.fixture(autouse=True)
def _sandbox_setup_for_slow_tests(request: pytest.FixtureRequest) -> None:
    """A slow test drives real components, boxes among them: it gets the sandbox setup (the podman
    service above all) whether or not an earlier test of the session started it."""
    if request.node.get_closest_marker("slow") is not None:
        request.getfixturevalue("sandbox_setup")


@pytest.fixture(scope="session")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artefacts")


# The servers of a shared unit's fixtures (SHARED_UNITS), stopped as soon as this worker has played the
# unit (every test that uses them is in it): each holds ~2.4 GB, and both workers' would not fit in memory.
_SERVERS_OF: dict[str, list[VLLMProcess | Servers]] = {}


@pytest.hookimpl(wrapper=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    unit = work_unit(item.nodeid)
    if nextitem is None or work_unit(nextitem.nodeid) != unit:
        for fixture in SHARED_UNITS.get(unit, ()):
            for server in _SERVERS_OF.pop(fixture, []):
                server.stop()
    return result


class Servers(Mapping[str, VLLMProcess]):
    """A server per model, each started (through scripts/run_vllm_cpu.sh) the first time a test asks for it:
    a worker whose tests use one model of a pair does not pay ~25 s of two cores and ~2.4 GB for the other."""

    def __init__(self, models: dict[str, Path], artefacts: Path) -> None:
        self.models, self.artefacts = models, artefacts
        self.started: dict[str, VLLMProcess] = {}

    def __getitem__(self, name: str) -> VLLMProcess:
        if name not in self.started:
            self.started[name] = start_vllm(self.models[name], self.artefacts)
            self.started[name].wait_healthy(SERVER_START_TIMEOUT_S)
        return self.started[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def stop(self) -> None:
        for server in self.started.values():
            server.stop()
        self.started.clear()


def _serve(models: dict[str, Path], artefacts: Path, fixture: str | None = None):
    """The models' servers, each started on first use, stopped after (or when the worker leaves the shared
    unit of `fixture`)."""
    servers = Servers(models, artefacts)
    if fixture:
        _SERVERS_OF[fixture] = [servers]
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def vllm_servers(artefacts: Path) -> Servers:
    """The tiny Qwen2.5-VL models' servers ("untied", "tied")."""
    yield from _serve(MODELS, artefacts)


@pytest.fixture(scope="session")
def qwen3_vl_servers(artefacts: Path) -> Servers:
    """The tiny Qwen3-VL models' servers ("untied", "tied"), started by the first test that needs them."""
    yield from _serve(QWEN3_VL_MODELS, artefacts, "qwen3_vl_servers")


@pytest.fixture(scope="session")
def warm_server(artefacts: Path) -> VLLMProcess:
    """The warm start's server (configs/local_cpu.yaml's policy), started by the first test that needs it.
    A test that trains it puts the warm start's weights back when it is done (harness.restore_weights)."""
    for servers in _serve({"warm": WARM_MODEL}, artefacts, "warm_server"):
        yield servers["warm"]


def lora_server(model: Path, artefacts: Path, rank: int, loras: int, fixture: str | None = None):
    """A server of `model` that serves LoRA adapters up to `rank`, `loras` at once; stopped after."""
    proc = start_vllm(model, artefacts, lora=(rank, loras))
    if fixture:
        _SERVERS_OF[fixture] = [proc]
    try:
        proc.wait_healthy(SERVER_START_TIMEOUT_S)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def qwen3_vl_lora_server(artefacts: Path) -> VLLMProcess:
    """The untied tiny Qwen3-VL serving LoRA adapters up to the 32B config's rank (16). Its users leave no
    adapter of theirs loaded."""
    yield from lora_server(QWEN3_VL_MODELS["untied"], artefacts, 16, 5, "qwen3_vl_lora_server")


@pytest.fixture
def rollout_engine(vllm_servers):
    """AReaL's rollout machinery over the untied tiny model's server (StockVLLMEngine), torn down after."""
    yield from _engine(vllm_servers["untied"].address)


@pytest.fixture
def qwen3_vl_rollout_engine(qwen3_vl_servers):
    """The same over the untied tiny Qwen3-VL's server."""
    yield from _engine(qwen3_vl_servers["untied"].address)


def _engine(address: str):
    import uuid

    from areal.api.cli_args import InferenceEngineConfig

    from cua_agent.inference.engine import StockVLLMEngine

    config = InferenceEngineConfig(
        experiment_name="tests",
        trial_name=uuid.uuid4().hex[:8],
        request_timeout=120,
        request_retries=2,
        setup_timeout=60,
    )
    engine = StockVLLMEngine(config)
    engine.initialize(addr=[address], train_data_parallel_size=1)
    try:
        yield engine
    finally:
        engine.destroy()
