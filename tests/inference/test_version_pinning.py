"""Each output token carries the weight version its request was sent under, even when an update lands while
the request is in flight. AReaL 1.0.4's RemoteInfEngine.agenerate read the version again after the response
(fixed upstream after 1.0.4); StockVLLMEngine replaces agenerate and achat and reads it once per request.
The server is a stand-in here: the point is when the engine reads its version, not what a server returns
(the real server's side: test_engine.py)."""

from __future__ import annotations

import asyncio

from areal.api import ModelRequest
from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig

from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.model_call import ModelCall
from cua_agent.inference.vllm_server import SamplingParams


def engine_updated_mid_request(sent_at: int) -> StockVLLMEngine:
    """An engine at version `sent_at` whose every request completes after an update to `sent_at + 1`."""
    engine = StockVLLMEngine(InferenceEngineConfig(experiment_name="pin", trial_name="pin"))
    engine.addresses = ["127.0.0.1:1"]
    engine.set_version(sent_at)

    async def generate(address, call) -> ModelCall:
        engine.set_version(sent_at + 1)  # the trainer's update lands while the server answers
        return ModelCall(
            "ok", prompt_token_ids=[1, 2], output_token_ids=[7, 8, 9], output_logprobs=[-0.1] * 3
        )

    engine._generate = generate  # type: ignore[method-assign]
    return engine


def test_a_chat_turn_keeps_the_version_it_was_sent_under():
    engine = engine_updated_mid_request(10)
    call = asyncio.run(engine.achat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3)))
    assert call.version == 10 and engine.get_version() == 11


def test_token_generation_tags_every_output_token_with_the_version_it_was_sent_under():
    engine = engine_updated_mid_request(10)
    request = ModelRequest(input_ids=[1, 2], gconfig=GenerationHyperparameters(max_new_tokens=3))
    response = asyncio.run(engine.agenerate(request))
    assert response.output_versions == [10, 10, 10] and engine.get_version() == 11
