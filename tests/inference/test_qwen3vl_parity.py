"""The tiny Qwen3-VL (patch 16, DeepStack, interleaved mRoPE) served by vLLM CPU: the server's prompt ids are
the HF processor's, and the trainer's HF model recomputes the server's logprobs, untied and tied, before and
after a weight update.

The servers are the session's `qwen3_vl_servers` (tests/conftest.py), shared with the Qwen3-VL consistency
and training tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from cua_agent.inference.local_server import QWEN3_VL_MODELS, VLLMProcess
from cua_agent.inference.tied_head import ties_embeddings
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from tests.inference.reference import PARITY_TOL, HFReference, chat_messages, parity_across_update, screenshot

pytestmark = pytest.mark.slow

SAMPLING = SamplingParams(max_tokens=16, temperature=1.0, seed=0)
INSTRUCTION = "Click the Submit button."
TOKENS_PER_SCREENSHOT = 640  # 1280x800 -> 640x1024 pixels -> 40x64 patches of 16 -> 20x32 merged


@pytest.fixture(autouse=True)
async def _close_sessions():
    yield
    await close_loop_session()


@pytest.fixture(scope="module", params=["untied", "tied"])
def served(request, qwen3_vl_servers) -> tuple[str, VLLMProcess, HFReference]:
    """(variant, server, HF reference) for one tiny Qwen3-VL; the module's tests run per variant in turn."""
    variant = request.param
    return variant, qwen3_vl_servers[variant], HFReference(QWEN3_VL_MODELS[variant])


@pytest.mark.parametrize("n_images", [1, 2])
async def test_server_prompt_and_logprobs_match_hf(served, n_images):
    variant, proc, ref = served
    assert ref.model.config.model_type == "qwen3_vl"
    assert ties_embeddings(ref.model_dir) == (variant == "tied")
    images = [screenshot(seed) for seed in range(n_images)]
    gen = await VLLMServer(proc.address).chat(chat_messages(images, INSTRUCTION), SAMPLING)
    assert len(gen.output_token_ids) == len(gen.output_logprobs) > 0

    # The server's prompt is what the trainer's processor produces for the same messages.
    assert (
        gen.prompt_token_ids.count(ref.image_token_id)
        == ref.expected_image_tokens(images)
        == TOKENS_PER_SCREENSHOT * n_images
    )
    content = [*({"type": "image"} for _ in images), {"type": "text", "text": INSTRUCTION}]
    text = ref.processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True
    )
    expected = ref.processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
    assert gen.prompt_token_ids == expected

    hf = ref.logprobs(images, gen.prompt_token_ids, gen.output_token_ids)
    err = max(abs(a - b) for a, b in zip(hf, gen.output_logprobs, strict=True))
    print(f"\nqwen3-vl {variant}, {n_images} screenshot(s): max |HF - vLLM| logprob {err:.2e}")
    assert err <= PARITY_TOL, f"{variant}, {n_images} screenshot(s): HF vs vLLM {err:.2e}"


async def test_parity_before_and_after_weight_update(served, tmp_path: Path):
    variant, proc, ref = served
    err_before, err_after = await parity_across_update(VLLMServer(proc.address), ref, tmp_path, SAMPLING)
    print(f"\nqwen3-vl {variant}: parity before {err_before:.2e}, after a weight update {err_after:.2e}")
