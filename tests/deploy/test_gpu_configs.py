"""The GPU configs load as CUAGRPOConfig and fit what serves and trains them: the process count of the
trainer, the server's context length, the sandbox budget of the rollouts in flight."""

from __future__ import annotations

import re

import pytest
from areal.api.cli_args import load_expr_config

from cua_agent.config import CUAGRPOConfig
from tests.deploy.stack import REPO, load_compose

# config -> (FSDP processes, vLLM max_model_len it is served with)
SERVED = {
    "configs/cua_grpo.yaml": (
        4,
        int(load_compose()["services"]["vllm"]["environment"]["VLLM_MAX_MODEL_LEN"]),
    ),
    "configs/cua_grpo_qwen3vl_8b.yaml": (
        4,
        int(load_compose()["services"]["vllm"]["environment"]["VLLM_MAX_MODEL_LEN"]),
    ),
    "configs/cua_grpo_qwen3vl_32b_lora.yaml": (
        4,
        int(load_compose()["services"]["vllm"]["environment"]["VLLM_MAX_MODEL_LEN"]),
    ),
    # its header starts the server with VLLM_MAX_MODEL_LEN=16384
    "configs/cua_grpo_single_gpu.yaml": (1, 16384),
}


@pytest.mark.parametrize("path", sorted(SERVED))
def test_gpu_config_fits_its_deployment(tmp_path, path):
    cfg, _ = load_expr_config(["--config", str(REPO / path), f"cluster.fileroot={tmp_path}"], CUAGRPOConfig)
    nproc, max_model_len = SERVED[path]
    assert cfg.actor.backend == f"fsdp:d{nproc}" and cfg.allocation_mode == f"fsdp:d{nproc}"
    assert cfg.cluster.n_gpus_per_node >= nproc
    assert cfg.train_dataset.batch_size % nproc == 0, "batches split evenly over the FSDP ranks"
    assert cfg.agent.max_prompt_tokens + cfg.agent.max_new_tokens <= max_model_len
    assert cfg.actor.mb_spec.max_tokens_per_mb >= cfg.agent.max_prompt_tokens + cfg.agent.max_new_tokens
    # AReaL divides rollout.max_concurrent_rollouts over the ranks; each rank has its own sandbox pool
    per_rank = -(-cfg.rollout.max_concurrent_rollouts // nproc) * cfg.agent.group_size
    assert per_rank <= cfg.sandbox.max_concurrency <= 2 * per_rank
    assert cfg.actor.attn_impl == "flash_attention_2" and cfg.actor.dtype == "bfloat16"
    assert cfg.inference.addresses == [] and not cfg.inference.launch_local  # AREAL_LLM_SERVER_ADDRS
    assert cfg.sandbox.backend == "docker"


def test_single_gpu_header_serves_with_the_length_this_test_assumes():
    header = (REPO / "configs" / "cua_grpo_single_gpu.yaml").read_text().split("experiment_name:")[0]
    assert re.search(r"VLLM_TP_SIZE=1 .*VLLM_MAX_MODEL_LEN=16384", header.replace("\\\n#    ", ""))
    assert "CUDA_VISIBLE_DEVICES=0" in header and "--config configs/cua_grpo_single_gpu.yaml" in header
