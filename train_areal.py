"""Training entry point: `python train_areal.py --config configs/local_cpu.yaml [key=value ...]`.

Resume: `--resume` continues the trial (experiment_name/trial_name) from its newest checkpoint, and fails
if it has none; `--resume_from_checkpoint PATH` starts from that checkpoint (a recover/globalstep<k>
directory; an older one sets the newer ones aside). They set `checkpoint.resume_from`. Without either,
recover.mode=auto resumes the trial if it has a checkpoint, as in AReaL.

Preflight: `--check [--gpu-memory-gib N] [--host-memory-gib N]` prints the estimated GPU memory per rank,
host memory and disk of the config and exits 1, naming the field, when it does not fit
(cua_agent/train/preflight.py); it starts nothing.

Several FSDP ranks: `torchrun --nproc-per-node N train_areal.py --config ... actor.backend=fsdp:dN`.

AReaL's SPMD launcher (`python -m areal.infra.launcher.local train_areal.py --config ...`) only wraps
torchrun when `allocation_mode` names no inference backend ("fsdp:d4", as the configs do; with "vllm:..."
it would start AReaL's patched vLLM server, which does not run under current vLLM). Our servers are stock
vLLM: inference.addresses, AREAL_LLM_SERVER_ADDRS, or inference.launch_local. Limits (AReaL 1.0.4):
- CPU-only machines: it cannot start the trainer. CpuPlatform.device_control_env_var is "", so
  LocalLauncher.submit_array prefixes the command with `=0` ("/bin/sh: =0: not found").
- it needs cluster.name_resolve.nfs_record_root to exist beforehand (mkdir -p outputs/<exp>/name_resolve).
- with recover.mode on/auto it treats the trainer's normal exit as a failure and relaunches it
  recover.retries times (each relaunch resumes at the end and exits).
"""

from __future__ import annotations

import sys

from cua_agent.openmp import sleep_while_waiting

sleep_while_waiting()  # before torch loads libgomp: each rank and its children

from areal.api.cli_args import load_expr_config  # noqa: E402

from cua_agent.config import CUAGRPOConfig  # noqa: E402
from cua_agent.train.cli import config_args, split_check  # noqa: E402
from cua_agent.train.job import run  # noqa: E402


def main(argv: list[str]) -> None:
    check, _ = split_check(argv)
    config, _ = load_expr_config(config_args(argv), CUAGRPOConfig)
    if check is not None:
        from cua_agent.train.preflight import main as preflight

        raise SystemExit(preflight(config, check))
    run(config)


if __name__ == "__main__":
    main(sys.argv[1:])
