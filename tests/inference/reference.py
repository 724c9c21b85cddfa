"""The trainer side of parity checks: the HF model and processor, run on exactly what vLLM saw."""

from __future__ import annotations

import base64
import io
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from PIL import Image, ImageDraw
from transformers import AutoModelForImageTextToText

from cua_agent.inference.processing import load_processor
from cua_agent.train import patches as trainer_patches

PARITY_TOL = 1e-3  # fp32, docs/architecture.md, vLLM


def screenshot(seed: int, size: tuple[int, int] = (1280, 800)) -> Image.Image:
    """A desktop-like 1280x800 frame: light background, coloured widgets at seeded positions."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, (236, 236, 236))
    draw = ImageDraw.Draw(img)
    for _ in range(24):
        x, y = rng.randint(0, size[0] - 90), rng.randint(0, size[1] - 40)
        draw.rectangle([x, y, x + 90, y + 32], fill=tuple(rng.randint(0, 255) for _ in range(3)))
        draw.text((x + 6, y + 10), rng.choice(["OK", "Submit", "Cancel", "Next"]), fill=(0, 0, 0))
    return img


def data_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat_messages(images: list[Image.Image], text: str) -> list[dict]:
    content: list[dict] = [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in images]
    return [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]


class HFReference:
    def __init__(self, model_dir: Path):
        trainer_patches.install("sdpa")  # the trainer's exact model code (Qwen2.5-VL mRoPE fix)
        self.model_dir = Path(model_dir)
        self.processor = load_processor(model_dir)
        self.model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()

    @property
    def image_token_id(self) -> int:
        return self.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")

    def expected_image_tokens(self, images: list[Image.Image]) -> int:
        grid = self.processor.image_processor(images=images, return_tensors="pt")["image_grid_thw"]
        merge = self.processor.image_processor.merge_size
        return int((grid.prod(-1) // merge**2).sum())

    @torch.no_grad()
    def logprobs(
        self, images: list[Image.Image], prompt_ids: list[int], output_ids: list[int]
    ) -> list[float]:
        """Log-probabilities of `output_ids` given `prompt_ids` (+ the images' pixels), teacher-forced."""
        ids = torch.tensor([prompt_ids + output_ids])
        kwargs = {}
        if images:
            enc = self.processor.image_processor(images=images, return_tensors="pt")
            kwargs = {"pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}
            # Without mm_token_type_ids transformers 5.3 silently falls back to 1-D positions for Qwen2.5-VL.
            kwargs["mm_token_type_ids"] = (ids == self.image_token_id).long()
        logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs).logits[0]
        lp = torch.log_softmax(logits.float(), dim=-1)
        n = len(prompt_ids)
        return [lp[n - 1 + i, t].item() for i, t in enumerate(output_ids)]

    @torch.no_grad()
    def save_perturbed(self, out: Path, scale: float = 0.01, seed: int = 1) -> None:
        """Move every weight by N(0, scale²) in place and save an HF checkpoint, like a training step would."""
        gen = torch.Generator().manual_seed(seed)
        for p in self.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
        self.model.save_pretrained(out)
        self.processor.save_pretrained(out)


def max_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a, (len(a), len(b))
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


async def parity_across_update(
    server: Any, ref: HFReference, scratch: Path, sampling: Any, tol: float = PARITY_TOL
) -> tuple[float, float]:
    """Max |HF - server| logprob on a two-screenshot prompt before and after a weight update from disk (the
    reference's weights perturbed); the server gets the original weights back after. `ref` holds the
    perturbed weights on return: load a new one."""
    from cua_agent.inference.weight_sync import update_servers_from_disk

    images = [screenshot(7), screenshot(8)]
    messages = chat_messages(images, "Type hello into the field.")
    before = await server.chat(messages, sampling)
    hf_before = ref.logprobs(images, before.prompt_token_ids, before.output_token_ids)
    err_before = max_abs_diff(hf_before, before.output_logprobs)
    assert err_before <= tol, f"HF vs vLLM before update: {err_before:.2e}"

    version_before = await server.weight_version() or 0
    checkpoint = scratch / "step1"
    ref.save_perturbed(checkpoint, scale=0.01)
    try:
        await update_servers_from_disk([server], str(checkpoint), version=version_before + 1)
        assert await server.weight_version() == version_before + 1
        # The served distribution moved: the same tokens now have other logprobs...
        same = await server.chat(messages, sampling)
        assert same.prompt_token_ids == before.prompt_token_ids
        hf_after_old_tokens = ref.logprobs(images, before.prompt_token_ids, before.output_token_ids)
        assert max_abs_diff(hf_after_old_tokens, hf_before) > 10 * tol
        # ...and the server agrees with the updated HF model on what it samples now.
        err_after = max_abs_diff(
            ref.logprobs(images, same.prompt_token_ids, same.output_token_ids), same.output_logprobs
        )
        assert err_after <= tol, f"HF vs vLLM after update: {err_after:.2e}"
        return err_before, err_after
    finally:  # the original weights back, so other tests see the model they expect
        restored = scratch / "restore"
        shutil.copytree(ref.model_dir, restored)
        await update_servers_from_disk([server], str(restored), version=version_before + 2)
