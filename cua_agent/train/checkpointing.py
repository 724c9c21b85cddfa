"""Recover checkpoints that are atomic, complete and checked before they are loaded.

AReaL 1.0.4's FSDP recover overwrites one fixed directory in place (a kill mid-save leaves a checkpoint that
half-loads) and restores neither the LR scheduler nor the RNG (docs/architecture.md, AReaL 1.0.4). `RecoverCheckpoints` replaces
its save/load for `CUATrainer`, reusing AReaL's pieces: torch DCP of the parameters that train + optimizer
(as the engine's DCP save, without frozen parameters: a LoRA run saves its adapter, not the base model) and
`RecoverInfo` (step counters, saver/evaluator/stats-logger/dataloader state, checkpoint frequency state).

Layout, under AReaL's save root of the trial (checkpoints/<user>/<experiment>/<trial>/):
    recover/globalstep<k>/           committed checkpoint taken after global step k (0-based, as AReaL)
        model/                       parameters that train + optimizer state (torch DCP)
        recover_info/                AReaL's RecoverInfo
        trainer_state/rank<r>.pt     LR scheduler and RNG state of each rank
        manifest.json                written last: what the checkpoint belongs to, and its files with sizes
    recover/.staging-globalstep<k>/  a save in progress; renamed to globalstep<k> once complete
    recover/superseded/              newer checkpoints set aside when a run resumes from an older one
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from areal.api import FinetuneSpec, StepInfo
from areal.utils import logging, timeutil
from areal.utils.recover import RecoverInfo
from areal.utils.saver import Saver
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from cua_agent.config import lora_target_modules
from cua_agent.inference.model_files import ModelNotFoundError, model_dir

log = logging.getLogger("Checkpoints")

FORMAT = 1
_PREFIX = "globalstep"
_STAGING = ".staging-"
# Model config keys that decide whether weights and optimizer state fit (top level or text_config).
_SHAPE_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not fit this run; the message says what differs."""


# ---- what a checkpoint belongs to -------------------------------------------------------------------------
def model_shape(model_path: str) -> dict[str, Any]:
    """The parts of an HF config.json that decide whether a checkpoint's tensors fit the model (a local
    folder or a hub id)."""
    try:
        cfg_path = model_dir(model_path) / "config.json"
        cfg = json.loads(cfg_path.read_text())
    except ModelNotFoundError as exc:
        raise CheckpointError(f"actor.path: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the model config {cfg_path}: {exc}") from exc
    text = cfg.get("text_config") or {}
    shape = {k: text.get(k, cfg.get(k)) for k in _SHAPE_KEYS}
    shape["architectures"] = cfg.get("architectures")
    return shape


def fingerprint(config: Any, world_size: int, steps_per_epoch: int | None = None) -> dict[str, Any]:
    """What must match between the run that saved a checkpoint and the run that loads it. Without
    `steps_per_epoch` (not known before the data is loaded), the part that can be checked at start-up."""
    out = {
        "model": model_shape(config.actor.path),
        "actor.backend": config.actor.backend,
        "world_size": world_size,
        "train_dataset.batch_size": config.train_dataset.batch_size,
        "actor.optimizer.lr_scheduler_type": config.actor.optimizer.lr_scheduler_type,
        "lora": lora_shape(config),
        # the optimizer's param groups and their lrs are saved with it
        "lr_groups": [asdict(g) for g in config.lr_groups],
    }
    if steps_per_epoch is not None:
        out["steps_per_epoch"] = steps_per_epoch
    return out


def lora_shape(config: Any) -> dict[str, Any] | None:
    """A LoRA run's adapter: its checkpoints hold the adapter alone, which fits only the same adapter shape
    on the same base model (None without LoRA)."""
    actor = config.actor
    if not actor.use_lora:
        return None
    return {
        "rank": actor.lora_rank,
        "alpha": actor.lora_alpha,
        "target_modules": lora_target_modules(config),
        "base_model": actor.path,
    }


def differences(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: checkpoint has {a!r}, this run has {b!r}")
    return out


def check_fits(path: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """The manifest of the checkpoint at `path` if it is complete and fits a run with this fingerprint
    (only the keys of `expected` are compared: at start-up some are not known yet); else CheckpointError
    naming every difference."""
    manifest = read_manifest(path)
    saved = {k: v for k, v in manifest.get("compat", {}).items() if k in expected}
    diff = differences(saved, expected)
    if diff:
        raise CheckpointError(f"checkpoint {path} does not fit this run: " + "; ".join(diff))
    return manifest


def recover_root(config: Any) -> Path:
    """Where a trial's recover checkpoints live: <save root>/recover (see the module docstring)."""
    rc = config.recover
    return Path(Saver.get_save_root(rc.experiment_name, rc.trial_name, rc.fileroot)) / "recover"


# ---- committed checkpoints on disk ----------------------------------------------------------------------
def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a committed checkpoint, after checking every listed file is there with its size."""
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{path} is not a complete checkpoint: no manifest.json (a save that was interrupted never "
            f"becomes one; pass a recover/{_PREFIX}<k> directory)"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
        files: dict[str, int] = manifest["files"]
        int(manifest["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path}: unreadable manifest.json ({exc!r})") from exc
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: format {manifest.get('format')!r}, expected {FORMAT}")
    for rel, size in files.items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is corrupt: {rel} is missing")
        if f.stat().st_size != size:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: {rel} has {f.stat().st_size} bytes, the manifest says {size}"
            )
    return manifest


class CheckpointStore:
    """The committed checkpoints of one trial: `root` = <save root>/recover."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def committed(self) -> list[tuple[int, Path]]:
        """(global_step, dir) of every committed checkpoint, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for d in self.root.iterdir():
            step = d.name.removeprefix(_PREFIX)
            if d.is_dir() and d.name.startswith(_PREFIX) and step.isdigit():
                found.append((int(step), d))
        return sorted(found)

    def latest(self) -> Path | None:
        committed = self.committed()
        return committed[-1][1] if committed else None

    def path(self, global_step: int) -> Path:
        return self.root / f"{_PREFIX}{global_step}"

    def fresh_staging(self, global_step: int) -> Path:
        staging = self.root / f"{_STAGING}{_PREFIX}{global_step}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def commit(self, staging: Path, global_step: int, manifest: dict[str, Any]) -> Path:
        """Write the manifest (last), then rename the staging directory into place: the one atomic step."""
        manifest = {**manifest, "files": _file_sizes(staging)}
        tmp = staging / "manifest.json.tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, staging / "manifest.json")
        final = self.path(global_step)
        if final.exists():  # an abandoned future of this trial (resumed from an older step): replace it
            trash = self.root / f"{_STAGING}replaced-{final.name}-{time.time_ns()}"
            os.rename(final, trash)
            os.rename(staging, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(staging, final)
        _fsync_dir(self.root)
        return final

    def prune(self, keep_last: int) -> list[Path]:
        removed = []
        for _, d in self.committed()[:-keep_last]:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        return removed

    def remove_staging(self) -> None:
        """Leftovers of saves that a kill interrupted."""
        if self.root.is_dir():
            for d in self.root.glob(f"{_STAGING}*"):
                shutil.rmtree(d, ignore_errors=True)

    def supersede_after(self, global_step: int) -> list[Path]:
        """Set aside checkpoints newer than `global_step`, so `latest` means the resumed line of training."""
        moved = []
        for step, d in self.committed():
            if step > global_step:
                dest = self.root / "superseded" / f"{d.name}-{time.strftime('%Y%m%d-%H%M%S')}"
                dest.parent.mkdir(exist_ok=True)
                os.rename(d, dest)
                moved.append(dest)
        return moved


def _file_sizes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json.tmp"
    }


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resolve_resume(resume_from: str | None, recover_mode: str, store: CheckpointStore) -> Path | None:
    """The checkpoint this run starts from, or None for a fresh start.

    resume_from=None: AReaL's recover semantics (mode on/auto resumes if the trial has a checkpoint);
    "latest": the trial's newest, and an error if it has none; otherwise a checkpoint directory (or a
    recover/ directory, meaning its newest)."""
    if recover_mode in ("disabled", "off"):
        return None
    if resume_from is None:
        return store.latest()
    if resume_from == "latest":
        latest = store.latest()
        if latest is None:
            raise CheckpointError(
                f"--resume: no checkpoint of this trial under {store.root} (wrong experiment_name/trial_name "
                "or cluster.fileroot?)"
            )
        return latest
    path = Path(resume_from).expanduser().resolve()
    if path.is_dir() and not (path / "manifest.json").exists():
        latest = CheckpointStore(path).latest()
        if latest is not None:
            return latest
    read_manifest(path)  # raises with the reason
    return path


# ---- RNG ------------------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


# numpy's RNG state is the one object a trainer state holds beyond tensors and plain data: its classes are
# allowed by name, and nothing else a pickle could name (a function to call) is loaded.
_NUMPY_STATE = [
    np.ndarray,
    np.dtype,
    (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct,
    type(np.dtype(np.uint32)),
]


def load_trainer_state(path: Path) -> dict[str, Any]:
    """A rank's LR scheduler and RNG state, loaded as data (torch's weights_only), never as code."""
    with torch.serialization.safe_globals(_NUMPY_STATE):
        return torch.load(path, weights_only=True)


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- save and load -----------------------------------------------------------------------------------------
class RecoverCheckpoints:
    """Saves and loads the recover state of a `CUATrainer` (one instance per rank)."""

    def __init__(self, config: Any, ft_spec: FinetuneSpec, expected: dict[str, Any]):
        self.config = config
        rc = config.recover
        self.enabled = rc.mode not in ("disabled", "off")
        self.store = CheckpointStore(recover_root(config))
        self.ft_spec = ft_spec
        self.expected = expected
        self.freq_ctl = timeutil.EpochStepTimeFreqCtl(
            freq_epoch=rc.freq_epochs, freq_step=rc.freq_steps, freq_sec=rc.freq_secs
        )
        self.last_saved_step = -1

    def due(self, step_info: StepInfo) -> bool:
        """AReaL's frequency rule (recover.freq_epochs/steps/secs); advances its counters."""
        last_of_epoch = int(step_info.epoch_step == self.ft_spec.steps_per_epoch - 1)
        return self.freq_ctl.check(epochs=last_of_epoch, steps=1)

    def save(
        self, step_info: StepInfo, actor: Any, saver: Any, evaluator: Any, stats: Any, data: Any
    ) -> Path:
        step = step_info.global_step
        rank = dist.get_rank() if dist.is_initialized() else 0
        start = time.monotonic()
        staging = self.store.root / f"{_STAGING}{_PREFIX}{step}"
        if rank == 0:
            self.store.remove_staging()
            staging = self.store.fresh_staging(step)
        _barrier(actor)
        optimizer = None if self.config.recover.no_save_optim else actor.optimizer
        dcp.save({"dcp": TrainedState(actor.model, optimizer)}, checkpoint_id=str(staging / "model"))
        RecoverInfo(
            last_step_info=step_info,
            saver_info=saver.state_dict(),
            evaluator_info=evaluator.state_dict(),
            stats_logger_info=stats.state_dict(),
            dataloader_info=data.state_dict(),
            checkpoint_info=self.freq_ctl.state_dict(),
        ).dump(str(staging / "recover_info"))
        (staging / "trainer_state").mkdir(exist_ok=True)
        torch.save(
            {"lr_scheduler": actor.lr_scheduler.state_dict(), "rng": rng_state()},
            staging / "trainer_state" / f"rank{rank}.pt",
        )
        _barrier(actor)
        final = self.store.path(step)
        if rank == 0:
            final = self.store.commit(
                staging,
                step,
                {
                    "format": FORMAT,
                    "global_step": step,
                    "step_info": asdict(step_info),
                    "created": time.time(),
                    "compat": self.expected,
                },
            )
            removed = self.store.prune(self.config.checkpoint.keep_last)
            log.info(
                f"Checkpoint of step {step + 1} committed: {final} ({time.monotonic() - start:.1f}s"
                + (f"; removed {len(removed)} older)" if removed else ")")
            )
        _barrier(actor)
        self.last_saved_step = step
        return final

    def load(self, path: Path, actor: Any, saver: Any, evaluator: Any, stats: Any, data: Any) -> RecoverInfo:
        """Restore everything but the inference servers' weights (the trainer pushes those next)."""
        manifest = check_fits(path, self.expected)
        rank = dist.get_rank() if dist.is_initialized() else 0
        try:
            info = RecoverInfo.load(str(path / "recover_info"))
            saver.load_state_dict(info.saver_info)
            self.freq_ctl.load_state_dict(info.checkpoint_info)
            evaluator.load_state_dict(info.evaluator_info)
            stats.load_state_dict(info.stats_logger_info)
            data.load_state_dict(info.dataloader_info)
            optimizer = None if self.config.recover.no_load_optim else actor.optimizer
            dcp.load({"dcp": TrainedState(actor.model, optimizer)}, checkpoint_id=str(path / "model"))
            state = load_trainer_state(path / "trainer_state" / f"rank{rank}.pt")
            actor.lr_scheduler.load_state_dict(state["lr_scheduler"])
            set_rng_state(state["rng"])
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"loading checkpoint {path} failed: {type(exc).__name__}: {exc}") from exc
        self.last_saved_step = int(manifest["global_step"])
        return info


class TrainedState(Stateful):
    """The parameters that train and their optimizer state, as torch DCP saves and loads them. Frozen
    parameters (a LoRA run's base model) are left out: the run loads them from actor.path, and a 32B base
    would otherwise be written with every checkpoint. DCP still refuses a checkpoint that lacks a tensor asked
    for; `strict=False` only lets the frozen ones be absent."""

    OPTIONS = StateDictOptions(ignore_frozen_params=True, strict=False)

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None):
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model, options=self.OPTIONS)}
        model, optim = get_state_dict(self.model, self.optimizer, options=self.OPTIONS)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.optimizer is None:
            set_model_state_dict(self.model, state_dict["model"], options=self.OPTIONS)
        else:
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state_dict["model"],
                optim_state_dict=state_dict["optim"],
                options=self.OPTIONS,
            )


def _barrier(actor: Any) -> None:
    if dist.is_initialized():
        dist.barrier(group=actor.cpu_group)
