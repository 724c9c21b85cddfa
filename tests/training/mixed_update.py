"""One GRPO update by 2 trainer ranks (run under torchrun; configs/local_cpu.yaml's actor at fsdp:d2 on the
tiny Qwen2.5-VL, our trainer patches) where rank 0's micro-batch has a screenshot row and rank 1's only a
text row: what a step of a mixed GUI + terminal run gives the ranks after redistribution.

    torchrun --nproc-per-node 2 tests/training/mixed_update.py OUT_DIR

Each rank writes OUT_DIR/rank<r>.json: {"logp_before": [...], "logp_after": [...]} of its answer tokens."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import torch.distributed as dist
from PIL import Image

from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.rows import RowBuilder
from tests.training.one_update import local_actor, update

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
    actor, config = local_actor(MODEL, 2)
    rank = dist.get_rank()
    mask, before, after = update(actor, rows(rank, ModelView.of_model(MODEL, config.agent.model_family)))
    result = {"logp_before": before[0][mask[0]].tolist(), "logp_after": after[0][mask[0]].tolist()}
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
    actor.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
