"""StockVLLMEngine under AReaL's own rollout machinery, against a real vLLM CPU server: a workflow submitted
through AReaL's executor gets exact ids/logprobs; token-in/token-out generation; a disk weight update
driven by AReaL's protocol (pause → update future → "saved" signal in name_resolve → continue); a turn
aborted by a weight update is generated again, whole, after it."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from areal.api import ModelRequest, WeightUpdateMeta
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig, NameResolveConfig
from areal.api.workflow_api import RolloutWorkflow
from areal.infra.workflow_executor import check_trajectory_format
from areal.utils import name_resolve, names

from cua_agent.inference.engine import SERVER_CHECK_EVERY_S, StockVLLMEngine
from cua_agent.inference.local_server import MODELS, free_port
from cua_agent.inference.vllm_server import SamplingParams, VLLMServer, close_loop_session
from cua_agent.inference.weight_sync import update_servers_from_disk
from tests.inference.reference import HFReference, chat_messages, screenshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(vllm_servers, tmp_path_factory):
    name_resolve.reconfigure(
        NameResolveConfig(type="nfs", nfs_record_root=str(tmp_path_factory.mktemp("nr")))
    )
    config = InferenceEngineConfig(
        experiment_name="test-engine",
        trial_name=uuid.uuid4().hex[:8],
        max_concurrent_rollouts=4,
        consumer_batch_size=2,
        request_timeout=120,
        request_retries=2,
        setup_timeout=60,
        pause_grace_period=0.5,
    )
    eng = StockVLLMEngine(config)
    eng.initialize(addr=[vllm_servers["untied"].address], train_data_parallel_size=1)
    yield eng
    eng.destroy()


class ScreenshotChat(RolloutWorkflow):
    """One chat turn on a screenshot, as one training row."""

    async def arun_episode(self, engine: StockVLLMEngine, data: dict) -> dict:
        images = [screenshot(data["seed"])]
        turn = await engine.achat(
            chat_messages(images, "Click OK."), SamplingParams(max_tokens=8, seed=data["seed"])
        )
        g = turn
        ids = g.prompt_token_ids + g.output_token_ids
        n_prompt, n_out = len(g.prompt_token_ids), len(g.output_token_ids)
        return {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.bool),
            "loss_mask": torch.tensor([[0] * n_prompt + [1] * n_out]),
            "logprobs": torch.tensor([[0.0] * n_prompt + g.output_logprobs]),
            "versions": torch.tensor([[-1] * n_prompt + [turn.version] * n_out]),
            "rewards": torch.tensor([1.0]),
        }


def test_workflow_through_areal_executor_gets_exact_rows(engine):
    rows = engine.rollout_batch([{"seed": 1}, {"seed": 2}], workflow=ScreenshotChat())
    ref = HFReference(MODELS["untied"])
    assert len(rows) == 2
    for row in rows:
        check_trajectory_format(row)
        out = row["loss_mask"][0].bool()
        ids = row["input_ids"][0].tolist()
        n_prompt = int((~out).sum())
        # rows come back in completion order: the screenshot that reproduces the logprobs is the one sent
        errs = [
            max(
                abs(a - b)
                for a, b in zip(
                    ref.logprobs([screenshot(s)], ids[:n_prompt], ids[n_prompt:]),
                    row["logprobs"][0][out].tolist(),
                    strict=True,
                )
            )
            for s in (1, 2)
        ]
        assert min(errs) <= 1e-3, errs
        assert set(row["versions"][0][out].tolist()) == {0}


def test_token_in_token_out(engine):
    tok = HFReference(MODELS["untied"]).processor.tokenizer
    req = ModelRequest(
        input_ids=tok.encode("click the button"),
        gconfig=GenerationHyperparameters(max_new_tokens=6, temperature=1.0),
    )
    resp = asyncio.run(engine.agenerate(req))
    assert len(resp.output_tokens) == len(resp.output_logprobs) == len(resp.output_versions) == 6
    assert resp.input_tokens == req.input_ids and resp.stop_reason == "length"


def test_disk_update_via_areal_protocol_advances_served_version(engine, tmp_path: Path):
    ref = HFReference(MODELS["untied"])
    server = VLLMServer(engine.addresses[0])
    path = tmp_path / "weight_update_v1"
    meta = WeightUpdateMeta(type="disk", path=str(path), version=engine.get_version() + 1)
    # AReaL's FSDP engine: pause servers, start the update future, save, then publish the "saved" signal.
    engine.pause_generation()
    future = engine.update_weights_from_disk(meta)
    time.sleep(0.5)
    assert not future.done(), "the update must wait for the trainer's saved signal"
    ref.save_perturbed(path, scale=0.01)
    key = names.update_weights_from_disk(
        engine.config.experiment_name, engine.config.trial_name, engine.get_version()
    )
    name_resolve.add(key, str(time.time()), keepalive_ttl=120)
    load_s = future.result(timeout=120)
    engine.continue_generation()
    engine.set_version(meta.version)
    assert load_s >= 0
    assert asyncio.run(_version(server)) == meta.version
    (row,) = engine.rollout_batch([{"seed": 3}], workflow=ScreenshotChat())
    out = row["loss_mask"][0].bool()
    assert set(row["versions"][0][out].tolist()) == {meta.version}
    # Restore the original weights for the rest of the session through the engine, as a trainer would:
    # restored behind its back, the engine still took the perturbed copy for its current weights and put it
    # back on the server the next time a request failed (seen: a later test's parity check failed).
    restore = tmp_path / "weight_update_restore"
    shutil.copytree(MODELS["untied"], restore)
    back = _update_through(engine, restore)
    assert back == meta.version + 1 and asyncio.run(_version(server)) == back
    assert not asyncio.run(_closing(engine.ensure_current_weights(server.address)))


def _update_through(engine: StockVLLMEngine, path: Path) -> int:
    """A weight update as AReaL's FSDP engine drives it (pause, update future, saved signal, resume)."""
    meta = WeightUpdateMeta(type="disk", path=str(path), version=engine.get_version() + 1)
    engine.pause_generation()
    future = engine.update_weights_from_disk(meta)
    key = names.update_weights_from_disk(
        engine.config.experiment_name, engine.config.trial_name, engine.get_version()
    )
    name_resolve.add(key, str(time.time()), keepalive_ttl=120)
    future.result(timeout=120)
    engine.continue_generation()
    engine.set_version(meta.version)
    return meta.version


def test_a_server_that_lost_the_weights_unseen_by_this_rank_gets_them_back(engine, tmp_path: Path):
    """A restart that no request of the owner met (another rank's did, or none was in flight): the owner's
    check of its servers pushes the current weights again within a few seconds. The restart is stood in for
    by what a restarted server serves: the base model's weights, at version 0, loaded behind the engine's
    back (a real restart is the training fault test's; here no request can see the server go)."""
    server = VLLMServer(engine.addresses[0])
    current = tmp_path / "current"
    shutil.copytree(MODELS["untied"], current)  # the base weights, so later tests see the same model
    version = _update_through(engine, current)
    before = engine.counters["weight_repushes"]
    asyncio.run(_closing(update_servers_from_disk([server], str(MODELS["untied"]), 0)))
    seen = [asyncio.run(_version(server))]
    deadline = time.monotonic() + 3 * SERVER_CHECK_EVERY_S + 60  # a reload of the tiny model takes seconds
    while seen[-1] != version and time.monotonic() < deadline:
        time.sleep(0.5)
        seen.append(asyncio.run(_version(server)))
    assert seen[0] == 0 and seen[-1] == version, seen
    assert engine.counters["weight_repushes"] == before + 1


async def _version(server: VLLMServer) -> int | None:
    try:
        return await server.weight_version()
    finally:
        await close_loop_session()


def test_turn_aborted_by_weight_update_is_regenerated_whole(engine):
    """pause_generation aborts in-flight requests on the server; achat waits out the pause and generates
    the whole turn again, so its tokens come from one version."""
    # Still in flight when we pause 1.5 s in (800 tokens: ~3.5 s alone on a slow 2-core machine, longer beside
    # another test; if the pause came late, `attempts` would be 1), and generated again well within the
    # engine's 120 s request timeout (4000 tokens were not, beside another test).
    long = SamplingParams(max_tokens=800, temperature=1.0, ignore_eos=True)
    messages = [{"role": "user", "content": "write a long story"}]
    started = threading.Event()

    async def run():
        started.set()
        try:
            return await engine.achat(messages, long)
        finally:
            await close_loop_session()

    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(asyncio.run, run())
        started.wait(10)
        time.sleep(1.5)
        engine.pause()  # AReaL's trainer pauses the executor, then the servers
        engine.pause_generation()
        time.sleep(0.5)
        assert not fut.done(), "achat must wait while the engine is paused"
        engine.continue_generation()
        engine.resume()
        turn = fut.result(timeout=300)
    assert turn.attempts == 2
    assert turn.finish_reason in ("stop", "length")
    assert len(turn.output_token_ids) == len(turn.output_logprobs) > 0


def test_pause_and_resume_around_an_update_skip_a_server_that_is_down(engine):
    """A server that is down (restarting) during a weight update must not fail the training step: the
    others are paused and resumed, and it is counted stale (it gets the weights when it is back)."""
    live = list(engine.addresses)
    server = VLLMServer(live[0])
    before = engine.counters["stale_servers"]
    engine.addresses = [*live, f"127.0.0.1:{free_port()}"]
    try:
        engine.pause_generation()
        assert asyncio.run(_closing(server.is_paused()))
        engine.continue_generation()
        assert not asyncio.run(_closing(server.is_paused()))
    finally:
        engine.addresses = live
    assert engine.counters["stale_servers"] == before + 2


async def _closing(coro):
    try:
        return await coro
    finally:
        await close_loop_session()
