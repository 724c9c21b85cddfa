"""AReaL's Ray launcher for `train_areal.py`, with what AReaL 1.0.4's needs to run this stack.

    python -m cua_agent.train.launch_ray train_areal.py --config configs/cua_grpo_multinode.yaml [key=value ...]

Same command line and behaviour as AReaL's `python -m areal.infra.launcher.ray` (the older guides'
`areal.launcher.ray` no longer exists in 1.0.4): it joins the running Ray cluster (`ray start` beforehand;
address from RAY_ADDRESS or the local node), reserves `cluster.n_nodes` bundles of
`cluster.n_gpus_per_node` GPUs, and runs one trainer process per GPU in AReaL's SPMD mode. Differences:

- A run that completes exits 0. AReaL waits with `check_status=(COMPLETED, FAILED)`: the first rank that
  returns raises `JobException`, the other ranks are force-cancelled (mid-teardown, sandboxes still up),
  and the launcher exits 1 after a successful run. Here a completed rank is just done; a failed rank still
  stops the others and triggers AReaL's recovery (`recover.mode`, `recover.retries`), but only after the
  other ranks had `LAUNCHER_MARGIN_S` to end on their own (ranks that stop or abort together leave their
  collective checkpoint within moments of each other; AReaL killed the others as soon as the first exited).
- SIGTERM or SIGINT (Ctrl-C) stops the run gracefully: each trainer gets a non-forcing cancel (Ray raises
  it as a SIGINT in the trainer, which then stops as a trainer under torchrun does: the step's update, its
  checkpoint, its sandboxes removed), and the launcher waits the same grace before it kills what is left,
  then exits 128 + the signal. AReaL's launcher force-killed the trainers at once (Ctrl-C) or died and left
  them to Ray (SIGTERM): no stop-time checkpoint.
- Trainer workers run in the launcher's working directory. Ray already puts that directory on the
  workers' `sys.path`, assuming the same layout on every node; without the chdir the relative paths of
  the command and the config (train_areal.py, configs/..., tasks/...) resolve against wherever `ray start`
  ran on each node.
- `cluster.name_resolve.nfs_record_root` is created (AReaL checks it exists before anything creates it).
- A configuration this stack cannot run fails before anything starts, naming the field: an
  `allocation_mode` with an inference backend (AReaL would start its patched vLLM server; ours are stock
  servers listed in `inference.addresses`), no `inference.addresses` (AReaL sets AREAL_LLM_SERVER_ADDRS
  to "" for the trainers), or a cluster without room for the trainer (AReaL waits 30 s on the placement
  group, then dumps `ray.nodes()`).

CPU-only nodes: AReaL asks Ray for one GPU per trainer process, always. Declare trainer slots as logical
GPUs (`ray start --num-gpus N`); Ray only counts them, and a CPU torch ignores the CUDA_VISIBLE_DEVICES
it sets.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from areal.api.alloc_mode import ModelAllocation, _AllocationMode
from areal.api.cli_args import parse_cli_args
from areal.infra.launcher import ray as areal_ray
from areal.infra.utils.launcher import JobException, JobState, get_scheduling_spec
from areal.utils import logging

from cua_agent.openmp import sleep_while_waiting
from cua_agent.train.cli import LAUNCHER_MARGIN_S
from sandbox.backends.ray_hosts import slot_shortage

GIB = 1024**3
log = logging.getLogger("LaunchRay")


class RayLaunchError(RuntimeError):
    """The configuration or the cluster cannot run the job; the message names the field or resource."""


class CompletingRayLauncher(areal_ray.RayLauncher):
    """AReaL's RayLauncher whose `wait` treats a finished trainer as done, not as a failure, gives the other
    trainers time to end on their own after one failed, and turns SIGTERM/SIGINT into a graceful stop."""

    def __init__(self, *args: Any, grace_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.grace_s = grace_s
        self.stop_signal: int | None = None

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.stop_signal is None:  # a second one while stopping: keep waiting for the trainers
            self.stop_signal = signum
            raise KeyboardInterrupt

    def wait(
        self,
        check_status: tuple[JobState, ...] = (JobState.FAILED,),
        remove_status: tuple[JobState, ...] = (JobState.COMPLETED,),
    ) -> None:
        # ray_main passes check_status=(COMPLETED, FAILED); only a failure may stop the other ranks.
        try:
            super().wait(check_status=(JobState.FAILED,), remove_status=(JobState.COMPLETED,))
        except JobException:
            # ranks that stop or abort together end within moments of each other: the others get the
            # margin to finish their exit, not the whole stop grace (a rank that crashed leaves them stuck)
            self.end_in_time(LAUNCHER_MARGIN_S, cancel=False, why="a trainer failed")
            raise
        except KeyboardInterrupt:
            signum = self.stop_signal or signal.SIGINT
            self.end_in_time(self.grace_s, cancel=True, why=f"{signal.Signals(signum).name}")
            raise SystemExit(128 + signum) from None

    def end_in_time(self, grace_s: float, cancel: bool, why: str) -> None:
        """Let the running trainers end within `grace_s` (asked to stop if `cancel`), then kill the rest."""
        running = [f for name, f in self.jobs.items() if name.startswith("trainer")]
        log.warning(f"{why}: {len(running)} trainer(s) have {grace_s:.0f}s to end")
        if cancel:
            for future in running:
                ray.cancel(future, force=False)  # a SIGINT in the trainer: its graceful stop
        _, late = ray.wait(running, num_returns=len(running), timeout=grace_s)
        for future in late:
            log.error(f"a trainer did not end within {grace_s:.0f}s: killing it")
            ray.cancel(future, force=True)


def check_config(config: Any) -> None:
    """What AReaL's launcher would accept but this stack cannot run."""
    alloc = _AllocationMode.from_str(config.allocation_mode)
    if alloc.gen_backend is not None:
        raise RayLaunchError(
            f"allocation_mode: {config.allocation_mode!r} names an inference backend; AReaL would start its "
            "own patched vLLM/SGLang server. Name the trainer only (e.g. fsdp:d8) and list the stock vLLM "
            "servers in inference.addresses"
        )
    if not list(config.inference.addresses):
        raise RayLaunchError(
            "inference.addresses: empty; under the Ray launcher the trainers get AREAL_LLM_SERVER_ADDRS='' "
            "and inference.launch_local is single-process only: list the vLLM servers (host:port)"
        )
    # The launcher starts one trainer per GPU; the trainers build their mesh from actor.backend.
    world = config.cluster.n_nodes * config.cluster.n_gpus_per_node
    actor_world = ModelAllocation.from_str(config.actor.backend, name="actor").parallel.world_size
    if actor_world != world:
        raise RayLaunchError(
            f"actor.backend: {config.actor.backend!r} spans {actor_world} processes, but the launcher starts "
            f"cluster.n_nodes x cluster.n_gpus_per_node = {world}"
        )


def check_capacity(config: Any, nodes: list[dict[str, Any]]) -> None:
    """Every trainer bundle (n_gpus_per_node GPUs, and cpu/mem per GPU from actor.scheduling_spec) must fit
    on one node; `nodes` is `ray.nodes()`."""
    per_node = config.cluster.n_gpus_per_node
    spec = get_scheduling_spec(config.actor)
    need = {"GPU": per_node, "CPU": spec.cpu * per_node, "memory": spec.mem * GIB * per_node}
    fits = 0
    for node in nodes:
        if node.get("Alive"):
            have = node.get("Resources", {})
            fits += int(min(have.get(k, 0) // v for k, v in need.items()))
    if fits < config.cluster.n_nodes:
        raise RayLaunchError(
            f"cluster.n_nodes: the Ray cluster has room for {fits} of {config.cluster.n_nodes} trainer "
            f"bundles of {per_node} GPU, {need['CPU']} CPU, {need['memory'] / GIB:.0f} GiB memory "
            "(cluster.n_gpus_per_node, actor.scheduling_spec[0].cpu/mem are per GPU). Check `ray status`; "
            "on CPU-only nodes declare trainer slots with `ray start --num-gpus N`"
        )
    sandbox = config.get("sandbox", {}) if hasattr(config, "get") else {}
    if sandbox.get("backend") == "ray":  # every box a trainer runs at once holds a slot
        from cua_agent.config import SandboxConfig, evaluation_boxes
        from cua_agent.rollout.task_rows import training_rows

        trainers = config.cluster.n_nodes * per_node
        boxes = int(sandbox.get("max_concurrency", SandboxConfig.max_concurrency))  # the trainers' default
        why = slot_shortage(nodes, trainers, boxes, training_rows(config.tasks), evaluation_boxes(config))
        if why:
            raise RayLaunchError(why)


def prepare_paths(config: Any) -> None:
    nr = config.cluster.name_resolve
    if nr.type == "nfs":
        Path(nr.nfs_record_root).mkdir(parents=True, exist_ok=True)
    Path(config.cluster.fileroot).mkdir(parents=True, exist_ok=True)


def _enter(directory: str) -> Callable[[], None]:
    def enter_launch_dir() -> None:  # runs in every worker process of this job, on every node
        os.chdir(directory)

    return enter_launch_dir


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not argv[0].endswith(".py"):
        raise SystemExit(
            "usage: python -m cua_agent.train.launch_ray train_areal.py --config CONFIG [key=value ...]"
        )
    config, _ = parse_cli_args(argv)
    check_config(config)
    prepare_paths(config)
    # env_vars: set when a worker process starts, before it loads torch (cua_agent/openmp.py)
    ray.init(
        runtime_env={"worker_process_setup_hook": _enter(os.getcwd()), "env_vars": sleep_while_waiting()}
    )
    check_capacity(config, ray.nodes())
    launcher = CompletingRayLauncher(
        config.experiment_name,
        config.trial_name,
        config.cluster.fileroot,
        grace_s=config.checkpoint.stop_timeout_s + LAUNCHER_MARGIN_S,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, launcher.on_signal)
    areal_ray.RAY_LAUNCHER = launcher
    # ray_main reads the entry point and the trainer's arguments from sys.argv.
    sys.argv = [sys.argv[0], *argv]
    areal_ray.ray_main(config, run_id=0)


if __name__ == "__main__":
    main(sys.argv[1:])
