"""One GRPO update with AReaL's FSDP actor configured as configs/local_cpu.yaml configures it (CPU, gloo,
one process), the trainer's own sequence: recompute logprobs (prox_logp), compute_advantages,
ppo_update. Then the logprobs again.

    python tests/training/one_update.py ROWS.pt MODEL_DIR OUT.json [key=value ...]

ROWS.pt holds rows as the workflow emits them, with their `rewards` (the episode advantages). Writes
{"rows": [{"reward", "delta"}, ...]}: per row, its reward and the mean change of its answer tokens'
logprobs. Its own process: torch.distributed and FSDP state are process-global.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from areal.api import FinetuneSpec
from areal.api.alloc_mode import ModelAllocation
from areal.api.cli_args import load_expr_config
from areal.engine.fsdp_engine import FSDPPPOActor

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import REPO
from cua_agent.inference.processing import load_processor
from cua_agent.train import patches as trainer_patches
from cua_agent.train.job import single_process_dist_env


def local_actor(model_dir: str | Path, ranks: int, *overrides: str) -> tuple[FSDPPPOActor, CUAGRPOConfig]:
    """configs/local_cpu.yaml's actor on `model_dir` at fsdp:d`ranks`, with the trainer's patches, initialized
    (under torchrun for several ranks)."""
    backend = f"fsdp:d{ranks}"
    config, _ = load_expr_config(
        ["--config", str(REPO / "configs" / "local_cpu.yaml"), f"actor.path={model_dir}",
         f"actor.backend={backend}", *overrides],
        CUAGRPOConfig,
    )  # fmt: skip
    trainer_patches.install(config.actor.attn_impl)
    trainer_patches.install_screenshot_pixels(load_processor(model_dir).image_processor)
    actor = FSDPPPOActor(config.actor)
    actor.create_process_group(parallel_strategy=ModelAllocation.from_str(backend, name="actor").parallel)
    actor.initialize(
        addr=None, ft_spec=FinetuneSpec(total_train_epochs=1, dataset_size=ranks, train_batch_size=ranks)
    )
    return actor, config


def update(actor: FSDPPPOActor, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The trainer's sequence on `batch` (rewards set): (answer-token mask, logprobs before, after).
    compute_logp[i] scores token i+1: the answer tokens are where the shifted loss mask is set."""
    pristine = copy.deepcopy(batch)
    (before,) = actor.compute_logp([copy.deepcopy(pristine)])
    batch["prox_logp"] = before
    actor.ppo_update(actor.compute_advantages([batch]))
    (after,) = actor.compute_logp([copy.deepcopy(pristine)])
    return torch.roll(pristine["loss_mask"], shifts=-1, dims=-1).bool(), before, after


def timed_warm_update() -> tuple[Callable[[], float], FSDPPPOActor]:
    """For benchmarks, one training step of make local's shape to time: (a function that runs ppo_update of 16
    warm-start rows, 1280x800 screenshots of ~1,500 tokens each, and returns its seconds; the actor, one
    rank, to destroy after). The first, slower update (compiling, allocating) has run."""
    from areal.utils.data import concat_padded_tensors

    from cua_agent.inference.local_server import WARM_MODEL

    rows = []
    for i, demo in enumerate(torch.load(WARM_MODEL / "demos.pt", weights_only=False)[:16]):
        n = demo["input_ids"].shape[1]
        rows.append({**demo, "logprobs": torch.zeros(1, n), "versions": torch.zeros(1, n, dtype=torch.int32),
                     "rewards": torch.tensor([1.0 if i % 2 else -1.0])})  # fmt: skip
    batch = concat_padded_tensors(rows)
    single_process_dist_env()
    overrides = ("actor.recompute_logprob=false", "actor.use_decoupled_loss=false", "actor.optimizer.lr=1e-3")
    actor, _ = local_actor(WARM_MODEL, 1, *overrides)

    def timed() -> float:
        start = time.perf_counter()
        actor.ppo_update(actor.compute_advantages([copy.deepcopy(batch)]))
        return time.perf_counter() - start

    timed()
    return timed, actor


def main(rows_path: str, model_dir: str, out_path: str, *overrides: str) -> None:
    single_process_dist_env()
    actor, _ = local_actor(model_dir, 1, *overrides)
    batch = torch.load(rows_path, weights_only=False)
    rewards = batch["rewards"].clone()
    mask, before, after = update(actor, batch)
    rows = []
    for i in range(mask.shape[0]):
        d = (after[i] - before[i]).float()[mask[i]]
        rows.append({"reward": float(rewards[i]), "delta": float(d.mean())})
    Path(out_path).write_text(json.dumps({"rows": rows}))
    actor.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
