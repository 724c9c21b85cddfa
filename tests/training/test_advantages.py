"""The advantages AReaL's actor computes from the workflow's rows, under every shipped config.

The workflow normalises rewards per group of episodes; AReaL then turns each row's reward into per-token
advantages and may normalise them again (`actor.adv_norm`). A group whose episodes all got the same reward
carries no signal: every one of its tokens must get an advantage of exactly 0, whatever the other groups of
the batch and however the episodes differ in turns and tokens.
"""

from __future__ import annotations

import pytest
import torch
from areal.trainer.ppo.actor import PPOActor

from tests.agent.test_workflow_rows import episode, workflow_factory  # noqa: F401 (fixture)
from tests.training.test_config import SHIPPED_CONFIGS, load


def batch_advantages(actor_config, groups: list[dict]) -> list[torch.Tensor]:
    """Per group: the advantages of its loss tokens, as AReaL's PPO actor computes them for the step."""
    data = PPOActor(actor_config, engine=None).compute_advantages([dict(g) for g in groups])
    return [d["advantages"][d["loss_mask"].bool()] for d in data]


@pytest.mark.parametrize("config", SHIPPED_CONFIGS)
def test_a_group_of_equal_rewards_gets_zero_advantage_next_to_a_mixed_one(workflow_factory, tmp_path, config):  # noqa: F811
    wf = workflow_factory(group_size=3)
    all_failed = wf.group_to_batch(
        [episode(wf, 1, 0.0, seed=1), episode(wf, 3, 0.0, seed=2), episode(wf, 2, 0.0, seed=3)],
        {"task_id": "t", "seed": 0},
    )
    mixed = wf.group_to_batch(
        [episode(wf, 2, 1.0, seed=4), episode(wf, 1, 0.0, seed=5), episode(wf, 3, 0.0, seed=6)],
        {"task_id": "t", "seed": 1},
    )
    flat, signal = batch_advantages(load(tmp_path, config=config).actor, [all_failed, mixed])
    assert flat.numel() > 0 and torch.equal(flat, torch.zeros_like(flat)), flat.unique()
    # the mixed group still teaches: its solved episode is pushed up, the failed ones down
    assert signal.max() > 0 and signal.min() < 0
