"""One GRPO update by 2 trainer ranks (run under torchrun; configs/local_cpu.yaml's actor at fsdp:d2 on the
tiny Qwen2.5-VL, our trainer patches) where rank 0's micro-batch has a screenshot row and rank 1's only a
text row: what a step of a mixed GUI + terminal run gives the ranks after redistribution.

    torchrun --nproc-per-node 2 tests/training/mixed_update.py OUT_DIR

Each rank writes OUT_DIR/rank<r>.json: {"logp_before": [...], "logp_after": [...]} of its answer tokens."""

from __future__ import annotations

import copy
import io
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from areal.api import FinetuneSpec
from areal.api.alloc_mode import ModelAllocation
from areal.api.cli_args import load_expr_config
from areal.engine.fsdp_engine import FSDPPPOActor
from PIL import Image

from cua_agent.config import CUAGRPOConfig
from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.inference.model_call import ModelCall
from cua_agent.inference.processing import load_processor
from cua_agent.rollout.rows import RowBuilder
from cua_agent.train import patches as trainer_patches

MODEL = MODELS["untied"]


def rows(rank: int, view: ModelView) -> dict:
    tok = view.tokenizer
    text = tok.encode("Click the OK button.")
    answer = tok.encode('{"name": "click"}')
    if rank == 0:  # a GUI turn: a 224x224 screenshot, its image tokens between the vision markers
        png = io.BytesIO()
        Image.new("RGB", (224, 224), (200, 100, 50)).save(png, format="PNG")
        t, h, w = view.grid(224, 224)
        image = [tok.convert_tokens_to_ids("<|vision_start|>")]
        image += [view.image_token_id] * (t * h * w // view.merge**2)
        image += [tok.convert_tokens_to_ids("<|vision_end|>")]
        call = ModelCall("", text + image, answer, [-1.0] * len(answer), images=[png.getvalue()], version=0)
    else:  # a terminal turn: text only
        call = ModelCall("", text + text, answer, [-1.0] * len(answer), version=0)
    row = RowBuilder(view).row(call, reward=1.0 if rank == 0 else -1.0)
    return row


def main(out_dir: str) -> None:
    config, _ = load_expr_config(
        [
            "--config",
            str(REPO / "configs" / "local_cpu.yaml"),
            f"actor.path={MODEL}",
            "actor.backend=fsdp:d2",
        ],
        CUAGRPOConfig,
    )
    trainer_patches.install(config.actor.attn_impl)
    trainer_patches.install_screenshot_pixels(load_processor(MODEL).image_processor)
    actor = FSDPPPOActor(config.actor)
    actor.create_process_group(parallel_strategy=ModelAllocation.from_str("fsdp:d2", name="actor").parallel)
    actor.initialize(
        addr=None, ft_spec=FinetuneSpec(total_train_epochs=1, dataset_size=2, train_batch_size=2)
    )
    rank = dist.get_rank()
    batch = rows(rank, ModelView.of_model(MODEL, config.agent.model_family))
    pristine = copy.deepcopy(batch)
    (before,) = actor.compute_logp([copy.deepcopy(pristine)])
    batch["prox_logp"] = before
    actor.ppo_update(actor.compute_advantages([batch]))
    (after,) = actor.compute_logp([copy.deepcopy(pristine)])
    mask = torch.roll(pristine["loss_mask"], shifts=-1, dims=-1).bool()[0]
    result = {"logp_before": before[0][mask].tolist(), "logp_after": after[0][mask].tolist()}
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
    actor.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
