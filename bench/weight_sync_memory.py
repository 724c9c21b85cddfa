#!/usr/bin/env python
"""Host memory of one weight sync on rank 0, measured against the figure `train_areal.py --check` gives
for it (cua_agent/train/preflight.py `weight_sync_host_bytes`), full weights against a LoRA adapter.

Every step, AReaL's FSDP engine gathers the weights to sync to rank 0's host (`_save_model_to_hf`) and
writes them as an HF checkpoint for the vLLM servers. This runs that save with AReaL's engine at 2 trainer
ranks (torchrun, gloo) on the tiny model's architecture made wide enough that the weights dominate rank 0's
resident memory (about 90M parameters, random weights, in a temporary folder: the tiny model's 2 MB would
drown in allocator noise), in the GPU configs' precision (bf16 compute, fp32 master weights), and prints
per case: the bytes gathered, rank 0's peak RSS rise during the save (VmHWM reset just before), the
preflight's estimate and their ratio.

    python bench/weight_sync_memory.py [--hidden 1024] [--layers 8] [--lora-rank 16]
    python bench/weight_sync_memory.py --worker MODEL_DIR OUT_DIR [key=value ...]   (one rank; under torchrun)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cua_agent.inference.local_server import MODELS, REPO

GIB = 1024**3
PRECISION = ["actor.dtype=bfloat16", "actor.optimizer_dtype=float32"]  # the GPU configs'


def worker(model_dir: str, out_dir: str, *overrides: str) -> None:
    """One rank: AReaL's FSDP actor of configs/local_cpu.yaml (+ overrides) with our trainer patches, one
    `_save_model_to_hf`. Rank 0 writes OUT_DIR/gathered.json: the tensors the save gathered to its host
    ({"keys", "bytes"}) and its resident memory before and its peak rise during the save."""
    import torch.distributed as dist
    from areal.api import FinetuneSpec
    from areal.api.alloc_mode import ModelAllocation
    from areal.api.cli_args import load_expr_config
    from areal.engine import fsdp_engine
    from areal.engine.fsdp_engine import FSDPPPOActor

    from cua_agent.config import CUAGRPOConfig, lora_target_modules
    from cua_agent.train import patches as trainer_patches

    config, _ = load_expr_config(
        ["--config", str(REPO / "configs" / "local_cpu.yaml"), f"actor.path={model_dir}", *overrides],
        CUAGRPOConfig,
    )
    if config.actor.use_lora:  # as CUATrainer hands them to AReaL
        config.actor.target_modules = lora_target_modules(config)  # type: ignore[assignment]
    trainer_patches.install(config.actor.attn_impl)
    actor = FSDPPPOActor(config.actor)
    parallel = ModelAllocation.from_str(config.actor.backend, name="actor").parallel
    actor.create_process_group(parallel_strategy=parallel)
    actor.initialize(
        addr=None, ft_spec=FinetuneSpec(total_train_epochs=1, dataset_size=2, train_batch_size=2)
    )

    gathered: dict[str, int] = {}
    get = fsdp_engine.get_model_state_dict

    def recording(*args, **kwargs):
        state = get(*args, **kwargs)
        gathered.update({k: v.numel() * v.element_size() for k, v in state.items()})
        return state

    fsdp_engine.get_model_state_dict = recording
    out = Path(out_dir)
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) counts from here
    before = _status_kib("VmRSS")
    actor._save_model_to_hf(str(out / "save"), None, None)
    peak = _status_kib("VmHWM")
    if dist.get_rank() == 0:
        result = {"keys": sorted(gathered), "bytes": sum(gathered.values())}
        result.update(rss_before=before * 1024, peak_rss_rise=(peak - before) * 1024)
        (out / "gathered.json").write_text(json.dumps(result))
    actor.destroy()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def sync(model_dir: Path, out_dir: Path, *overrides: str, ranks: int = 2, timeout_s: float = 600) -> dict:
    """One save by `ranks` trainer ranks (torchrun); rank 0's gathered.json."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
           __file__, "--worker", str(model_dir), str(out_dir), f"actor.backend=fsdp:d{ranks}", *overrides]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"sync failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads((out_dir / "gathered.json").read_text())


def wide_model(out: Path, hidden: int, layers: int) -> Path:
    """The untied tiny Qwen2.5-VL's architecture, tokenizer and processor with a wider, deeper language
    model (random weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    shutil.copytree(MODELS["untied"], out, ignore=shutil.ignore_patterns("model*.safetensors*"))
    cfg = AutoConfig.from_pretrained(out)
    heads = hidden // 64
    cfg.text_config.update(
        {
            "hidden_size": hidden,
            "intermediate_size": hidden * 11 // 4,
            "num_hidden_layers": layers,
            "layer_types": ["full_attention"] * layers,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 8),
        }
    )
    cfg.text_config.rope_parameters["mrope_section"] = [8, 12, 12]  # head_dim 64
    cfg.vision_config.out_hidden_size = hidden
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(cfg).save_pretrained(out)
    return out


def estimate(model_dir: Path, *overrides: str) -> float:
    from areal.api.cli_args import load_expr_config

    from cua_agent.config import CUAGRPOConfig
    from cua_agent.train.preflight import model_shape, weight_sync_host_bytes

    config, _ = load_expr_config(
        ["--config", str(REPO / "configs" / "local_cpu.yaml"), f"actor.path={model_dir}", *overrides],
        CUAGRPOConfig,
    )
    return weight_sync_host_bytes(config, model_shape(model_dir, (1280, 800)))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--lora-rank", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sync-memory-") as tmp:
        model = wide_model(Path(tmp) / "model", args.hidden, args.layers)
        lora = [
            "actor.use_lora=true",
            f"actor.lora_rank={args.lora_rank}",
            f"actor.lora_alpha={2 * args.lora_rank}",
        ]
        cases = {"full weights": PRECISION, f"LoRA rank {args.lora_rank}": [*PRECISION, *lora]}
        print(
            f"Rank 0's host memory for one weight sync, 2 trainer ranks, bf16 compute / fp32 master weights ({model})"
        )
        print(
            f"{'case':<16} {'gathered':>12} {'peak RSS rise':>15} {'--check':>12} {'estimate/measured':>18}"
        )
        results = {}
        for name, overrides in cases.items():
            got = sync(model, Path(tmp) / name.replace(" ", "-"), *overrides)
            est = estimate(model, *overrides)
            results[name] = got
            print(
                f"{name:<16} {got['bytes'] / 2**20:>9.1f} MiB {got['peak_rss_rise'] / 2**20:>11.1f} MiB "
                f"{est / 2**20:>8.1f} MiB {est / max(got['peak_rss_rise'], 1):>17.2f}"
            )
        full, adapter = results["full weights"], results[f"LoRA rank {args.lora_rank}"]
        print(
            f"LoRA against full: {adapter['bytes'] / full['bytes']:.4f} of the bytes gathered, "
            f"{adapter['peak_rss_rise'] / max(full['peak_rss_rise'], 1):.4f} of the peak rise"
        )


if __name__ == "__main__":
    main()
