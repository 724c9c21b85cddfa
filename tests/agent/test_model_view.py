"""ModelView.count_tokens: the prompt budget (agent.max_prompt_tokens, evaluate --max-prompt-tokens) is
only as good as this count. With transformers 5, apply_chat_template(tokenize=True) returns a
BatchEncoding, which is no dict: the count was its number of keys (2), so no prompt was ever cut."""

from __future__ import annotations

from cua_agent.episode.model_view import ModelView
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.processing import load_processor


def test_count_tokens_counts_the_prompts_tokens():
    view = ModelView(load_processor(str(MODELS["untied"])), "qwen2.5-vl")
    messages = [
        {"role": "system", "content": "You operate a computer. " * 20},
        {"role": "user", "content": [{"type": "text", "text": "Click the button. " * 30}]},
    ]
    text = view.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = len(view.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert expected > 200
    assert view.count_tokens(messages) == expected
