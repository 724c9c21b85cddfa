"""cua_agent.train.launch_ray without a cluster: what it refuses before starting anything (naming the field),
how it counts room for the trainer bundles in `ray.nodes()`, and its wait: a finished rank is done, a
failed rank still stops the job (AReaL's recovery path), a stop signal is passed on to every trainer. The
launcher on a real two-node cluster: the rehearsal of configs/cua_grpo_multinode.yaml (tests/rehearsal)."""

from __future__ import annotations

from typing import Any

import pytest
import ray.exceptions
from areal.api.cli_args import parse_cli_args
from areal.infra.launcher import ray as areal_ray
from areal.infra.utils.launcher import JobException, JobState

from cua_agent.inference.local_server import REPO
from cua_agent.train.cli import LAUNCHER_MARGIN_S
from cua_agent.train.launch_ray import (
    GIB,
    CompletingRayLauncher,
    RayLaunchError,
    check_capacity,
    check_config,
)

CPU_RUN = [
    "allocation_mode=fsdp:d2",
    "actor.backend=fsdp:d2",
    "cluster.n_nodes=2",
    "cluster.n_gpus_per_node=1",
    "+actor.scheduling_spec=[{cpu:1,mem:2}]",
    'inference.addresses=["127.0.0.1:8000"]',
    "inference.launch_local=false",
]


def launcher_config(*overrides: str, config: str = "configs/local_cpu.yaml") -> Any:
    """The config as the launcher sees it (AReaL's parse_cli_args: raw YAML + overrides)."""
    cfg, _ = parse_cli_args(["train_areal.py", "--config", str(REPO / config), *overrides])
    return cfg


def node(gpus: float, cpus: float = 8, mem_gib: float = 16, alive: bool = True) -> dict[str, Any]:
    """One entry of ray.nodes(), the fields check_capacity reads."""
    return {"Alive": alive, "Resources": {"GPU": gpus, "CPU": cpus, "memory": mem_gib * GIB}}


def test_cpu_run_passes():
    cfg = launcher_config(*CPU_RUN)
    check_config(cfg)
    check_capacity(cfg, [node(1), node(1)])


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("allocation_mode=vllm:d1+fsdp:d2", "allocation_mode"),
        ("inference.addresses=[]", "inference.addresses"),
        ("actor.backend=fsdp:d4", "actor.backend"),
        ("cluster.n_gpus_per_node=2", "actor.backend"),
    ],
)
def test_refused_naming_the_field(override, field):
    with pytest.raises(RayLaunchError, match=f"^{field}: "):
        check_config(launcher_config(*CPU_RUN, override))


@pytest.mark.parametrize(
    ("nodes", "fits"),
    [
        ([node(1), node(1)], True),
        ([node(2)], True),  # PACK places both bundles on one node with room for two
        ([node(0), node(0)], False),  # CPU-only nodes started without --num-gpus
        ([node(1), node(1, alive=False)], False),
        ([node(1), node(1, cpus=0.5)], False),
        ([node(1), node(1, mem_gib=1)], False),  # actor.scheduling_spec mem: 2 GiB per GPU
    ],
)
def test_capacity(nodes, fits):
    cfg = launcher_config(*CPU_RUN)
    if fits:
        check_capacity(cfg, nodes)
    else:
        with pytest.raises(RayLaunchError, match=r"^cluster\.n_nodes: .*--num-gpus"):
            check_capacity(cfg, nodes)


@pytest.mark.parametrize(("slots", "fits"), [((4, 4), True), ((8,), True), ((4, 3), False), ((0,), False)])
def test_a_ray_sandbox_run_needs_a_slot_for_every_box_it_runs_at_once(slots, fits):
    """2 trainers x 4 boxes: 8 sandbox_slots over the live nodes, or the run is refused naming the field."""
    cfg = launcher_config(*CPU_RUN, "sandbox.backend=ray", "sandbox.max_concurrency=4")
    nodes = [node(1), node(1)] + [{"Alive": True, "Resources": {"CPU": 4, "sandbox_slots": n}} for n in slots]
    if fits:
        check_capacity(cfg, nodes)
    else:
        with pytest.raises(
            RayLaunchError, match=r"^sandbox\.max_concurrency: 2 trainer processes x 4 boxes need 8"
        ):
            check_capacity(cfg, nodes)


class FakeGet:
    """ray.get over named stand-in futures: "ok" returns, "fail" raises the error of a failed task."""

    def __call__(self, future: str, timeout: float) -> None:
        if future == "fail":
            raise ray.exceptions.RayTaskError("run_func", "Traceback: boom", RuntimeError("boom"))


class FakeRay:
    """ray.wait and ray.cancel over the stand-in futures: what was cancelled how, and the waits' timeouts."""

    def __init__(self, late: tuple[str, ...] = ()):
        self.late, self.cancelled, self.waited = late, [], []

    def wait(self, futures: list[str], num_returns: int, timeout: float) -> tuple[list[str], list[str]]:
        self.waited.append(timeout)
        return [f for f in futures if f not in self.late], [f for f in futures if f in self.late]

    def cancel(self, future: str, force: bool = False) -> None:
        self.cancelled.append((future, force))


@pytest.fixture
def fake_ray(monkeypatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(areal_ray.ray, "wait", fake.wait)
    monkeypatch.setattr(areal_ray.ray, "cancel", fake.cancel)
    return fake


@pytest.fixture
def launcher(monkeypatch, fake_ray) -> CompletingRayLauncher:
    monkeypatch.setattr(areal_ray.ray, "get", FakeGet())
    monkeypatch.setattr(areal_ray, "RAY_WAIT_CHECK_TIME_INTERVAL", 0)
    return CompletingRayLauncher("exp", "trial", "/tmp", grace_s=123)


def test_wait_returns_when_every_rank_completed(launcher):
    launcher.jobs = {"trainer:0": "ok", "trainer:1": "ok"}
    # as ray_main calls it: with AReaL's own wait, the first completed rank raises JobException
    launcher.wait(check_status=(JobState.COMPLETED, JobState.FAILED))
    assert launcher.jobs == {}


def test_wait_raises_on_a_failed_rank(launcher):
    launcher.jobs = {"trainer:0": "ok", "trainer:1": "fail"}
    with pytest.raises(JobException) as err:
        launcher.wait(check_status=(JobState.COMPLETED, JobState.FAILED))
    assert err.value.reason == JobState.FAILED and err.value.worker_type == "trainer"


def test_a_failed_rank_leaves_the_others_a_moment_to_end_before_they_are_killed(launcher, fake_ray):
    """Ranks that abort or stop together leave their collective checkpoint within moments of each other;
    AReaL killed the others as soon as the first one exited. They get the launcher's margin (not the whole
    stop grace: beside a rank that crashed they cannot finish anything); only late ones are killed."""
    launcher.jobs = {"trainer:0": "fail", "trainer:1": "running"}
    fake_ray.late = ("running",)
    with pytest.raises(JobException):
        launcher.wait(check_status=(JobState.COMPLETED, JobState.FAILED))
    assert fake_ray.waited == [LAUNCHER_MARGIN_S]
    assert fake_ray.cancelled == [("running", True)]


def test_sigterm_stops_every_trainer_gracefully_then_exits_with_the_signal(launcher, fake_ray, monkeypatch):
    """A non-forcing cancel is a SIGINT in the trainer: its graceful stop (step, checkpoint, sandboxes)."""
    import signal

    def interrupted(*args, **kwargs):
        launcher.on_signal(signal.SIGTERM, None)

    monkeypatch.setattr(areal_ray.RayLauncher, "wait", interrupted)
    launcher.jobs = {"trainer:0": "a", "trainer:1": "b"}
    with pytest.raises(SystemExit) as done:
        launcher.wait(check_status=(JobState.COMPLETED, JobState.FAILED))
    assert done.value.code == 128 + signal.SIGTERM
    assert fake_ray.cancelled == [("a", False), ("b", False)] and fake_ray.waited == [123]
