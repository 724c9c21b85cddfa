"""The trainer's processor and the vLLM server's environment produce bit-identical pixel values.

Runs the server environment's own transformers (in its venv) on the same noise image: a noise image is
the worst case for resize differences (PIL and torchvision bicubic differ by up to 0.028 on it)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cua_agent.inference.local_server import MODELS, vllm_python
from cua_agent.inference.processing import load_processor

SERVER_SIDE = textwrap.dedent(
    """
    import sys, numpy as np
    from PIL import Image
    from transformers import AutoProcessor
    img = Image.open(sys.argv[2]).convert("RGB")
    p = AutoProcessor.from_pretrained(sys.argv[1])  # what vLLM's default loading gets
    np.save(sys.argv[3], p.image_processor(images=[img], return_tensors="pt")["pixel_values"].numpy())
    """
)


@pytest.mark.slow
def test_trainer_pixels_equal_server_pixels(tmp_path: Path):
    rng = np.random.default_rng(0)
    image = tmp_path / "noise.png"
    Image.fromarray(rng.integers(0, 255, (800, 1280, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "server.npy"
    subprocess.run(
        [vllm_python(), "-c", SERVER_SIDE, str(MODELS["untied"]), str(image), str(out)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    ours = (
        load_processor(MODELS["untied"])
        .image_processor(images=[Image.open(image).convert("RGB")], return_tensors="pt")["pixel_values"]
        .numpy()
    )
    assert ours.shape == np.load(out).shape
    assert np.array_equal(ours, np.load(out))
