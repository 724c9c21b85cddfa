"""What the policy sees of a screen: the processor's resize, its image tokens, and the coordinate mapping
between the model's coordinates and screen pixels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from cua_agent.episode.coordinates import CoordinateMapping
from cua_agent.episode.families import check_checkpoint, family_named

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


class ModelView:
    """`family`: the model family's name (its coordinate convention decides the mapping)."""

    def __init__(self, processor: Any, family: str):
        self.processor = processor
        self.image_processor = processor.image_processor
        self.family = family_named(family)
        self.convention = self.family.convention
        self.tokenizer = processor.tokenizer
        self.image_token_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.vision_token_ids = [self.tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
        self.merge = int(self.image_processor.merge_size)
        self._grids: dict[tuple[int, int], tuple[int, int, int]] = {}

    @classmethod
    def of_model(cls, path: str | Path, family: str) -> ModelView:
        """The view of a model folder or hub id, refused when `family` does not match its config.json."""
        from cua_agent.inference.model_files import model_dir
        from cua_agent.inference.processing import load_processor

        check_checkpoint(family, model_dir(path, files=["config.json"]))
        return cls(load_processor(str(path)), family)

    def grid(self, screen_w: int, screen_h: int) -> tuple[int, int, int]:
        """(t, h, w) patch grid of a screen-sized image after the processor's resize (cached per size)."""
        if (screen_w, screen_h) not in self._grids:
            enc = self.image_processor(images=[Image.new("RGB", (screen_w, screen_h))], return_tensors="pt")
            t, h, w = (int(v) for v in enc["image_grid_thw"][0])
            self._grids[(screen_w, screen_h)] = (t, h, w)
        return self._grids[(screen_w, screen_h)]

    def mapping(self, screen_w: int, screen_h: int) -> CoordinateMapping:
        """Screen <-> model coordinates; "absolute" means pixels of the resized image the model saw."""
        _, gh, gw = self.grid(screen_w, screen_h)
        patch = int(self.image_processor.patch_size)
        return CoordinateMapping(screen_w, screen_h, gw * patch, gh * patch, self.convention)  # type: ignore[arg-type]

    def image_tokens(self, screen_w: int, screen_h: int) -> int:
        t, h, w = self.grid(screen_w, screen_h)
        return t * h * w // self.merge**2

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        # transformers 5 returns a BatchEncoding: a Mapping, not a dict (len() of it counts its keys)
        return len(ids["input_ids"] if isinstance(ids, Mapping) else ids)
