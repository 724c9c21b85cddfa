"""AReaL's PPOTrainer against stock vLLM servers, in AReaL's SPMD mode (one process per FSDP rank).

`CUATrainer` changes one thing in `PPOTrainer`: the rollout engine is our `StockVLLMEngine` (AReaL's
`_init_rollout` builds `RemotevLLMEngine`, which needs AReaL's patched vLLM server). `run(config)` is the
whole training job: process environment, output layout, inference servers, dataset, workflow, train.

Output layout (cluster.fileroot = outputs/<experiment>):
    logs/training.log, logs/merged.log      this process's log (AReaL's loggers)
    logs/<user>/<experiment>/<trial>/       AReaL's stats logs: config.yaml, wandb/, swanlab
    logs/tensorboard/                        tensorboard (stats_logger.tensorboard.path)
    checkpoints/<user>/<experiment>/<trial>/default/
        weight_update_v<N>/                  HF weights for the vLLM reload (one per step)
        recover_checkpoint/, epoch…globalstep…/   recover and saver checkpoints
    name_resolve/                            AReaL's name_resolve records of this experiment
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from copy import deepcopy
from pathlib import Path
from typing import Any

from areal import PPOTrainer
from areal.api.cli_args import InferenceEngineConfig
from areal.utils import logging, name_resolve, names
from areal.utils.dynamic_import import import_from_string
from areal.utils.environ import is_single_controller

from cua_agent import trainer_patches
from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.local_server import VLLMProcess, free_port, start_vllm
from cua_agent.settings import Settings

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
    ):
        if not server_addresses:
            raise ValueError("CUATrainer needs at least one vLLM server address")
        self.server_addresses = list(server_addresses)
        trainer_patches.install(config.actor.attn_impl)
        super().__init__(config, train_dataset=train_dataset, valid_dataset=valid_dataset)

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
        engine = StockVLLMEngine(config, tied_embeddings=self.config.inference.tied_embeddings)
        engine.initialize(
            addr=self.server_addresses, train_data_parallel_size=self.actor_alloc.parallel.dp_size
        )
        return engine


# ---- the job ---------------------------------------------------------------------------------------------
def run(config: CUAGRPOConfig, train_dataset: Any = None) -> None:
    """Train `config`. Without `train_dataset`, rows come from `cua_agent.tasks.load_task_rows`."""
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
    _clear_name_resolve(config, rank)
    _raise_on_sigterm()

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
            from cua_agent.tasks import load_task_rows

            train_dataset = load_task_rows(
                config.tasks.train_path, config.tasks.train_split, list(config.tasks.task_ids)
            )
        workflow_cls = import_from_string(config.workflow)
        workflow = workflow_cls(config=config)
        with CUATrainer(config, train_dataset, server_addresses=addresses) as trainer:
            trainer.train(workflow=workflow, workflow_kwargs=None)
    finally:
        if server is not None:
            server.stop()
            logger.info("Local vLLM server stopped")


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


def _raise_on_sigterm() -> None:
    """SIGTERM (the launcher, docker stop) unwinds like Ctrl-C, so `finally` stops the local server."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_signal)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)
