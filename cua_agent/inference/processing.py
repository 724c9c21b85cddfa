"""The HF processor on the trainer side, configured exactly as the vLLM server's.

The trainer must compute `pixel_values` for exactly the images the server saw, with the same resize.
Measured (tests/inference/test_processor_match.py): vLLM's environment (transformers 5.19) loads Qwen-VL's
torchvision-backed image processor by default, and the trainer's transformers 5.3 calls the same
implementation `...Fast`: the two give bit-identical pixel values on a noise image, while the PIL
("slow") processor differs by up to 0.028. On smooth synthetic screenshots the difference hides; on real
screenshots (text, sharp edges) it costs ~1e-3 in logprobs. So: always the fast one here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_processor(model_dir: str | Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model_dir), use_fast=True)
