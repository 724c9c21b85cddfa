"""Session-wide fixtures: real vLLM CPU servers (started once, shared), test artefact directory."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cua_agent.inference.local_server import MODELS, VLLMProcess, start_vllm

SERVER_START_TIMEOUT_S = float(os.environ.get("CUA_TEST_VLLM_TIMEOUT", "400"))


@pytest.fixture(scope="session")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artefacts")


@pytest.fixture(scope="session")
def vllm_servers(artefacts: Path) -> dict[str, VLLMProcess]:
    """One server per tiny model ("untied", "tied"), started concurrently through scripts/run_vllm_cpu.sh."""
    servers = {name: start_vllm(path, artefacts) for name, path in MODELS.items()}
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda s: s.wait_healthy(SERVER_START_TIMEOUT_S), servers.values()))
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.fixture
def rollout_engine(vllm_servers):
    """AReaL's rollout machinery over the untied tiny model's server (StockVLLMEngine), torn down after."""
    import uuid

    from areal.api.cli_args import InferenceEngineConfig

    from cua_agent.inference.engine import StockVLLMEngine

    config = InferenceEngineConfig(
        experiment_name="tests",
        trial_name=uuid.uuid4().hex[:8],
        request_timeout=120,
        request_retries=2,
        setup_timeout=60,
    )
    engine = StockVLLMEngine(config)
    engine.initialize(addr=[vllm_servers["untied"].address], train_data_parallel_size=1)
    try:
        yield engine
    finally:
        engine.destroy()
