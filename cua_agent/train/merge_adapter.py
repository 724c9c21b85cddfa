"""Merge a LoRA adapter (an HF save of a LoRA run: PEFT format) into its base model, for serving without LoRA:

    python -m cua_agent.train.merge_adapter ADAPTER_DIR OUT_DIR [--base MODEL] [--dtype bfloat16]

The base defaults to the adapter's `base_model_name_or_path`. OUT_DIR gets the merged weights, the config and
the base's processor and tokenizer: a model folder vLLM and transformers load as they load the base.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")


def merge(adapter: Path, out: Path, base: str | None = None, dtype: str = "bfloat16") -> Path:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    config_path = adapter / "adapter_config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{adapter} is not a PEFT adapter (no adapter_config.json)")
    base = base or json.loads(config_path.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{config_path} names no base model: pass --base")
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=getattr(torch, dtype))
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    AutoProcessor.from_pretrained(base).save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m cua_agent.train.merge_adapter", description=__doc__.split("\n")[0]
    )
    ap.add_argument("adapter", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--base", default=None, help="base model folder or hub id (default: the adapter's)")
    ap.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = merge(args.adapter, args.out, args.base, args.dtype)
    except (FileNotFoundError, ValueError) as exc:
        print(f"merge_adapter: {exc}", file=sys.stderr)
        return 2
    print(f"merged {args.adapter} into {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
