"""One exact training row per model call: the server's prompt ids + output ids, loss mask on the output,
the server's logprobs and weight version, and the pixel values of exactly the images sent — checked
against the server (the image tokens in its prompt == what this processor makes of the images)."""

from __future__ import annotations

import io
from typing import Any

import torch
from PIL import Image

from cua_agent.episode.model_view import ModelView
from cua_agent.inference.model_call import ModelCall


class RowMismatchError(RuntimeError):
    """The trainer-side view of a call disagrees with the server's (processor or template drift)."""


class PlaceholderInOutput(ValueError):
    """The model sampled one of its own vision placeholder tokens: the policy's failure, not the
    infrastructure's (such a row cannot be trained exactly: the trainer's model would read an image slot)."""


class RowBuilder:
    def __init__(self, view: ModelView):
        self.view = view

    def row(self, call: ModelCall, reward: float) -> dict[str, Any]:
        """One training row for one model call."""
        prompt, out = call.prompt_token_ids, call.output_token_ids
        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in call.images]
        mm: dict[str, torch.Tensor] = {}
        expected = 0
        if images:
            enc = self.view.image_processor(images=images, return_tensors="pt")
            mm = {"pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}
            expected = int((enc["image_grid_thw"].prod(-1) // self.view.merge**2).sum())
        if set(out) & set(self.view.vision_token_ids):
            raise PlaceholderInOutput(
                "a vision placeholder token in the output (the model's own input markup)"
            )
        found = prompt.count(self.view.image_token_id)
        if found != expected:
            raise RowMismatchError(
                f"{found} image tokens in the server's prompt but {expected} from the processor for "
                f"{len(images)} image(s): trainer and server processors differ"
            )
        ids = prompt + out
        n_p, n_o = len(prompt), len(out)
        row: dict[str, Any] = {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.bool),
            "loss_mask": torch.tensor([[0] * n_p + [1] * n_o], dtype=torch.int32),
            "logprobs": torch.tensor([[0.0] * n_p + call.output_logprobs], dtype=torch.float32),
            "versions": torch.tensor([[-1] * n_p + [call.version] * n_o], dtype=torch.int32),
            "mm_token_type_ids": torch.tensor(
                [[int(t == self.view.image_token_id) for t in ids]], dtype=torch.long
            ),
            "rewards": torch.tensor([reward], dtype=torch.float32),
        }
        if mm:
            row["multi_modal_input"] = [mm]
        return row
