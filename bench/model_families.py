#!/usr/bin/env python
"""The tiny Qwen3-VL against the tiny Qwen2.5-VL (the embedded default) as the trainer sees them: prompt
tokens of a real agent prompt (the family's own system prompt, two 1280x800 screenshots) and the time of one
forward+backward over it on CPU, fp32, sdpa. Both are measured in the same run; the ratio is Qwen3-VL over
Qwen2.5-VL.

    python bench/model_families.py [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.episode.actions import Click
from cua_agent.episode.model_view import ModelView
from cua_agent.episode.prompting import build_messages
from cua_agent.episode.turn import Turn
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS
from cua_agent.inference.model_call import ModelCall
from tests.inference.reference import screenshot

MODELS_OF = {"qwen2.5-vl": MODELS["untied"], "qwen3-vl": QWEN3_VL_MODELS["untied"]}


def png(seed: int) -> bytes:
    buf = io.BytesIO()
    screenshot(seed).save(buf, "PNG")
    return buf.getvalue()


def measure(family: str, repeats: int) -> dict[str, float]:
    from transformers import AutoModelForImageTextToText

    view = ModelView.of_model(MODELS_OF[family], family)
    mapping = view.mapping(1280, 800)
    answer = view.family.answer
    history = [Turn(ModelCall(answer(Click(640, 400), mapping)), Click(640, 400), "ok", 0.1)]
    shots = [png(0), png(1)]
    prompt = build_messages("Click the OK button.", history, shots, 2, mapping, family=view.family)
    text = view.processor.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False)
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in prompt.images]
    enc = view.processor(text=[text], images=images, return_tensors="pt")
    model = AutoModelForImageTextToText.from_pretrained(MODELS_OF[family], attn_implementation="sdpa")
    model.train()
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        out = model(**enc)
        out.logits.float().logsumexp(-1).mean().backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return {
        "prompt_tokens": int(enc["input_ids"].shape[1]),
        "image_tokens": int((enc["input_ids"] == view.image_token_id).sum()),
        # the family's prompt text wherever it sits (ui-tars puts it in the first user turn, not the system)
        "text_tokens": int((enc["input_ids"] != view.image_token_id).sum()),
        "fwd_bwd_s": statistics.median(times[1:]),
        "params": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = {family: measure(family, args.repeats) for family in MODELS_OF}
    keys = ["params", "prompt_tokens", "image_tokens", "text_tokens", "fwd_bwd_s"]
    print(f"{'':22}" + "".join(f"{k:>22}" for k in keys))
    for family, r in rows.items():
        print(f"{family:22}" + "".join(f"{r[k]:>22.3f}" if k == "fwd_bwd_s" else f"{r[k]:>22}" for k in keys))
    ratio = {k: rows["qwen3-vl"][k] / rows["qwen2.5-vl"][k] for k in keys}
    print(f"{'qwen3-vl / qwen2.5-vl':22}" + "".join(f"{ratio[k]:>22.2f}" for k in keys))


if __name__ == "__main__":
    main()
