"""Recompute logprobs of saved training rows with AReaL's own FSDP actor (CPU, gloo, one process).

    python tests/consistency/recompute_logp.py ROWS.pt MODEL_DIR OUT.json

Runs in its own process: torch.distributed and FSDP state are process-global. Writes {"max", "mean",
"n_tokens", "n_rows"}: |AReaL's recompute - the rows' server logprobs| over the output tokens.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import torch


def main(rows_path: str, model_dir: str, out_path: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        os.environ.setdefault(k, v)

    from areal.api import FinetuneSpec
    from areal.api.alloc_mode import ModelAllocation
    from areal.api.cli_args import MicroBatchSpec, PPOActorConfig
    from areal.engine.fsdp_engine import FSDPPPOActor

    from cua_agent.inference.processing import load_processor
    from cua_agent.train import patches as trainer_patches

    trainer_patches.install("sdpa")  # as the trainer does (see cua_agent/train/patches.py)
    trainer_patches.install_screenshot_pixels(load_processor(model_dir).image_processor)

    config = PPOActorConfig(
        experiment_name="consistency",
        trial_name="t",
        path=model_dir,
        dtype="float32",
        backend="fsdp:d1",
        mb_spec=MicroBatchSpec(max_tokens_per_mb=16384),
        optimizer=None,
        gradient_checkpointing=False,
        attn_impl="sdpa",  # no flash-attention on CPU
        temperature=1.0,
    )
    actor = FSDPPPOActor(config)
    actor.create_process_group(parallel_strategy=ModelAllocation.from_str("fsdp:d1", name="actor").parallel)
    actor.initialize(
        addr=None, ft_spec=FinetuneSpec(total_train_epochs=1, dataset_size=1, train_batch_size=1)
    )

    batch = torch.load(rows_path, weights_only=False)
    (recomputed,) = actor.compute_logp([batch])  # one call: rows are packed into shared micro-batches
    # compute_logp[i] scores token i+1; the rows hold each token's own logprob at its position.
    server = torch.roll(batch["logprobs"], shifts=-1, dims=-1)
    mask = torch.roll(batch["loss_mask"], shifts=-1, dims=-1).bool()

    d = (recomputed.float() - server.float()).abs()[mask]
    with open(out_path, "w") as f:
        json.dump(
            {
                "max": float(d.max()),
                "mean": float(d.mean()),
                "n_tokens": int(mask.sum()),
                "n_rows": int(batch["input_ids"].shape[0]),
            },
            f,
        )
    actor.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:4])
