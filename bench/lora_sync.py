#!/usr/bin/env python
"""Weight sync of a LoRA adapter against a full-model sync, same model, same server, same run: bytes written
and seconds per sync (save + load on a vLLM CPU server serving adapters), and their ratios. Then the estimate
for Qwen3-VL-32B at rank 16 (the deployment guide's LoRA) from its parameter count (shape files in
tests/fixtures/models, no weights).

Full sync: the model saved as an HF checkpoint, then reloaded in place by the server (pause, reload, cache
resets, version). Adapter sync: the PEFT adapter saved, then loaded under a new name and verified
(cua_agent/inference/adapter_sync.py).

    python bench/lora_sync.py [--rank 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.config import lora_target_regex
from cua_agent.inference.adapter_sync import adapter_digest, load_adapter
from cua_agent.inference.local_server import MODELS, REPO, start_vllm
from cua_agent.inference.vllm_server import VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk

LANGUAGE_MODEL = lora_target_regex()  # the default targets of a LoRA run


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def lora_params(model: torch.nn.Module, rank: int) -> int:
    """Parameters of rank-`rank` adapters on the language model's projections: r * (in + out) each."""
    return sum(
        rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and re.fullmatch(LANGUAGE_MODEL, name)
    )


async def measure(address: str, scratch: Path, rank: int, repeats: int) -> dict[str, list[float]]:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    server = VLLMServer(address)
    out: dict[str, list[float]] = {"full_s": [], "full_bytes": [], "adapter_s": [], "adapter_bytes": []}
    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"], dtype=torch.float32)
    for i in range(repeats):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        path = scratch / f"full{i}"
        start = time.perf_counter()
        model.save_pretrained(path)
        await update_servers_from_disk([server], str(path), version=i + 1)
        out["full_s"].append(time.perf_counter() - start)
        out["full_bytes"].append(dir_bytes(path))
    await update_servers_from_disk([server], str(MODELS["untied"]), version=repeats + 1)  # the base back

    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=LANGUAGE_MODEL))
    previous, digest = None, None
    for i in range(repeats):
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name:
                    p.add_(torch.randn_like(p) * 0.1)
        path = scratch / f"adapter{i}"
        start = time.perf_counter()
        peft.save_pretrained(path)
        name = f"bench-v{i + 1}"
        changed = adapter_digest(path) != digest
        await load_adapter(server, str(path), name, previous=previous, changed=changed, unload=[])
        out["adapter_s"].append(time.perf_counter() - start)
        out["adapter_bytes"].append(dir_bytes(path))
        previous, digest = name, adapter_digest(path)
    await close_loop_session()
    return out


def estimate_32b(rank: int) -> tuple[int, int]:
    """(base parameters, adapter parameters) of Qwen3-VL-32B, counted on the meta device."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(REPO / "tests" / "fixtures" / "models" / "qwen3-vl-32b")
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters()), lora_params(model, rank)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_vllm(MODELS["untied"], Path(tmp), lora=(args.rank, 4))
        try:
            proc.wait_healthy(600)
            r = asyncio.run(measure(proc.address, Path(tmp), args.rank, args.repeats))
        finally:
            proc.stop()
    med = {k: statistics.median(v) for k, v in r.items()}
    print(f"tiny Qwen2.5-VL, rank {args.rank}, median of {args.repeats} syncs (fp32 files)")
    print(f"{'':10}{'bytes':>14}{'seconds':>10}")
    print(f"{'full':10}{med['full_bytes']:>14.0f}{med['full_s']:>10.3f}")
    print(f"{'adapter':10}{med['adapter_bytes']:>14.0f}{med['adapter_s']:>10.3f}")
    print(
        f"{'ratio':10}{med['full_bytes'] / med['adapter_bytes']:>14.1f}{med['full_s'] / med['adapter_s']:>10.1f}"
        "   (full / adapter)"
    )
    base, adapter = estimate_32b(args.rank)
    print(
        f"Qwen3-VL-32B, rank {args.rank} on the language model: {base / 1e9:.2f}B parameters, adapter "
        f"{adapter / 1e6:.1f}M; bf16 files: full {base * 2 / 2**30:.1f} GiB, adapter {adapter * 2 / 2**20:.0f} "
        f"MiB, {base / adapter:.0f}x fewer bytes per sync"
    )


if __name__ == "__main__":
    main()
