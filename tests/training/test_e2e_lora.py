"""LoRA GRPO through the real stack: `train_areal.py` with actor.use_lora on the tiny Qwen2.5-VL, AReaL's FSDP
actor with PEFT, a vLLM CPU server that serves adapters (VLLM_LORA_RANK), real sandboxes. Each step's adapter
alone goes to the server under a versioned name and is verified there (cua_agent/inference/adapter_sync.py);
adapters older than the staleness window are unloaded; the served adapter reproduces the trainer's logprobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from peft import PeftModel

from cua_agent.inference.adapter_sync import PROBE_TOKENS, adapter_digest, load_adapter
from cua_agent.inference.errors import WeightUpdateError
from cua_agent.inference.local_server import MODELS, start_vllm
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from tests.conftest import SERVER_START_TIMEOUT_S
from tests.inference.reference import PARITY_TOL, HFReference, chat_messages, max_abs_diff, screenshot
from tests.training.harness import SMALL_STEP_ARGS, left_in_session, run_training

pytestmark = pytest.mark.slow
RANK = 8
STEPS = 3


@pytest.fixture(scope="module")
def lora_server(artefacts: Path):
    """A server of the untied tiny model that serves LoRA adapters (its own: the shared ones do not)."""
    proc = start_vllm(MODELS["untied"], artefacts, lora=(RANK, 4))
    try:
        proc.wait_healthy(SERVER_START_TIMEOUT_S)
        yield proc
    finally:
        proc.stop()


def served(address: str) -> list[str]:
    async def go() -> list[str]:
        try:
            return await VLLMServer(address).served_models()
        finally:
            await close_loop_session()

    return asyncio.run(go())


async def _load(address: str, name: str, path: Path) -> None:
    try:
        await VLLMServer(address).load_lora_adapter(name, str(path))
    finally:
        await close_loop_session()


def test_lora_grpo_steps_sync_only_the_adapter_and_the_server_serves_it(lora_server, tmp_path: Path):
    exp = tmp_path / "exp"
    run = run_training(
        [
            *SMALL_STEP_ARGS,
            f"cluster.fileroot={exp}",
            f"total_train_steps={STEPS}",
            f'inference.addresses=["{lora_server.address}"]',
            "actor.use_lora=true",
            f"actor.lora_rank={RANK}",
            "actor.lora_alpha=16",
            "recover.mode=disabled",
            "rollout.max_head_offpolicyness=0",  # 2 adapter versions kept loaded
            f"saver.freq_steps={STEPS}",  # the HF save users deploy: the adapter after the last step
        ],
        tmp_path / "run.log",
    )
    log = run.log.read_text(errors="replace")
    assert run.rc == 0, f"train_areal.py exited {run.rc} after {run.elapsed_s:.0f}s:\n{run.tail()}"
    assert left_in_session(run.pid) == [], "the run left processes behind"
    for v in range(1, STEPS + 1):
        assert f"LoRA adapter default_lora-v{v} serves weight version {v}" in log, v
    # While training the newest two versions were served (v1 unloaded once v3 served); at the end the run's
    # adapters leave the server and its sync directories go.
    assert "unloading LoRA adapters ['default_lora-v2', 'default_lora-v3']" in log
    assert not [n for n in served(lora_server.address) if n.startswith("default_lora")]
    assert not list(exp.glob("checkpoints/*/*/*/default/weight_update_v*"))

    # What users deploy: the HF save of a LoRA run is the adapter in PEFT format, a fraction of the model.
    (save,) = exp.glob(f"checkpoints/*/*/*/default/*globalstep{STEPS - 1}*")
    assert (save / "adapter_config.json").is_file() and not list(save.glob("model*.safetensors"))
    weights = save / "adapter_model.safetensors"
    model_bytes = sum(f.stat().st_size for f in MODELS["untied"].glob("model*.safetensors"))
    print(f"\nadapter {weights.stat().st_size} bytes, model {model_bytes} bytes, {run.elapsed_s:.0f}s")
    assert weights.stat().st_size < model_bytes / 10
    episodes = [json.loads(line) for line in (exp / "rollouts.jsonl").read_text().splitlines()]
    assert {t["version"] for e in episodes for t in e["turns"]} >= {0, 1}, "later steps sampled from adapters"

    # Parity with the adapter active: the server serving the saved adapter gives the HF model's logprobs with it.
    asyncio.run(_load(lora_server.address, "final", save))
    ref = HFReference(MODELS["untied"])
    ref.model = PeftModel.from_pretrained(ref.model, str(save)).eval()
    images = [screenshot(3), screenshot(4)]

    async def sample():
        try:
            server = VLLMServer(lora_server.address, model="final")
            return await server.chat(
                chat_messages(images, "Click OK."), SamplingParams(max_tokens=16, seed=0)
            )
        finally:
            await close_loop_session()

    gen = asyncio.run(sample())
    err = max_abs_diff(ref.logprobs(images, gen.prompt_token_ids, gen.output_token_ids), gen.output_logprobs)
    print(f"LoRA parity after {STEPS} updates: max |HF+PEFT - vLLM| {err:.2e}")
    assert err <= PARITY_TOL


def test_an_adapter_load_that_changes_nothing_on_the_server_is_an_error(lora_server, tmp_path: Path):
    """The sync's check against the failure other stacks report as staleness: the name is new and its tensors
    are said to have changed, but the server serves what it served before (here: the same adapter files
    loaded under a second name)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    adapter = tmp_path / "adapter"
    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    peft = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            p.data.normal_(std=0.5)
    peft.save_pretrained(adapter)
    assert adapter_digest(adapter)

    async def go() -> None:
        server = VLLMServer(lora_server.address)
        try:
            moved = await load_adapter(
                server, str(adapter), "probe-a", previous=None, changed=True, unload=[]
            )
            assert moved > 0  # a real change of the served distribution is seen
            assert len(await server.prompt_logprobs(PROBE_TOKENS, "probe-a")) == len(PROBE_TOKENS) - 1
            with pytest.raises(WeightUpdateError, match="serves exactly what probe-a served"):
                await load_adapter(
                    server, str(adapter), "probe-b", previous="probe-a", changed=True, unload=[]
                )
            await load_adapter(
                server,
                str(adapter),
                "probe-c",
                previous="probe-a",
                changed=False,
                unload=["probe-a", "probe-b"],
            )
            assert not {"probe-a", "probe-b"} & set(await server.served_models())
        finally:
            await close_loop_session()

    asyncio.run(go())
