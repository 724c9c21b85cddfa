"""The training job around `CUATrainer`: process environment, output layout, inference servers, the
resume point, stop signals, and an orderly shutdown.

Output layout (cluster.fileroot = outputs/<experiment>):
    logs/training.log, logs/merged.log      this process's log (AReaL's loggers)
    logs/<user>/<experiment>/<trial>/       AReaL's stats logs: config.yaml, wandb/, swanlab; steps.jsonl
    logs/tensorboard/                        tensorboard (stats_logger.tensorboard.path)
    checkpoints/<user>/<experiment>/<trial>/default/
        weight_update_v<N>/                  HF weights of the served version (for reloads and re-pushes)
        epoch…globalstep…/                   saver (HF) checkpoints
    checkpoints/<user>/<experiment>/<trial>/recover/globalstep<k>/   recover checkpoints (checkpointing.py)
    checkpoints/<user>/<experiment>/<trial>/run.lock                 held by rank 0 while the trial runs
    name_resolve/                            AReaL's name_resolve records of this experiment
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import fcntl
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import IO, Any

from areal.utils import logging, name_resolve, names
from areal.utils.dynamic_import import import_from_string

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import VLLMProcess, free_port, start_vllm
from cua_agent.inference.model_files import model_dir
from cua_agent.settings import Settings
from cua_agent.train.checkpointing import (
    CheckpointStore,
    check_fits,
    fingerprint,
    recover_root,
    resolve_resume,
)
from cua_agent.train.stopping import RunAborted, StopDeadline, StopTraining, stop_with_launcher
from cua_agent.train.trainer import CUATrainer

logger = logging.getLogger("CUAJob")

LOCAL_SERVER_TIMEOUT_S = float(os.environ.get("CUA_VLLM_START_TIMEOUT", "600"))


def run(config: CUAGRPOConfig, train_dataset: Any = None) -> None:
    """Train `config`. Without `train_dataset`, rows come from `cua_agent.rollout.task_rows.training_rows`."""
    settings = Settings()  # secrets and endpoints: environment, else .env
    settings.export()
    os.environ["AREAL_SPMD_MODE"] = "1"
    single_process_dist_env(port=False)
    rank = int(os.environ["RANK"])
    _absolute_paths(config)
    lock = _lock_trial(config, rank)  # noqa: F841 - held, open, until the process ends
    exp_dir = Path(config.cluster.fileroot)
    log_dir = exp_dir / "logs"
    logging.setup_file_logging(str(log_dir), filename="training.log" if rank == 0 else f"training-{rank}.log")
    _stats_backends(config)
    resume_from = _resume_point(config, rank)  # checked before anything slow starts
    _clear_name_resolve(config, rank)
    signals = _StopSignals()
    signals.install()
    stop_with_launcher()  # a rank whose torchrun was killed stops as if told to

    server: VLLMProcess | None = None
    trainer: CUATrainer | None = None
    try:
        addresses = list(config.inference.addresses) or settings.server_addresses
        if not addresses:
            if not config.inference.launch_local:
                raise ValueError(
                    "no vLLM server: set inference.addresses, env AREAL_LLM_SERVER_ADDRS, "
                    "or inference.launch_local=true"
                )
            if int(os.environ["WORLD_SIZE"]) > 1:
                raise ValueError("inference.launch_local runs single-process only; start servers yourself")
            lora = (
                (config.actor.lora_rank, config.rollout.max_head_offpolicyness + 3)  # kept versions + 1
                if config.actor.use_lora
                else None
            )
            server = start_vllm(model_dir(config.actor.path), log_dir, lora=lora)
            logger.info(f"Starting a local vLLM server on {config.actor.path} (log: {server.log_path})")
            server.wait_healthy(LOCAL_SERVER_TIMEOUT_S)
            addresses = [server.address]
        logger.info(f"vLLM servers: {addresses}; outputs under {exp_dir}")
        master_port_now()  # after the local server took its ports (one rank; torchrun has set it)

        if train_dataset is None:
            from cua_agent.rollout.task_rows import training_rows

            train_dataset = training_rows(config.tasks)
        workflow_cls = import_from_string(config.workflow)
        workflow = workflow_cls(config=config)
        if hasattr(workflow, "preflight"):
            workflow.preflight()
        stopped: StopTraining | None = None
        aborted: RunAborted | None = None
        with CUATrainer(
            config, train_dataset, server_addresses=addresses, workflow=workflow, resume_from=resume_from
        ) as trainer:
            signals.trainer = trainer
            try:
                trainer.train(workflow=workflow, workflow_kwargs=None)
            except StopTraining as stop:
                stopped = stop
                _stop(trainer, str(stop), 128 + stop.signum)
            except RunAborted as exc:
                aborted = exc
                logger.error(f"Training aborted: {exc}")
                _stop(trainer, "aborted", 1)
        # Signals still go to the trainer's stop during its exit (not into the exit's clean-up).
        if aborted is not None:
            raise SystemExit(f"Training aborted: {aborted}")
        if stopped is not None:
            raise SystemExit(128 + stopped.signum)
    except StopTraining as stop:  # before training began
        logger.warning(f"Training {stop} during startup; nothing to save")
        raise SystemExit(128 + stop.signum) from None
    finally:
        signals.trainer = None
        signals.uninstall()
        if trainer is not None and trainer.stop_deadline is not None:
            trainer.stop_deadline.cancel()  # the stop is over (a process may live on: a Ray worker)
        if server is not None:
            server.stop()
            logger.info("Local vLLM server stopped")


def _stop(trainer: CUATrainer, why: str, exit_code: int) -> None:
    """After every rank agreed to stop or abort: checkpoint if configured, then let the trainer's exit close
    the rollouts and the sandbox pool, all within checkpoint.stop_timeout_s of the stop signal (else this
    process removes its sandboxes and exits: `StopDeadline`)."""
    if trainer.stop_deadline is None:  # an abort: the deadline starts now
        trainer.stop_deadline = StopDeadline(
            trainer.config.checkpoint.stop_timeout_s, trainer._remove_own_sandboxes, exit_code
        ).start()
    saved = None
    try:
        saved = trainer.save_on_stop()
    except Exception as exc:  # a failed save must not hide the stop; the last committed checkpoint stands
        logger.error(f"Checkpoint on stop failed: {exc}")
    latest = trainer.checkpoints.store.latest()
    done = trainer.last_finished.global_step + 1 if trainer.last_finished else 0
    logger.warning(
        f"Training {why} after {done} finished step(s)"
        + (f"; saved {saved}" if saved else "")
        + (f"; resume with --resume (latest checkpoint: {latest})" if latest else "; no checkpoint to resume")
    )


class _StopSignals:
    """SIGINT/SIGTERM (Ctrl-C, docker stop, the launcher) → `CUATrainer.request_stop`; before the trainer
    exists, stop at once. The handlers run in the main thread, where `train()` runs. SIGUSR1 prints every
    thread's stack to stderr and goes on (`kill -USR1 <rank pid>`: where a hung rank waits)."""

    def __init__(self) -> None:
        self.trainer: CUATrainer | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self)
        with contextlib.suppress(AttributeError, ValueError, OSError):  # no stderr file: no dumps
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)

    def uninstall(self) -> None:
        """The handlers from before `run` (a Ray worker runs on after its trainer task, and later signals
        are its own)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        faulthandler.unregister(signal.SIGUSR1)

    def __call__(self, signum: int, frame: Any) -> None:
        if self.trainer is None:
            raise StopTraining(signum)
        self.trainer.on_signal(signum)


class TrialInUse(RuntimeError):
    """Another run of the same trial holds its lock."""


def _lock_trial(config: CUAGRPOConfig, rank: int) -> IO[str] | None:
    """One run per trial: start-up removes a killed run's partial saves, weight copies and name_resolve
    records, which would destroy a live run's save and weight sync. Rank 0 holds an exclusive lock on the
    trial's run.lock (flock: released when the process ends, however it ends) and says who holds it."""
    if rank != 0:
        return None
    path = recover_root(config).parent / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read(200).strip() or "another process"
        f.close()
        raise TrialInUse(
            f"trial {config.experiment_name}/{config.trial_name} is running already ({holder} holds {path}): "
            "stop that run, or give this one another trial_name"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    f.flush()
    return f


def _resume_point(config: CUAGRPOConfig, rank: int) -> Path | None:
    """The checkpoint to resume from (config.checkpoint.resume_from / recover.mode), checked against this
    run's config, or None. Leftovers of a killed run (partial saves, weight copies) are removed."""
    store = CheckpointStore(recover_root(config))
    if rank == 0:
        store.remove_staging()
        for stale in store.root.parent.glob("*/weight_update_v*"):
            shutil.rmtree(stale, ignore_errors=True)
    rc = config.recover
    path = resolve_resume(config.checkpoint.resume_from, rc.mode, store)
    if path is None:
        if config.checkpoint.resume_from is None and store.latest() is None and rc.mode != "disabled":
            logger.info(f"Fresh start; checkpoints go to {store.root}")
        return None
    # What can be checked before the model and data are loaded (the rest is checked at load).
    manifest = check_fits(path, fingerprint(config, int(os.environ["WORLD_SIZE"])))
    step = int(manifest["global_step"])
    if rank == 0 and path.parent == store.root:
        newer = store.supersede_after(step)
        if newer:
            logger.warning(
                f"Resuming from step {step + 1}: set aside newer checkpoints {[str(d) for d in newer]}"
            )
    logger.info(f"Resuming from {path} (step {step + 1} finished)")
    return path


def single_process_dist_env(port: bool = True) -> None:
    """torchrun sets these; a plain `python train_areal.py` is one rank. `port=False` leaves MASTER_PORT
    for later (master_port_now): a free port picked before a local vLLM server starts can be the one the
    server then binds (the kernel hands a freed port out again), and the process group fails on it."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if port:
        master_port_now()


def master_port_now() -> None:
    os.environ.setdefault("MASTER_PORT", str(free_port()))


def _absolute_paths(config: CUAGRPOConfig) -> None:
    """Every section's fileroot (and the name_resolve root) absolute: the vLLM server reads weight-sync
    checkpoints from these paths, and it does not share our working directory."""
    for f in dataclasses.fields(config):
        section = getattr(config, f.name)
        root = getattr(section, "fileroot", None)
        if isinstance(root, str) and root:
            section.fileroot = os.path.abspath(root)
    config.cluster.fileroot = os.path.abspath(config.cluster.fileroot)
    nr = config.cluster.name_resolve
    nr.nfs_record_root = os.path.abspath(nr.nfs_record_root)
    if config.stats_logger.tensorboard.path:
        config.stats_logger.tensorboard.path = os.path.abspath(config.stats_logger.tensorboard.path)


def _stats_backends(config: CUAGRPOConfig) -> None:
    """wandb offline unless an API key is set. AReaL calls wandb.login() whenever wandb is not disabled,
    which fails without a key unless WANDB_MODE=offline is in the environment."""
    wandb = config.stats_logger.wandb
    if wandb.mode in ("online", "offline"):
        wandb.mode = "online" if os.environ.get("WANDB_API_KEY") or wandb.wandb_api_key else "offline"
    if wandb.mode == "offline":
        os.environ["WANDB_MODE"] = "offline"


def _clear_name_resolve(config: CUAGRPOConfig, rank: int) -> None:
    """A previous run of the same trial leaves records behind, e.g. the "weights saved" signal of each
    version, which would let the next run's engine load a checkpoint before it is written."""
    name_resolve.reconfigure(config.cluster.name_resolve)
    if rank == 0:
        name_resolve.clear_subtree(names.trial_root(config.experiment_name, config.trial_name))
