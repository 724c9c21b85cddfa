"""One learning-test training step, to time: ppo_update of 16 warm-start rows (1280x800 screenshots, ~1,500
tokens each) with configs/local_cpu.yaml's actor, one rank, in this process."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any


def warm_update() -> tuple[Callable[[], float], Any]:
    """(a function that runs one update and returns its seconds, the actor to destroy after)."""
    import torch
    from areal.utils.data import concat_padded_tensors

    from cua_agent.inference.local_server import WARM_MODEL
    from cua_agent.train.job import single_process_dist_env
    from tests.training.one_update import local_actor

    rows = []
    for i, demo in enumerate(torch.load(WARM_MODEL / "demos.pt", weights_only=False)[:16]):
        n = demo["input_ids"].shape[1]
        rows.append({**demo, "logprobs": torch.zeros(1, n), "versions": torch.zeros(1, n, dtype=torch.int32),
                     "rewards": torch.tensor([1.0 if i % 2 else -1.0])})  # fmt: skip
    batch = concat_padded_tensors(rows)
    single_process_dist_env()
    overrides = ("actor.recompute_logprob=false", "actor.use_decoupled_loss=false", "actor.optimizer.lr=1e-3")
    actor, _ = local_actor(WARM_MODEL, 1, *overrides)

    def update() -> float:
        start = time.perf_counter()
        actor.ppo_update(actor.compute_advantages([copy.deepcopy(batch)]))
        return time.perf_counter() - start

    update()  # compiles, allocates
    return update, actor
