"""`python -m cua_agent.train.merge_adapter`: an adapter merged into its base gives the model PEFT gives (the
folder loads as the base does, with its processor), and a folder that is not an adapter is refused."""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForImageTextToText

from cua_agent.inference.local_server import MODELS
from cua_agent.train.merge_adapter import main
from tests.inference.reference import HFReference, screenshot


def test_merged_model_scores_like_the_base_with_its_adapter(tmp_path: Path, capsys):
    base = MODELS["untied"]
    model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.float32)
    peft = get_peft_model(
        model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"])
    )
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            p.data.normal_(std=0.3)
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)

    assert main([str(adapter), str(tmp_path / "merged"), "--dtype", "float32"]) == 0
    merged = HFReference(tmp_path / "merged")  # its own processor and config: a model folder like the base
    with_adapter = HFReference(base)
    plain = with_adapter.logprobs([screenshot(1)], *_ids(with_adapter))
    with_adapter.model = PeftModel.from_pretrained(with_adapter.model, str(adapter)).eval()
    ids = _ids(with_adapter)
    expected = with_adapter.logprobs([screenshot(1)], *ids)
    got = merged.logprobs([screenshot(1)], *ids)
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-4
    assert max(abs(a - b) for a, b in zip(plain, expected, strict=True)) > 1e-2  # the adapter matters

    assert main([str(tmp_path), str(tmp_path / "out")]) == 2
    assert "is not a PEFT adapter" in capsys.readouterr().err


def _ids(ref: HFReference) -> tuple[list[int], list[int]]:
    """A one-screenshot prompt as the processor expands it, and a few answer tokens."""
    text = ref.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Click OK."}]}],
        add_generation_prompt=True,
    )
    prompt = ref.processor(text=[text], images=[screenshot(1)], return_tensors="pt")["input_ids"][0].tolist()
    return prompt, [10, 20, 30, 40]
