"""Generate a tiny Qwen2.5-VL or Qwen3-VL model, tokenizer and processor locally (no hub access).

The model has the real architecture (vision tower, mRoPE, image-token expansion; for Qwen3-VL also
DeepStack and interleaved mRoPE) at toy size, so the whole training path — vLLM serving, HF processor,
FSDP — runs on a laptop CPU. Weights are random but deterministic. Both families share one locally trained
BPE tokenizer (same ids) and chat template. The output is cached: it is regenerated only when this script,
its arguments or the transformers version change.

    python scripts/make_tiny_model.py --out DIR [--family qwen2.5-vl|qwen3-vl] [--tie-embeddings] [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

# Qwen2-VL special tokens, in the order their ids are assigned after the learned vocabulary.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Added after them, not special (as in Qwen2.5-VL's tokenizer): a server that decodes with special tokens
# skipped (vLLM's OpenAI API by default) must still return them, or no tool call is found in the text.
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>"]

# A ChatML template with Qwen-VL image placeholders: each image becomes
# <|vision_start|><|image_pad|><|vision_end|>, which the processor (and vLLM) expand to one pad per merged patch.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') or 'image' in part or 'image_url' in part -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

VOCAB_SIZE = 2048  # learned BPE merges + bytes; special tokens come on top
MERGE, TEMPORAL = 2, 2
# A 1280x800 screenshot becomes 640 image tokens (a 20x32 grid of merged patches) with either family:
# cheap enough for CPU, detailed enough to see a button.
MAX_IMAGE_TOKENS, MIN_IMAGE_TOKENS = 640, 16


def pixel_bounds(patch: int) -> tuple[int, int]:
    """(min_pixels, max_pixels) of the image processor for a vision patch size."""
    return MIN_IMAGE_TOKENS * (patch * MERGE) ** 2, MAX_IMAGE_TOKENS * (patch * MERGE) ** 2


def corpus(seed: int = 0) -> list[str]:
    """Deterministic training text for the tokenizer: action calls, UI words and plain English."""
    rng = random.Random(seed)
    words = [
        "click",
        "double_click",
        "right_click",
        "move",
        "drag",
        "scroll",
        "type",
        "key",
        "wait",
        "done",
        "screenshot",
        "button",
        "link",
        "text",
        "field",
        "input",
        "submit",
        "ok",
        "cancel",
        "the",
        "a",
        "to",
        "of",
        "and",
        "in",
        "is",
        "you",
        "on",
        "for",
        "with",
        "this",
        "that",
        "page",
        "task",
        "select",
        "option",
        "checkbox",
        "menu",
        "tab",
        "window",
        "file",
        "edit",
        "save",
        "open",
        "close",
        "enter",
        "escape",
        "ctrl",
        "alt",
        "shift",
        "up",
        "down",
        "left",
        "right",
        "amount",
        "coordinate",
        "x",
        "y",
        "from",
        "start",
        "end",
        "instruction",
        "previous",
        "action",
        "turn",
        "search",
        "box",
        "form",
        "list",
        "item",
        "first",
        "second",
        "third",
        "last",
        "name",
        "email",
        "password",
        "date",
        "time",
        "number",
    ]
    lines = []
    for _ in range(4000):
        action = rng.choice(words[:10])
        args = {"x": rng.randint(0, 1280), "y": rng.randint(0, 800)}
        if rng.random() < 0.3:
            args = {"text": " ".join(rng.choices(words, k=rng.randint(1, 5)))}
        lines.append(
            "<tool_call>"
            + json.dumps({"name": "computer", "arguments": {"action": action, **args}})
            + "</tool_call>"
        )
        lines.append(" ".join(rng.choices(words, k=rng.randint(3, 16))).capitalize() + ".")
    return lines


def build_tokenizer(out: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_CALL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def special_ids(tokenizer) -> dict[str, int]:
    return {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}


def token_fields(ids: dict[str, int], tie: bool) -> dict:
    """The special-token and embedding-tying fields of a config (the text config's and the model's)."""
    return dict(
        tie_word_embeddings=tie,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def vision_token_fields(ids: dict[str, int]) -> dict:
    return dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def padded_vocab(tokenizer) -> int:
    # padded like real checkpoints; ids beyond the tokenizer are never sampled in practice
    return (len(tokenizer) + 63) // 64 * 64


def save_model(out: Path, model, ids: dict[str, int], tie: bool) -> None:
    import torch

    if not tie:
        # Independent init for an untied head so the two matrices really differ.
        torch.nn.init.normal_(model.lm_head.weight, std=model.config.text_config.initializer_range)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out, safe_serialization=True)


# ---- Qwen2.5-VL ----------------------------------------------------------------------------------------------


def build_qwen2_5_vl(out: Path, tokenizer, tie: bool, seed: int) -> None:
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    patch = 14
    ids = special_ids(tokenizer)
    text = dict(
        vocab_size=padded_vocab(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 32: vLLM's CPU attention crashes on 16 (docs/architecture.md, vLLM)
        num_key_value_heads=1,
        max_position_embeddings=16384,
        rope_theta=1000000.0,
        rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]},  # sums to head_dim / 2
        **token_fields(ids, tie),
        torch_dtype="float32",
    )
    vision = dict(
        depth=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        out_hidden_size=64,
        patch_size=patch,
        spatial_merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        window_size=112,
        fullatt_block_indexes=[1],
        in_channels=3,
    )
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        **vision_token_fields(ids),
        **token_fields(ids, tie),
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32).eval()
    save_model(out, model, ids, tie)

    min_pixels, max_pixels = pixel_bounds(patch)
    image_processor = Qwen2VLImageProcessor(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=patch,
        merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
    )
    video_processor = Qwen2VLVideoProcessor(patch_size=patch, merge_size=MERGE, temporal_patch_size=TEMPORAL)
    Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(out)


# ---- Qwen3-VL ------------------------------------------------------------------------------------------------


def build_qwen3_vl(out: Path, tokenizer, tie: bool, seed: int) -> None:
    """Qwen3-VL-2B's layout at toy size: patch 16, DeepStack, interleaved mRoPE, learned vision positions.

    The image processor is Qwen2-VL's class, as in the real Qwen3-VL checkpoints (transformers has no
    Qwen3-VL image processor), with Qwen3-VL's patch size and its [0.5, 0.5, 0.5] mean/std; the video
    processor is Qwen3-VL's own."""
    import torch
    from transformers import (
        Qwen2VLImageProcessorFast,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    patch = 16
    ids = special_ids(tokenizer)
    text = dict(
        vocab_size=padded_vocab(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,  # vLLM's CPU attention crashes on 16 (docs/architecture.md, vLLM)
        hidden_act="silu",
        max_position_embeddings=16384,
        rms_norm_eps=1e-6,
        # Qwen3-VL's [24, 20, 20] of head_dim 128, scaled to 32: T/H/W frequencies interleaved (THWTHW...TT)
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        },
        **token_fields(ids, tie),
        dtype="float32",
    )
    vision = dict(
        # Three blocks so DeepStack taps two distinct intermediate blocks ([5, 11, 17] of 24 in the 2B),
        # feeding text layers 0 and 1; the final merger reads block 2.
        depth=3,
        deepstack_visual_indexes=[0, 1],
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        hidden_act="gelu_pytorch_tanh",
        out_hidden_size=64,  # = text hidden size
        patch_size=patch,
        spatial_merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        # A learned 48x48 grid, as in the real models, bilinearly resampled to each image's patch grid
        # (40x64 for a 1280x800 screenshot: both up- and down-sampling are exercised).
        num_position_embeddings=48 * 48,
        in_channels=3,
    )
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        **vision_token_fields(ids),
        **token_fields(ids, tie),
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32).eval()
    save_model(out, model, ids, tie)

    min_pixels, max_pixels = pixel_bounds(patch)
    qwen3_norm = dict(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    image_processor = Qwen2VLImageProcessorFast(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=patch,
        merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        **qwen3_norm,
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=patch, merge_size=MERGE, temporal_patch_size=TEMPORAL, **qwen3_norm
    )
    Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,  # Qwen3-VL renders images exactly as Qwen2.5-VL does
    ).save_pretrained(out)


FAMILIES = {"qwen2.5-vl": build_qwen2_5_vl, "qwen3-vl": build_qwen3_vl}


def inputs_hash(args: argparse.Namespace) -> str:
    # Package metadata, not `import transformers`: the up-to-date check must take milliseconds.
    from importlib.metadata import version

    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(
        f"family={args.family} tie={args.tie_embeddings} seed={args.seed} tf={version('transformers')}".encode()
    )
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--family", choices=sorted(FAMILIES), default="qwen2.5-vl", help="model architecture")
    p.add_argument("--tie-embeddings", action="store_true", help="share lm_head with the input embeddings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="regenerate even if the cached copy is current")
    args = p.parse_args(argv)

    out: Path = args.out.expanduser().resolve()
    stamp = out / ".inputs_hash"
    want = inputs_hash(args)
    if not args.force and stamp.is_file() and stamp.read_text().strip() == want:
        print(f"tiny model: up to date ({out})", file=sys.stderr)
        return 0

    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and swap in at the end: a reader never sees a half-written model.
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        tokenizer = build_tokenizer(tmp)
        FAMILIES[args.family](tmp, tokenizer, tie=args.tie_embeddings, seed=args.seed)
        (tmp / ".inputs_hash").write_text(want + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"tiny model: generated {out} ({args.family}, tied embeddings: {args.tie_embeddings})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
