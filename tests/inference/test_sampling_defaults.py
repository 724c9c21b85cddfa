"""The server samples exactly the distribution the trainer recomputes, even for a model whose
generation_config.json carries sampling defaults (Qwen2.5-VL-7B-Instruct ships repetition_penalty 1.05,
top_k, top_p; the tiny models ship none, so the parity tests cannot see this). vLLM's OpenAI server applies
such defaults to every parameter a request leaves out, and returns logprobs from before them.

A copy of the tiny model gets strong defaults (repetition_penalty 5, top_k 2); the server is started by our
launcher. Checked on the server's own output: greedy tokens are the argmax of the raw logprobs (no penalty
acted), and sampled tokens fall outside the raw top 2 (no truncation acted)."""

from __future__ import annotations

import json
import shutil

import aiohttp
import pytest

from cua_agent.inference.local_server import MODELS, start_vllm
from cua_agent.inference.vllm_server import SamplingParams
from tests.inference.reference import chat_messages, screenshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_with_defaults(tmp_path_factory):
    model = tmp_path_factory.mktemp("model") / "tiny-with-generation-defaults"
    shutil.copytree(MODELS["untied"], model)
    gen = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**gen, "repetition_penalty": 5.0, "top_k": 2}))
    server = start_vllm(model, model.parent)
    try:
        server.wait_healthy(400)
        yield server
    finally:
        server.stop()


async def completion(address: str, model: str, payload: dict) -> list[dict]:
    """Per output token: the sampled token's raw logprob and the raw top logprobs at that position."""
    body = {
        "model": model,
        "messages": chat_messages([screenshot(0)], "Click the Submit button."),
        "logprobs": True,
        "top_logprobs": 3,  # vLLM lists the sampled token among them
        **payload,
    }
    async with aiohttp.ClientSession() as s, s.post(f"http://{address}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["choices"][0]["logprobs"]["content"]


def argmax_followed(tokens: list[dict]) -> bool:
    return all(t["logprob"] >= max(alt["logprob"] for alt in t["top_logprobs"]) - 1e-6 for t in tokens)


def outside_top2(tokens: list[dict]) -> int:
    """Tokens with at least two more likely alternatives (vLLM may list the sampled token among them)."""
    return sum(sum(alt["logprob"] > t["logprob"] + 1e-6 for alt in t["top_logprobs"]) >= 2 for t in tokens)


async def test_our_requests_sample_the_plain_distribution(server_with_defaults):
    s = server_with_defaults
    greedy = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True).to_payload()
    assert argmax_followed(await completion(s.address, str(s.model_dir), greedy))
    sampled = SamplingParams(max_tokens=128, temperature=1.0, seed=1, ignore_eos=True).to_payload()
    assert outside_top2(await completion(s.address, str(s.model_dir), sampled)) > 10


async def test_the_launcher_ignores_the_models_defaults_for_what_a_request_leaves_out(server_with_defaults):
    s = server_with_defaults
    bare = {"max_tokens": 48, "temperature": 0.0, "ignore_eos": True}  # no penalty, no top_k
    assert argmax_followed(await completion(s.address, str(s.model_dir), bare))
    bare = {"max_tokens": 128, "temperature": 1.0, "seed": 1, "ignore_eos": True}
    assert outside_top2(await completion(s.address, str(s.model_dir), bare)) > 10


async def test_logprobs_are_of_the_raw_distribution_whatever_the_temperature(vllm_servers):
    """Why training refuses agent.temperature != 1 (cua_agent/config.py): the first answer token's logprobs
    do not depend on what was sampled, and at temperature 0.5 they are those of temperature 1, not of the
    sharper distribution the token was drawn from (that one would put more mass on the top token)."""
    s = vllm_servers["untied"]
    firsts = []
    for temperature in (1.0, 0.5):
        params = SamplingParams(max_tokens=1, temperature=temperature, seed=1).to_payload()
        first = (await completion(s.address, str(s.model_dir), params))[0]
        firsts.append(sorted((alt["token"], round(alt["logprob"], 4)) for alt in first["top_logprobs"]))
    assert firsts[0] == firsts[1]
