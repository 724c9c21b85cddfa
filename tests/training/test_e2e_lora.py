"""LoRA weight sync against a real vLLM CPU server that serves adapters (VLLM_LORA_RANK): each version's
adapter loads under a versioned name and is verified there (cua_agent/inference/adapter_sync.py), also when
an update leaves every B at zero; served adapters reproduce HF + PEFT's logprobs (both families, across an
update); a version synced again with other tensors gets a name of its own; a server that cannot serve the
run's adapters is refused at start, not after the first step; several ranks start LoRA on one server without
colliding, and every rank's requests name the adapter of their version. LoRA training end to end, at 2
trainer ranks, stopped and resumed: the rehearsal of configs/cua_grpo_qwen3vl_32b_lora.yaml
(tests/rehearsal)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from cua_agent.config import lora_target_regex
from cua_agent.inference.adapter_sync import (
    PROBE_PROMPTS,
    adapter_digest,
    adapter_name,
    load_adapter,
    top_logprobs_moved,
)
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.errors import WeightUpdateError
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from tests.conftest import _engine
from tests.conftest import lora_server as shared_lora_server
from tests.inference.reference import PARITY_TOL, HFReference, chat_messages, max_abs_diff, screenshot

pytestmark = pytest.mark.slow
RANK = 8
STEPS = 3


@pytest.fixture(scope="module")
def lora_server(artefacts: Path):
    """A server of the untied tiny model that serves LoRA adapters up to rank RANK (its own: the shared ones
    do not serve adapters)."""
    yield from shared_lora_server(MODELS["untied"], artefacts, RANK, 4)


def random_adapter(model: torch.nn.Module, out: Path, rank: int = RANK, seed: int = 0) -> PeftModel:
    """An adapter on the language model's projections (as the trainer puts them) whose B matrices are not
    zero, so it changes what the model says; saved in PEFT format to `out`."""
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=16, target_modules=lora_target_regex()))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    peft.save_pretrained(out)
    return peft


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
            probes = await server.next_token_logprobs(PROBE_PROMPTS, "probe-a")
            assert [len(p) for p in probes] == [20] * len(PROBE_PROMPTS)
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


@pytest.mark.parametrize(
    ("fixture", "model"),
    [("lora_server", MODELS["untied"]), ("qwen3_vl_lora_server", QWEN3_VL_MODELS["untied"])],
)
def test_an_adapter_is_verified_while_the_server_generates(
    fixture: str, model: Path, request, tmp_path: Path
):
    """A sync resumes the server before it verifies the adapter (other ranks' rollouts go on meanwhile), so
    the verifying probes share engine steps with generations. vLLM's CPU LoRA logits path sizes prompt
    logprobs by the batch's sampled requests: a prompt-logprobs probe beside other requests killed the engine
    (`einsum(): subscript b has size 4 ... 31`) and with it the training run. As in a run, the first version's
    predecessor is version 0's adapter, the fresh one (B = 0)."""
    from transformers import AutoModelForImageTextToText

    random_adapter(AutoModelForImageTextToText.from_pretrained(model), tmp_path / "trained", seed=3)
    fresh = get_peft_model(
        AutoModelForImageTextToText.from_pretrained(model),
        LoraConfig(r=RANK, lora_alpha=16, target_modules=lora_target_regex()),
    )
    fresh.save_pretrained(tmp_path / "initial")
    # longer than the loads take on either model (~60 s of generation on the tiny Qwen3-VL): aborted after
    long = SamplingParams(max_tokens=2000, temperature=1.0, ignore_eos=True)
    names = ["busy-v0", "busy-rollouts", "busy-v1", "busy-v2"]

    async def go() -> None:
        server = VLLMServer(request.getfixturevalue(fixture).address)
        try:
            await server.load_lora_adapter("busy-v0", str(tmp_path / "initial"))
            await server.load_lora_adapter("busy-rollouts", str(tmp_path / "trained"))  # a rollout's version
            generating = [
                asyncio.create_task(
                    server.complete_tokens(list(range(20 + i, 60 + i)), long, model="busy-rollouts")
                )
                for i in range(4)
            ]
            await asyncio.sleep(0.5)  # the generations are scheduled
            moved = await load_adapter(
                server, str(tmp_path / "trained"), "busy-v1", previous="busy-v0", changed=True, unload=[]
            )
            await load_adapter(
                server, str(tmp_path / "trained"), "busy-v2", previous="busy-v1", changed=False, unload=[]
            )
            # the probes shared engine steps with all four generations, and none of them failed
            assert [t for t in generating if t.done()] == [], [t.result() for t in generating if t.done()]
            for t in generating:
                t.cancel()
            await asyncio.gather(*generating, return_exceptions=True)
            await server.pause("abort")  # the server drops the cancelled generations
            await server.resume()
            assert moved > 0.01
            after = await server.complete_tokens(
                list(range(20, 60)), SamplingParams(max_tokens=8, ignore_eos=True), model="busy-v2"
            )
            assert len(after.output_token_ids) == 8 and await server.healthy()
            for name in names:
                await server.unload_lora_adapter(name)
        finally:
            await close_loop_session()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("family", "fixture", "model"),
    [
        ("qwen2.5-vl", "lora_server", MODELS["untied"]),
        ("qwen3-vl", "qwen3_vl_lora_server", QWEN3_VL_MODELS["untied"]),
    ],
)
def test_served_adapters_reproduce_hf_with_peft_across_an_update(
    family: str, fixture: str, model: Path, request, tmp_path: Path
):
    """Two versions of an adapter loaded as the sync loads them (verified); each served name gives the logprobs
    HF + PEFT gives with that version, the older one too while the newer is served (requests in flight)."""
    address = request.getfixturevalue(fixture).address
    ref = HFReference(model)
    images = [screenshot(5), screenshot(6)]
    peft = random_adapter(ref.model, tmp_path / "v1")
    with torch.no_grad():  # an update: every adapter tensor moves
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    peft.save_pretrained(tmp_path / "v2")

    async def load_and_sample() -> dict[str, object]:
        server = VLLMServer(address)
        try:
            await load_adapter(
                server, str(tmp_path / "v1"), f"{family}-v1", previous=None, changed=True, unload=[]
            )
            await load_adapter(
                server, str(tmp_path / "v2"), f"{family}-v2", previous=f"{family}-v1", changed=True, unload=[]
            )
            out = {}
            for name in (None, f"{family}-v1", f"{family}-v2"):
                out[str(name)] = await VLLMServer(address, model=name).chat(
                    chat_messages(images, "Click OK."), SamplingParams(max_tokens=16, seed=0)
                )
            await server.unload_lora_adapter(f"{family}-v1")
            await server.unload_lora_adapter(f"{family}-v2")
            return out
        finally:
            await close_loop_session()

    served = asyncio.run(load_and_sample())
    base = peft.unload()  # the model without the adapter's layers
    errors, expected = {}, {}
    for name, adapter in (("None", None), (f"{family}-v1", "v1"), (f"{family}-v2", "v2")):
        ref.model = (
            base if adapter is None else PeftModel.from_pretrained(base, str(tmp_path / adapter)).eval()
        )
        gen = served[name]
        expected[name] = ref.logprobs(images, gen.prompt_token_ids, gen.output_token_ids)
        errors[name] = max_abs_diff(expected[name], gen.output_logprobs)
        if adapter is not None:
            base = ref.model.unload()
    v1 = served[f"{family}-v1"]
    ref.model = base
    plain = ref.logprobs(images, v1.prompt_token_ids, v1.output_token_ids)
    assert max_abs_diff(plain, expected[f"{family}-v1"]) > 1e-2, "the adapter must change what the model says"
    print(f"\n{family}: max |HF+PEFT - vLLM| per served name {errors}")
    assert max(errors.values()) <= PARITY_TOL, errors


def test_a_server_that_cannot_serve_the_runs_adapters_is_refused_at_start(
    lora_server, vllm_servers, tmp_path: Path
):
    """Without VLLM_LORA_RANK the server has no LoRA API; with a smaller rank it cannot take the adapter.
    Either way the engine says so when the trainer hands it the initial adapter, before any episode."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    random_adapter(model, tmp_path / "rank8")
    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    random_adapter(model, tmp_path / "rank16", rank=16)

    engine = _engine(vllm_servers["untied"].address)
    with pytest.raises(WeightUpdateError, match="VLLM_LORA_RANK"):
        next(engine).serve_lora("default_lora", 2, initial_adapter=str(tmp_path / "rank8"))
    engine.close()
    engine = _engine(lora_server.address)
    with pytest.raises(WeightUpdateError, match="rank 16"):
        next(engine).serve_lora("default_lora", 2, initial_adapter=str(tmp_path / "rank16"))
    next(engine, None)
    assert not [n for n in served(lora_server.address) if n.startswith("default_lora")]


def test_a_version_synced_again_with_other_tensors_is_not_served_from_the_old_ones_prefix_cache(
    lora_server, tmp_path: Path
):
    """A resume from an older checkpoint, or a trial started over, syncs version N again from the same directory
    with other tensors while the server may still hold the old ones. vLLM keys its prefix cache by adapter name
    and path, so the name a version is served under must change with its tensors: otherwise a prompt cached
    under the old adapter is reused, and the new one's logprobs are wrong."""
    ref = HFReference(MODELS["untied"])
    path = tmp_path / "weight_update_v1"
    images = [screenshot(7), screenshot(8)]

    async def sync_and_sample() -> tuple[str, object]:
        # the load alone, without load_adapter's probe: a loaded adapter's tensors may still be read from the
        # directory that is overwritten here, which is not what this test is about
        try:
            name = adapter_name("default_lora", 1, adapter_digest(path))
            await VLLMServer(lora_server.address).load_lora_adapter(name, str(path))
            gen = await VLLMServer(lora_server.address, model=name).chat(
                chat_messages(images, "Click OK."), SamplingParams(max_tokens=16, seed=0)
            )
            return name, gen
        finally:
            await close_loop_session()

    base = random_adapter(ref.model, path, seed=1).unload()
    first, _ = asyncio.run(sync_and_sample())  # the old tensors, their prompt now in the prefix cache
    ref.model = random_adapter(base, path, seed=2)  # the same version, other tensors, same directory
    second, gen = asyncio.run(sync_and_sample())
    err = max_abs_diff(ref.logprobs(images, gen.prompt_token_ids, gen.output_token_ids), gen.output_logprobs)

    async def unload() -> None:
        try:
            for name in {first, second}:
                await VLLMServer(lora_server.address).unload_lora_adapter(name)
        finally:
            await close_loop_session()

    asyncio.run(unload())
    print(f"\nserved names {first} then {second}; max |HF+PEFT - vLLM| {err:.2e}")
    assert err <= PARITY_TOL


def test_a_run_never_asks_for_the_base_model_under_lora(lora_server, tmp_path: Path):
    """vLLM's CPU LoRA kernels select each request's adapter slot by index, and the base model's index is -1:
    a base-model request batched with adapter requests was served with the last slot's adapter (silently
    another policy). Here the server's slots are all taken and it generates under an adapter; the base model's
    next-token logprobs came out as that adapter's (0.25 off). A run's version 0 is therefore served as the
    trainer's initial adapter (B = 0, exactly the base model): every rank names it, and it serves the base."""
    import threading
    import uuid

    from areal.api.cli_args import NameResolveConfig
    from areal.utils import name_resolve
    from transformers import AutoModelForImageTextToText

    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "name_resolve")))
    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    fresh = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, target_modules=lora_target_regex()))
    fresh.save_pretrained(tmp_path / "initial")  # PEFT's fresh adapter: B = 0
    random_adapter(AutoModelForImageTextToText.from_pretrained(MODELS["untied"]), tmp_path / "busy", seed=5)
    fillers = [f"filler-{i}" for i in range(4)]  # every slot of the server (it serves 4 at once) taken
    long = SamplingParams(max_tokens=300, ignore_eos=True)

    async def base_and_version_0_while_busy(version_0: str) -> tuple[float, float]:
        server = VLLMServer(lora_server.address)
        try:
            idle = await server.next_token_logprobs(PROBE_PROMPTS)
            for name in fillers:  # loaded and used once: each takes a slot
                await server.load_lora_adapter(name, str(tmp_path / "busy"))
                await server.next_token_logprobs(PROBE_PROMPTS[:1], name)
            busy = [
                asyncio.create_task(server.complete_tokens(list(range(30, 50)), long, model=fillers[-1]))
                for _ in range(3)
            ]
            await asyncio.sleep(0.5)
            base = await server.next_token_logprobs(PROBE_PROMPTS)
            v0 = await server.next_token_logprobs(PROBE_PROMPTS, version_0)
            await asyncio.gather(*busy)
            for name in fillers:
                await server.unload_lora_adapter(name)
            return (
                max(top_logprobs_moved(b, i) for b, i in zip(base, idle, strict=True)),
                max(top_logprobs_moved(v, i) for v, i in zip(v0, idle, strict=True)),
            )
        finally:
            await close_loop_session()

    trial = uuid.uuid4().hex[:8]
    ranks = [rank_engine(lora_server.address, trial, owner=r == 0) for r in range(4)]
    try:
        # the four ranks start LoRA at once; the followers wait for the owner's version 0
        starts = [
            threading.Thread(
                target=e.serve_lora,
                args=("default_lora", 2),
                kwargs={"initial_adapter": str(tmp_path / "initial")},
            )
            for e in reversed(ranks)
        ]
        for t in starts:
            t.start()
        for t in starts:
            t.join(timeout=120)
        version_0 = adapter_name("default_lora", 0, adapter_digest(tmp_path / "initial"))
        assert [e.model_for(0) for e in ranks] == [version_0] * 4
        assert version_0 in served(lora_server.address)
        base_moved, v0_moved = asyncio.run(base_and_version_0_while_busy(version_0))
        print(f"\nbusy server: base model moved {base_moved:.3f}, version 0's adapter moved {v0_moved:.3g}")
        assert v0_moved < 1e-3, "version 0 must serve what the base model serves on an idle server"
    finally:
        for engine in reversed(ranks):  # a follower's exit leaves the owner's adapters alone
            engine.destroy()
    assert not [n for n in served(lora_server.address) if n.startswith("default_lora")]
    assert (tmp_path / "initial").is_dir()  # the trainer's, not the engine's to remove


def rank_engine(address: str, trial: str, owner: bool) -> StockVLLMEngine:
    """A trainer rank's rollout engine as CUATrainer builds it: rank 0 owns the weights, the others follow."""
    from areal.api.cli_args import InferenceEngineConfig

    config = InferenceEngineConfig(
        experiment_name="tests", trial_name=trial, request_timeout=120, request_retries=2, setup_timeout=60
    )
    engine = StockVLLMEngine(config, weights_owner=owner)
    engine.initialize(addr=[address], train_data_parallel_size=2)
    return engine


def test_every_rank_samples_from_the_adapter_of_its_weight_version(lora_server, tmp_path: Path):
    """AReaL loads new weights from rank 0's engine only. Rank 1's engine named the base model for the whole
    run while its rows carried the current version (off-policy data that looked on-policy). Here rank 0 syncs
    version 1 as AReaL's FSDP engine drives it (the weights-saved signal, then the load), both ranks get the
    new version, and each rank's request is answered by version 1's adapter."""
    import uuid

    from areal.api import WeightUpdateMeta
    from areal.api.cli_args import NameResolveConfig
    from areal.utils import name_resolve, names
    from transformers import AutoModelForImageTextToText

    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "name_resolve")))

    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    random_adapter(model, tmp_path / "initial", seed=3)
    random_adapter(AutoModelForImageTextToText.from_pretrained(MODELS["untied"]), tmp_path / "v1", seed=4)
    trial = uuid.uuid4().hex[:8]
    ranks = [rank_engine(lora_server.address, trial, owner=r == 0) for r in range(2)]
    try:
        for engine in ranks:
            engine.serve_lora("default_lora", 2, initial_adapter=str(tmp_path / "initial"))
        fut = ranks[0].update_weights_from_disk(
            WeightUpdateMeta(type="disk", path=str(tmp_path / "v1"), version=1)
        )
        name_resolve.add(names.update_weights_from_disk("tests", trial, 0), "saved", replace=True)
        fut.result(timeout=120)
        for engine in ranks:
            engine.set_version(1)
        expected = adapter_name("default_lora", 1, adapter_digest(tmp_path / "v1"))
        assert [e.model_for(1) for e in ranks] == [expected, expected]

        async def ask(engine: StockVLLMEngine):
            try:
                return await engine.achat(
                    chat_messages([screenshot(9)], "Click OK."), SamplingParams(max_tokens=4, seed=0)
                )
            finally:
                await close_loop_session()

        calls = [asyncio.run(ask(e)) for e in ranks]
        assert [(c.version, c.model) for c in calls] == [(1, expected), (1, expected)]
    finally:
        for engine in reversed(ranks):  # a follower's exit leaves the owner's adapters alone
            engine.destroy()
    assert not [n for n in served(lora_server.address) if n.startswith("default_lora")]


def test_an_update_that_leaves_every_b_at_zero_is_not_taken_for_a_server_that_ignored_it(
    lora_server, tmp_path: Path
):
    """A first step whose groups all had equal rewards trains with advantage 0: the gradients are zero, the
    adapter's B matrices stay 0, and AdamW's weight decay still shrinks A. The file changed, what it serves
    (B A = 0, the base model) did not: the sync's check took that for a server that ignored the new adapter
    and failed the step (seen in the rehearsal of configs/cua_grpo_qwen3vl_32b_lora.yaml)."""
    import uuid

    from areal.api import WeightUpdateMeta
    from areal.api.cli_args import NameResolveConfig
    from areal.utils import name_resolve, names
    from transformers import AutoModelForImageTextToText

    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path / "name_resolve")))
    model = AutoModelForImageTextToText.from_pretrained(MODELS["untied"])
    peft = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=16, target_modules=lora_target_regex()))
    peft.save_pretrained(tmp_path / "initial")  # PEFT's fresh adapter: B = 0
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_A" in name:
                p.mul_(1 - 1e-5 * 0.01)  # one AdamW step of decay, no gradient
    peft.save_pretrained(tmp_path / "v1")
    assert adapter_digest(tmp_path / "v1") != adapter_digest(tmp_path / "initial")
    trial = uuid.uuid4().hex[:8]
    engine = rank_engine(lora_server.address, trial, owner=True)
    try:
        engine.serve_lora("default_lora", 2, initial_adapter=str(tmp_path / "initial"))
        fut = engine.update_weights_from_disk(
            WeightUpdateMeta(type="disk", path=str(tmp_path / "v1"), version=1)
        )
        name_resolve.add(names.update_weights_from_disk("tests", trial, 0), "saved", replace=True)
        fut.result(timeout=120)
        engine.set_version(1)
        assert engine.model_for(1) == adapter_name("default_lora", 1, adapter_digest(tmp_path / "v1"))
    finally:
        engine.destroy()
