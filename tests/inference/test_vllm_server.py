"""A real vLLM CPU server: exact token ids and logprobs for screenshot prompts, HF parity before and after a
weight update, for untied and tied (lm_head = embeddings) models."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cua_agent.inference.errors import WeightUpdateError
from cua_agent.inference.local_server import MODELS, VLLMProcess, die_with_parent, free_port, vllm_python
from cua_agent.inference.tied_head import ties_embeddings
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk
from tests.inference.reference import HFReference, chat_messages, parity_across_update, screenshot

pytestmark = pytest.mark.slow

SAMPLING = SamplingParams(max_tokens=16, temperature=1.0, seed=0)


@pytest.fixture(autouse=True)
async def _close_sessions():
    yield
    await close_loop_session()


@pytest.fixture(scope="module")
def refs() -> dict[str, HFReference]:
    return {name: HFReference(path) for name, path in MODELS.items()}


@pytest.mark.parametrize("n_images", [1, 2])
async def test_chat_returns_ids_logprobs_and_expanded_image_tokens(vllm_servers, refs, n_images):
    server = VLLMServer(vllm_servers["untied"].address)
    ref = refs["untied"]
    images = [screenshot(seed) for seed in range(n_images)]
    gen = await server.chat(chat_messages(images, "Click the Submit button."), SAMPLING)

    assert len(gen.output_token_ids) == len(gen.output_logprobs) > 0
    assert all(lp <= 0.0 for lp in gen.output_logprobs)
    assert (
        gen.prompt_token_ids.count(ref.image_token_id) == ref.expected_image_tokens(images) == 640 * n_images
    )
    # The server's prompt is the chat template applied by the same tokenizer, image pads expanded.
    text = ref.processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [
                    *({"type": "image"} for _ in images),
                    {"type": "text", "text": "Click the Submit button."},
                ],
            }
        ],
        add_generation_prompt=True,
    )
    expected = ref.processor(text=[text], images=images, return_tensors="pt")["input_ids"][0].tolist()
    assert gen.prompt_token_ids == expected


async def test_banned_tokens_are_never_sampled(vllm_servers):
    """Half the vocabulary banned via logit bias: without the ban about half the samples fall there."""
    server = VLLMServer(vllm_servers["untied"].address)
    banned = list(range(0, 1000))
    gen = await server.chat(
        [{"role": "user", "content": "write anything"}],
        SamplingParams(max_tokens=64, temperature=1.0, ignore_eos=True, banned_token_ids=banned),
    )
    assert len(gen.output_token_ids) == 64
    assert not set(gen.output_token_ids) & set(banned)


@pytest.mark.parametrize("variant", ["untied", "tied"])
async def test_parity_before_and_after_weight_update(vllm_servers, refs, variant, tmp_path: Path):
    proc, ref = vllm_servers[variant], refs[variant]
    assert ties_embeddings(ref.model_dir) == (variant == "tied")
    err_before, err_after = await parity_across_update(VLLMServer(proc.address), ref, tmp_path, SAMPLING)
    print(f"\nparity {variant}: before {err_before:.2e}, after update {err_after:.2e}")
    refs[variant] = HFReference(ref.model_dir)


async def test_tied_checkpoint_on_a_tied_server_is_refused(artefacts, tmp_path: Path):
    """A server started by hand on the raw tied checkpoint (not through our launchers) would keep a stale
    head: the update says so instead of silently serving a policy other than the one being trained."""
    raw = start_raw_vllm(MODELS["tied"], artefacts)
    try:
        raw.wait_healthy(400)
        checkpoint = tmp_path / "tied-copy"
        shutil.copytree(MODELS["tied"], checkpoint)
        with pytest.raises(WeightUpdateError, match="serves a tied model"):
            await update_servers_from_disk([VLLMServer(raw.address)], str(checkpoint), version=1)
        assert not await VLLMServer(raw.address).is_paused(), "a failed update must leave the server serving"
    finally:
        raw.stop()


def start_raw_vllm(model_dir: Path, log_dir: Path) -> VLLMProcess:
    """vLLM on `model_dir` exactly as given, bypassing our launcher (and its serving copy of tied models):
    what a user who starts the server by hand gets."""
    port = free_port()
    log_path = log_dir / f"vllm-raw-{model_dir.name}-{port}.log"
    scratch = log_dir / f"vllm-raw-{port}"  # its IPC sockets and temp files, which vLLM leaves behind
    scratch.mkdir()
    env = {
        **os.environ,
        "VLLM_RPC_BASE_PATH": str(scratch),
        "TMPDIR": str(scratch),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_SERVER_DEV_MODE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        vllm_python(),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--distributed-executor-backend",
        "uni",
        "--max-model-len",
        "4096",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    return VLLMProcess(model_dir, port, log_path, proc)
