"""What one weight sync gathers on rank 0's host, at 2 trainer ranks (gloo, real processes, AReaL's FSDP
engine). AReaL 1.0.4's `_save_model_to_hf` gathers the full state dict, the frozen base included, in
optimizer_dtype to rank 0 on every step: for the 32B LoRA config, 124 GiB of fp32 base to write a 256 MiB
adapter. A LoRA sync gathers the adapter alone; a full sync, every parameter."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from bench.weight_sync_memory import sync as one_sync
from cua_agent.inference.local_server import MODELS

pytestmark = pytest.mark.slow


def sync(tmp: Path, *overrides: str) -> dict:
    """One weight-update save at 2 ranks on the tiny model (bench/weight_sync_memory.py's worker)."""
    return one_sync(MODELS["untied"], tmp, *overrides)


def test_a_lora_sync_gathers_the_adapter_alone(tmp_path: Path):
    got = sync(tmp_path, "actor.use_lora=true", "actor.lora_rank=8", "actor.lora_alpha=16")
    base = [k for k in got["keys"] if "lora_" not in k]
    assert got["keys"] and base == [], f"{len(base)} frozen base tensors gathered, e.g. {base[:3]}"
    with safe_open(tmp_path / "save" / "adapter_model.safetensors", "pt") as f:
        saved = list(f.keys())
    assert saved and all("lora_A.weight" in k or "lora_B.weight" in k for k in saved), saved[:4]
    model_bytes = sum(f.stat().st_size for f in MODELS["untied"].glob("model*.safetensors"))
    print(
        f"\nLoRA sync gathered {got['bytes']} bytes ({len(got['keys'])} tensors); the model is {model_bytes}"
    )
    assert got["bytes"] < model_bytes / 5


def test_a_full_sync_gathers_every_parameter(tmp_path: Path):
    got = sync(tmp_path)
    with safe_open(MODELS["untied"] / "model.safetensors", "pt") as f:
        params = len(list(f.keys()))
    assert len(got["keys"]) == params
