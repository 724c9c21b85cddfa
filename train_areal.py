"""Training entry point: `python train_areal.py --config configs/local_cpu.yaml [key=value ...]`.

Also runs under AReaL's SPMD launcher, which then only wraps it in torchrun (AREAL_SPMD_MODE=1):
    python -m areal.infra.launcher.local train_areal.py --config configs/cua_grpo.yaml allocation_mode=fsdp:d4
`allocation_mode` must name no inference backend ("fsdp:d4", not "vllm:d1t4+fsdp:d4"): the launcher would
start AReaL's own patched vLLM server, which does not run under current vLLM. Our servers are stock vLLM,
given by inference.addresses / AREAL_LLM_SERVER_ADDRS, or started by inference.launch_local.
"""

from __future__ import annotations

import sys

from areal.api.cli_args import load_expr_config

from cua_agent.config import CUAGRPOConfig
from cua_agent.trainer import run


def main(argv: list[str]) -> None:
    config, _ = load_expr_config(argv, CUAGRPOConfig)
    run(config)


if __name__ == "__main__":
    main(sys.argv[1:])
