"""The HF processor on the trainer side, configured exactly as the vLLM server's.

The trainer must compute `pixel_values` for exactly the images the server saw, with the same resize. vLLM's
environment (transformers 5.19) loads Qwen-VL's PIL ("slow") image processor, while the trainer's
transformers 5.3 defaults to the torchvision ("fast") one, whose resampling differs slightly: measured
4.8e-3 logprob error after a weight update with fast, 2.2e-4 with slow. Always load the slow one here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_processor(model_dir: str | Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model_dir), use_fast=False)
