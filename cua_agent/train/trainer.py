"""AReaL's PPOTrainer against stock vLLM servers, in AReaL's SPMD mode (one process per FSDP rank).

`CUATrainer` keeps `PPOTrainer.train` and changes what it calls:
- the rollout engine is our `StockVLLMEngine` (AReaL's `_init_rollout` builds `RemotevLLMEngine`, which
  needs AReaL's patched vLLM server);
- the train dataloader is wrapped in a `TaskFeed` (rows in flight at a checkpoint are replayed on resume);
- recover checkpoints are `RecoverCheckpoints` (atomic, checked, with LR scheduler and RNG; AReaL's own
  recover is switched off inside PPOTrainer);
- each step's stats get the run's fault counters, and a line in steps.jsonl;
- SIGINT/SIGTERM stop the run at a consistent point (see `_on_stop_signal`).
`run(config)` is the whole training job: process environment, output layout, inference servers, dataset,
workflow, train.

Output layout (cluster.fileroot = outputs/<experiment>):
    logs/training.log, logs/merged.log      this process's log (AReaL's loggers)
    logs/<user>/<experiment>/<trial>/       AReaL's stats logs: config.yaml, wandb/, swanlab; steps.jsonl
    logs/tensorboard/                        tensorboard (stats_logger.tensorboard.path)
    checkpoints/<user>/<experiment>/<trial>/default/
        weight_update_v<N>/                  HF weights of the served version (for reloads and re-pushes)
        epoch…globalstep…/                   saver (HF) checkpoints
    checkpoints/<user>/<experiment>/<trial>/recover/globalstep<k>/   recover checkpoints (checkpointing.py)
    name_resolve/                            AReaL's name_resolve records of this experiment
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import threading
import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import torch.distributed as dist
from areal import PPOTrainer
from areal.api import StepInfo
from areal.api.cli_args import InferenceEngineConfig
from areal.utils import logging, name_resolve, names
from areal.utils.dynamic_import import import_from_string
from areal.utils.environ import is_single_controller
from areal.utils.saver import Saver
from areal.utils.stats_logger import StatsLogger

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.local_server import VLLMProcess, free_port, start_vllm
from cua_agent.settings import Settings
from cua_agent.train import patches as trainer_patches
from cua_agent.train.checkpointing import (
    CheckpointError,
    CheckpointStore,
    RecoverCheckpoints,
    differences,
    fingerprint,
    read_manifest,
    resolve_resume,
)
from cua_agent.train.data_feed import DRAW_KEY, TaskFeed
from cua_agent.train.stopping import RunAborted, StopTraining

logger = logging.getLogger("CUATrainer")

LOCAL_SERVER_TIMEOUT_S = float(os.environ.get("CUA_VLLM_START_TIMEOUT", "600"))


class CUATrainer(PPOTrainer):
    """PPOTrainer whose rollout engine is `StockVLLMEngine` on the given server addresses."""

    def __init__(
        self,
        config: CUAGRPOConfig,
        train_dataset: Any,
        valid_dataset: Any = None,
        *,
        server_addresses: list[str],
        workflow: Any = None,
        resume_from: Path | None = None,
    ):
        if not server_addresses:
            raise ValueError("CUATrainer needs at least one vLLM server address")
        self.server_addresses = list(server_addresses)
        self.workflow = workflow  # for its episode counters in the step stats
        self.stop_signal: int | None = None
        self.last_finished: StepInfo | None = None
        trainer_patches.install(config.actor.attn_impl)
        # AReaL's recover (fixed directory, saved in place, no LR scheduler/RNG) is replaced by ours.
        recover_mode, config.recover.mode = config.recover.mode, "disabled"
        try:
            super().__init__(config, train_dataset=train_dataset, valid_dataset=valid_dataset)
        finally:
            config.recover.mode = recover_mode
        self.checkpoints = RecoverCheckpoints(
            config,
            self.recover_handler.ft_spec,
            fingerprint(
                model_path=config.actor.path,
                actor_backend=config.actor.backend,
                world_size=self.actor.data_parallel_world_size,
                batch_size=config.train_dataset.batch_size,
                steps_per_epoch=len(self.train_dataloader),
                lr_type=config.actor.optimizer.lr_scheduler_type,
            ),
        )
        if resume_from is not None:
            self.recover_info = self._resume(resume_from)
        self._next_lr = self._lr()
        self._counted: dict[str, float] = {}
        self.steps_path = Path(StatsLogger.get_log_path(config.stats_logger)) / "steps.jsonl"

    def _create_dataloader(self, dataset: Any, dataset_config: Any, rank: int, world_size: int) -> Any:
        loader = super()._create_dataloader(dataset, dataset_config, rank, world_size)
        return TaskFeed(loader) if dataset_config is self.config.train_dataset else loader

    # ---- resume -----------------------------------------------------------------------------------------
    def _resume(self, path: Path) -> Any:
        """Everything a continuous run has at this point, then the servers get the checkpoint's weights
        (as the version the interrupted run would have served next)."""
        start = time.monotonic()
        info = self.checkpoints.load(
            path, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
        )
        version = info.last_step_info.global_step + 1
        meta = self.weight_update_meta.with_version(version)
        self.rollout.pause()
        try:
            self.actor.update_weights(meta)
        finally:
            self.rollout.resume()
        self.actor.set_version(version)
        self.rollout.set_version(version)
        if self.eval_rollout is not None:
            self.eval_rollout.set_version(version)
        manager = self.rollout.workflow_executor.staleness_manager
        if manager is not None:  # as PPOTrainer after AReaL's recover: capacity follows the version jump
            manager.on_version_recovered(version)
        logger.info(
            f"Resumed from {path} in {time.monotonic() - start:.1f}s: next step {version + 1}, "
            f"lr {self._lr():.3g}, {len(self.train_dataloader.outstanding)} row(s) in flight at the save "
            f"replayed first, servers serve version {version}"
        )
        return info

    def _lr(self) -> float:
        return float(self.actor.lr_scheduler.get_last_lr()[0])

    # ---- per step (PPOTrainer.train calls these) ----------------------------------------------------------
    def _save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int) -> None:
        step_info = StepInfo(
            global_step=global_step,
            epoch=epoch,
            epoch_step=epoch_step,
            steps_per_epoch=len(self.train_dataloader),
        )
        self.last_finished = step_info
        if not self.checkpoints.enabled:
            return
        due = self.checkpoints.due(step_info)
        stopping = self.stop_signal is not None and self.config.checkpoint.save_on_stop
        if _agree(due or stopping, self.actor):
            self.checkpoints.save(
                step_info, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
            )

    def _export_and_commit_stats(self, epoch: int, epoch_step: int, global_step: int) -> None:
        stats = self.actor.export_stats()
        stats.update(self.rollout.export_stats())
        if self.eval_rollout is not None:
            stats.update(self.eval_rollout.export_stats())
        faults = self._fault_counts()
        stats.update({f"cua/{k}": v for k, v in faults.items()})
        self.stats_logger.commit(epoch, epoch_step, global_step, stats)
        lr, self._next_lr = self._next_lr, self._lr()
        if (dist.get_rank() if dist.is_initialized() else 0) == 0:
            self._record_step(global_step, lr, faults)
        if dist.is_initialized():
            dist.barrier(group=self.actor.cpu_group)
        if self.stop_signal is not None:
            raise StopTraining(self.stop_signal)

    def _fault_counts(self) -> dict[str, float]:
        """This step's episode and server fault counts (the counters are cumulative)."""
        totals: dict[str, float] = dict(self.rollout.counters)
        if self.workflow is not None and hasattr(self.workflow, "stats"):
            totals.update(self.workflow.stats)
        step = {k: v - self._counted.get(k, 0) for k, v in totals.items()}
        self._counted = totals
        return step

    def _record_step(self, global_step: int, lr: float, faults: dict[str, float]) -> None:
        rows = [
            {"draw": r.get(DRAW_KEY), "task_id": r.get("task_id"), "seed": r.get("seed")}
            for r in self.rollout.last_trained_rows
        ]
        record = {
            "global_step": global_step,
            "lr": lr,
            "weight_version": self.rollout.get_version(),
            "rows": rows,
            "faults": faults,
            "pid": os.getpid(),
            "time": time.time(),
        }
        self.steps_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.steps_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        failures = {k: v for k, v in faults.items() if v and k not in ("episodes", "rows")}
        logger.info(
            f"Step {global_step + 1}: {int(faults.get('episodes', 0))} episodes, lr {lr:.3g}, served version "
            f"{record['weight_version']}"
            + (
                f", faults: {', '.join(f'{k}={int(v)}' for k, v in sorted(failures.items()))}"
                if failures
                else ""
            )
        )

    # ---- stopping -----------------------------------------------------------------------------------------
    def request_stop(self, signum: int) -> None:
        """From the signal handler. While the step waits for rollouts, stop now (the model is still the
        last finished step's); during the update, finish the step (and its checkpoint) first."""
        first = self.stop_signal is None
        self.stop_signal = signum
        self.rollout.stop_requested = signum
        if self.rollout.waiting_for_batch or not first:
            raise StopTraining(signum)
        logger.warning(f"{signal.Signals(signum).name}: stopping after this step's update and checkpoint")

    def save_on_stop(self) -> Path | None:
        """A stop during the rollout wait: checkpoint the last finished step if it has none yet."""
        step = self.last_finished
        if (
            step is None
            or not self.checkpoints.enabled
            or not self.config.checkpoint.save_on_stop
            or self.checkpoints.last_saved_step >= step.global_step
        ):
            return None
        return self.checkpoints.save(
            step, self.actor, self.saver, self.evaluator, self.stats_logger, self.train_dataloader
        )

    def _init_rollout(
        self,
        rollout_config: InferenceEngineConfig,
        is_eval: bool = False,
        lora_path: str | None = None,
    ) -> StockVLLMEngine | None:
        if is_single_controller():
            raise RuntimeError("CUATrainer runs in AReaL's SPMD mode: set AREAL_SPMD_MODE=1 (run() does)")
        if lora_path is not None:
            raise ValueError("LoRA is not supported: AReaL 1.0.4 allows it in single-controller mode only")
        if is_eval and self.config.valid_dataset is None:
            return None  # no evaluation: no second engine (PPOTrainer checks eval_rollout for None)
        config = deepcopy(rollout_config)
        if is_eval:
            config.max_head_offpolicyness = int(1e12)  # as AReaL: no staleness control in evaluation
        engine = StockVLLMEngine(
            config,
            tied_embeddings=self.config.inference.tied_embeddings,
            recovery_timeout_s=self.config.inference.recovery_timeout_s,
        )
        engine.initialize(
            addr=self.server_addresses, train_data_parallel_size=self.actor_alloc.parallel.dp_size
        )
        return engine


# ---- the job ---------------------------------------------------------------------------------------------
def run(config: CUAGRPOConfig, train_dataset: Any = None) -> None:
    """Train `config`. Without `train_dataset`, rows come from `cua_agent.train.dataset.load_task_rows`."""
    settings = Settings()  # secrets and endpoints: environment, else .env
    settings.export()
    os.environ["AREAL_SPMD_MODE"] = "1"
    _single_process_dist_env()
    rank = int(os.environ["RANK"])
    _absolute_paths(config)
    exp_dir = Path(config.cluster.fileroot)
    log_dir = exp_dir / "logs"
    logging.setup_file_logging(str(log_dir), filename="training.log" if rank == 0 else f"training-{rank}.log")
    _stats_backends(config)
    resume_from = _resume_point(config, rank)  # checked before anything slow starts
    _clear_name_resolve(config, rank)
    signals = _StopSignals()
    signals.install()

    server: VLLMProcess | None = None
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
            server = start_vllm(Path(config.actor.path), log_dir)
            logger.info(f"Starting a local vLLM server on {config.actor.path} (log: {server.log_path})")
            server.wait_healthy(LOCAL_SERVER_TIMEOUT_S)
            addresses = [server.address]
        logger.info(f"vLLM servers: {addresses}; outputs under {exp_dir}")

        if train_dataset is None:
            from cua_agent.train.dataset import load_task_rows

            train_dataset = load_task_rows(
                config.tasks.train_path, config.tasks.train_split, list(config.tasks.task_ids)
            )
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
                _stop(trainer, str(stop), 128 + stop.signum, workflow)
            except RunAborted as exc:
                aborted = exc
                logger.error(f"Training aborted: {exc}")
                _stop(trainer, "aborted", 1, workflow)
            finally:
                signals.trainer = None
        # After the trainer's exit closed the rollouts (and the sandbox pool):
        if aborted is not None:
            raise SystemExit(f"Training aborted: {aborted}")
        if stopped is not None:
            raise SystemExit(128 + stopped.signum)
    except StopTraining as stop:  # before training began
        logger.warning(f"Training {stop} during startup; nothing to save")
        raise SystemExit(128 + stop.signum) from None
    finally:
        if server is not None:
            server.stop()
            logger.info("Local vLLM server stopped")


def _stop(trainer: CUATrainer, why: str, exit_code: int, workflow: Any) -> None:
    """After a stop signal: checkpoint if configured, then let the trainer's exit close the rollouts and
    the sandbox pool, within checkpoint.stop_timeout_s (then this process removes its sandboxes and exits)."""
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
    timeout = trainer.config.checkpoint.stop_timeout_s

    def force_exit() -> None:
        logger.error(f"Shutdown took over {timeout:.0f}s (checkpoint.stop_timeout_s): abandoning episodes")
        try:
            if hasattr(workflow, "remove_own_sandboxes"):
                workflow.remove_own_sandboxes()
        finally:
            os._exit(exit_code)

    timer = threading.Timer(timeout, force_exit)
    timer.daemon = True
    timer.start()


class _StopSignals:
    """SIGINT/SIGTERM (Ctrl-C, docker stop, the launcher) → `CUATrainer.request_stop`; before the trainer
    exists, stop at once. The handlers run in the main thread, where `train()` runs."""

    def __init__(self) -> None:
        self.trainer: CUATrainer | None = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self)
            signal.signal(signal.SIGINT, self)

    def __call__(self, signum: int, frame: Any) -> None:
        if self.trainer is None:
            raise StopTraining(signum)
        if self.trainer.rollout.fatal is not None:  # the rollout thread gave up (StockVLLMEngine.abort_run)
            raise self.trainer.rollout.fatal
        self.trainer.request_stop(signum)


def _resume_point(config: CUAGRPOConfig, rank: int) -> Path | None:
    """The checkpoint to resume from (config.checkpoint.resume_from / recover.mode), checked against this
    run's config, or None. Leftovers of a killed run (partial saves, weight copies) are removed."""
    rc = config.recover
    save_root = Path(Saver.get_save_root(rc.experiment_name, rc.trial_name, rc.fileroot))
    store = CheckpointStore(save_root / "recover")
    if rank == 0:
        store.remove_staging()
        for stale in save_root.glob("*/weight_update_v*"):
            shutil.rmtree(stale, ignore_errors=True)
    path = resolve_resume(config.checkpoint.resume_from, rc.mode, store)
    if path is None:
        if config.checkpoint.resume_from is None and store.latest() is None and rc.mode != "disabled":
            logger.info(f"Fresh start; checkpoints go to {store.root}")
        return None
    manifest = read_manifest(path)
    # What can be checked before the model and data are loaded (the rest is checked at load).
    now = fingerprint(
        model_path=config.actor.path,
        actor_backend=config.actor.backend,
        world_size=int(os.environ["WORLD_SIZE"]),
        batch_size=config.train_dataset.batch_size,
        lr_type=config.actor.optimizer.lr_scheduler_type,
    )
    saved = {k: v for k, v in manifest.get("compat", {}).items() if k in now}
    diff = differences(saved, now)
    if diff:
        raise CheckpointError(f"checkpoint {path} does not fit this run: " + "; ".join(diff))
    step = int(manifest["global_step"])
    if rank == 0 and path.parent == store.root:
        newer = store.supersede_after(step)
        if newer:
            logger.warning(
                f"Resuming from step {step + 1}: set aside newer checkpoints {[str(d) for d in newer]}"
            )
    logger.info(f"Resuming from {path} (step {step + 1} finished)")
    return path


def _single_process_dist_env() -> None:
    """torchrun sets these; a plain `python train_areal.py` is one rank."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
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


def _agree(decision: bool, actor: Any) -> bool:
    """Rank 0's decision for every rank (a save is collective; time- or signal-based choices may differ)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return decision
    box = [decision]
    dist.broadcast_object_list(box, src=0, group=actor.cpu_group)
    return bool(box[0])
