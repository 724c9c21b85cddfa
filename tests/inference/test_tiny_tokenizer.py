"""The tiny model's tokenizer marks tool calls as Qwen2.5-VL's does: `<tool_call>` and `</tool_call>` are
added tokens that are not special, so an OpenAI-compatible server, which decodes with special tokens
skipped (vLLM's default), still returns them and the evaluation's parser finds the call."""

from __future__ import annotations

import pytest

from cua_agent.inference.local_server import MODELS
from cua_agent.inference.processing import load_processor


@pytest.mark.parametrize("model", sorted(MODELS))
def test_tool_call_markers_survive_decoding_without_special_tokens(model):
    tok = load_processor(MODELS[model]).tokenizer
    text = '<tool_call>\n{"name": "computer"}\n</tool_call>'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<tool_call>") in ids  # one token, as in Qwen's vocabulary
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode([tok.convert_tokens_to_ids("<|im_end|>")], skip_special_tokens=True) == ""
