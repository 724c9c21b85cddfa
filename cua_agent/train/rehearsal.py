"""A shipped GPU config, rehearsed on a machine without GPUs: the same config file and the same launcher,
with only what the hardware forces changed, so a CPU run takes the code paths the GPU run takes (several
FSDP ranks, LoRA sync, held-out evaluation, stop and resume) in minutes. The test suite rehearses every
`configs/cua_grpo*.yaml` this way (tests/rehearsal); this module is the one list of what differs.

    python -m cua_agent.train.rehearsal configs/cua_grpo.yaml    # prints the overrides, each with its reason
    python -m cua_agent.train.rehearsal CONFIG --args --servers HOST:PORT[,...] --outputs DIR
        # the same, as arguments for train_areal.py (one vLLM CPU server per replica of rollout.backend)

Two kinds of change, printed apart:
- hardware: the model becomes the tiny model of the same family, d4/d8 becomes d2 over gloo, vLLM's tensor
  parallelism becomes one CPU server per replica, flash-attention becomes sdpa, Ray's per-GPU resources
  become what a CPU node has;
- scale: two cores run a few small groups, not 64 desktops at once: groups, batch, turns, tokens, the
  held-out seeds, and the steps.
Everything else (optimizer, dtypes, LoRA, staleness, rewards, stop timeout, task files) is the shipped
config's.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from areal.api.alloc_mode import ModelAllocation

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS
from cua_agent.train.cli import read_config

TINY_MODELS = {"qwen2.5-vl": MODELS["untied"], "qwen3-vl": QWEN3_VL_MODELS["untied"]}
RANKS = 2  # trainer ranks a multi-GPU config is rehearsed with (2 cores)


@dataclass(frozen=True)
class Override:
    key: str
    value: str
    why: str
    kind: str  # "hardware" | "scale"

    @property
    def arg(self) -> str:
        return f"{self.key}={self.value}"


def ranks_of(config: CUAGRPOConfig) -> int:
    """The trainer ranks of the rehearsal: the config's, at most RANKS."""
    return min(RANKS, ModelAllocation.from_str(config.actor.backend, name="actor").parallel.world_size)


def overrides(config: CUAGRPOConfig, servers: list[str], fileroot: str | Path) -> list[Override]:
    """What a rehearsal of `config` changes, against vLLM CPU servers at `servers` (one per replica of the
    config's rollout.backend) and with its outputs under `fileroot`."""
    family = config.agent.model_family
    if family not in TINY_MODELS:
        raise ValueError(
            f"agent.model_family: no tiny model of family {family!r} (known: {sorted(TINY_MODELS)})"
        )
    gpus = ModelAllocation.from_str(config.actor.backend, name="actor").parallel.world_size
    ranks = ranks_of(config)
    replicas = _vllm_replicas(config.rollout.backend)
    if len(servers) != replicas:
        raise ValueError(
            f"{config.rollout.backend} has {replicas} replica(s): give as many servers, not {servers}"
        )
    hw = [
        Override("actor.path", str(TINY_MODELS[family]), f"the tiny {family} model, not the GPU model", "hardware"),
        Override("inference.addresses", json.dumps(servers, separators=(",", ":")), f"{replicas} vLLM CPU server(s), one per replica", "hardware"),
        Override("rollout.backend", f"vllm:d{replicas}", "one CPU server per replica: no tensor parallelism", "hardware"),
        Override("cluster.fileroot", str(fileroot), "this machine's outputs folder", "hardware"),
    ]  # fmt: skip
    if ranks != gpus:
        dp = f"fsdp:d{ranks}"
        hw += [
            Override("actor.backend", dp, f"{gpus} GPUs -> {ranks} CPU processes over gloo", "hardware"),
            Override("allocation_mode", dp, "as actor.backend", "hardware"),
        ]
        if config.cluster.n_nodes > 1:  # Ray: one trainer per node, each a logical GPU of its Ray node
            hw.append(Override("cluster.n_gpus_per_node", str(ranks // config.cluster.n_nodes), "one rank per Ray node", "hardware"))  # fmt: skip
    if config.actor.attn_impl == "flash_attention_2":
        hw.append(Override("actor.attn_impl", "sdpa", "flash-attention is CUDA-only", "hardware"))
    if config.cluster.n_nodes > 1:
        hw.append(Override("actor.scheduling_spec", "[{cpu:1,mem:2}]", "Ray resources a CPU node has, per trainer", "hardware"))  # fmt: skip
    scale = [
        Override("agent.group_size", "2", "episodes per group", "scale"),
        Override("agent.min_group_size", "2", "with group_size", "scale"),
        Override("train_dataset.batch_size", str(ranks), "one group per rank and step", "scale"),
        Override("rollout.max_concurrent_rollouts", str(ranks), "one group in flight per rank", "scale"),
        Override("agent.max_turns", "2", "turns per episode", "scale"),
        Override("agent.max_new_tokens", "24", "tokens per turn (a random tiny model writes until the limit)", "scale"),
        Override("agent.max_filtered_in_a_row", "1", "a random model's groups all have equal rewards: filter one, train the next", "scale"),
        Override("tasks.train_path", "tasks/miniwob-400x300.jsonl", "MiniWoB at its page's size: a quarter of the image tokens (Qwen2.5-VL: 156 a screenshot, not 642)", "scale"),
        Override("tasks.task_ids", "[miniwob/click-test,miniwob/focus-text]", "two MiniWoB tasks of that file", "scale"),
        Override("sandbox.max_concurrency", "2", "desktops per rank", "scale"),
        Override("sandbox.warm", "0", "no desktops kept warm", "scale"),
        Override("evaluation.seeds_per_task", "1", "held-out episodes per task", "scale"),
        Override("evaluation.concurrency", "2", "held-out desktops", "scale"),
        Override("evaluator.freq_steps", "2", "a held-out evaluation after step 2", "scale"),
    ]  # fmt: skip
    return hw + scale


def _vllm_replicas(backend: str) -> int:
    """The data-parallel replicas of a vLLM allocation such as 'vllm:d2t4'."""
    return ModelAllocation.from_str(backend, name="rollout").parallel.dp_size


def describe(config_path: str, config: CUAGRPOConfig, found: list[Override]) -> str:
    lines = [f"Rehearsal of {config_path} on CPU ({ranks_of(config)} trainer rank(s)):"]
    for kind in ("hardware", "scale"):
        lines.append(f"  {kind}:")
        lines += [f"    {o.arg:<60} {o.why}" for o in found if o.kind == kind]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m cua_agent.train.rehearsal", description=__doc__.split("\n")[0]
    )
    ap.add_argument("config")
    ap.add_argument("--servers", default="", help="vLLM CPU servers, host:port, comma-separated")
    ap.add_argument("--outputs", default="<outputs>", help="cluster.fileroot of the rehearsal")
    ap.add_argument("--args", action="store_true", help="print the overrides as train_areal.py arguments")
    opts = ap.parse_args(argv)
    config = read_config(["--config", opts.config])
    servers = [s for s in opts.servers.split(",") if s] or [
        f"<vllm-cpu-{i}>" for i in range(_vllm_replicas(config.rollout.backend))
    ]
    try:
        found = overrides(config, servers, opts.outputs)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    print(" ".join(shlex.quote(o.arg) for o in found) if opts.args else describe(opts.config, config, found))


if __name__ == "__main__":
    main(sys.argv[1:])
