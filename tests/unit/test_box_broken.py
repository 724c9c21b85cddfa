"""Whose failure an episode's end is (cua_agent/episode/loop.py play_guarded): a box the policy broke is
its 0, scored; a box the infrastructure lost is no score at all; either way the box serves no one else."""

from __future__ import annotations

import pytest

from cua_agent.episode.loop import Episode, play_guarded
from sandbox.errors import SandboxDied, SandboxImpostor


async def fails_with(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("exc", "status", "reward"),
    [
        (SandboxImpostor("the answer is not signed by the box's control server"), "box_broken", 0.0),
        (SandboxDied("the box is gone"), "infra_error", None),
    ],
)
async def test_a_broken_box_is_the_policys_0_and_a_lost_one_is_not_scored(exc, status, reward):
    ep = await play_guarded(Episode("desktop/terminal-file", 0), fails_with(exc), timeout_s=5)
    assert (ep.status, ep.task_reward, ep.box_spoiled) == (status, reward, True)
    assert ep.ok == (reward is not None) and type(exc).__name__ in ep.error
