"""Episode rewards order the behaviours GRPO compares within a group: solving beats attempting with valid
actions, which beats quitting early, which beats malformed output — so that in a group that fails anyway,
giving up is not the best move."""

from __future__ import annotations

import pytest

from cua_agent.config import AgentConfig
from cua_agent.episode.actions import Click, Done
from cua_agent.episode.loop import Episode
from cua_agent.episode.turn import Turn
from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.rewards import RewardConfig, episode_reward, normalise_group
from tests.training.test_config import SHIPPED_CONFIGS, load


def ep(task_reward: float, *turns: str, status: str = "max_turns") -> Episode:
    """turns: "ok" (a valid action that ran), "done", "bad" (no valid action in the output)."""
    e = Episode("t", 0, "do it", task_reward=task_reward, status=status)
    for kind in turns:
        action = {"ok": Click(1, 1), "done": Done(), "bad": None}[kind]
        e.turns.append(Turn(ModelCall("..."), action, "no valid action: x" if kind == "bad" else kind))
        e.format_failures += kind == "bad"
    return e


SOLVE = ep(1.0, "ok", "ok", "done", status="done")
SOLVE_SLOPPY = ep(1.0, "bad", "ok", "ok", "done", status="done")
ATTEMPT = ep(0.0, "ok", "ok", "ok", "ok", "ok", "ok")
ATTEMPT_SLOPPY = ep(0.0, "ok", "bad", "ok", "ok", "bad", "ok")
QUIT = ep(0.0, "done", status="done")
QUIT_LATE = ep(0.0, "ok", "ok", "done", status="done")
MALFORMED = ep(0.0, "bad", "bad", "bad", "bad", "bad", "bad")


@pytest.mark.parametrize("config", [None, *SHIPPED_CONFIGS])
def test_solve_beats_attempt_beats_quit_beats_malformed(config, tmp_path):
    """Under the defaults and under every shipped config's reward settings."""
    cfg = RewardConfig()
    if config is not None:
        a = load(tmp_path, config=config).agent
        cfg = RewardConfig(format_reward=a.format_reward, quit_penalty=a.quit_penalty)
    r = {name: episode_reward(e, cfg) for name, e in globals().items() if isinstance(e, Episode)}
    assert r["SOLVE"] >= r["SOLVE_SLOPPY"] > r["ATTEMPT"] >= r["ATTEMPT_SLOPPY"]
    assert r["ATTEMPT_SLOPPY"] > r["QUIT"] and r["ATTEMPT_SLOPPY"] > r["QUIT_LATE"]
    assert min(r["QUIT"], r["QUIT_LATE"]) > r["MALFORMED"]


def test_in_a_group_that_fails_anyway_quitting_gets_a_negative_advantage():
    cfg = RewardConfig()
    adv = normalise_group([episode_reward(e, cfg) for e in (ATTEMPT, QUIT, MALFORMED, ATTEMPT_SLOPPY)])
    assert adv[1] < 0 < adv[0] and adv[2] < adv[1]


def test_the_config_refuses_a_quit_penalty_that_would_rank_quitting_below_malformed_output():
    with pytest.raises(ValueError, match=r"^agent\.quit_penalty: "):
        AgentConfig(format_reward=0.1, quit_penalty=0.2)
    AgentConfig(format_reward=0.0, quit_penalty=0.0)  # task reward only: allowed


def test_without_std_normalisation_a_format_only_group_moves_the_policy_less_than_a_success():
    """Dr. GRPO's advantage (no division by the group's std) keeps the reward's scale: a group told
    apart only by the format term gets advantages a tenth of those of a group with one success."""
    cfg = RewardConfig(std_norm=False)
    format_only = normalise_group([episode_reward(e, cfg) for e in (ATTEMPT, MALFORMED)], std_norm=False)
    success = normalise_group([episode_reward(e, cfg) for e in (SOLVE, ATTEMPT)], std_norm=False)
    assert max(map(abs, format_only)) < 0.2 * max(map(abs, success))
    assert sum(format_only) == pytest.approx(0) and sum(success) == pytest.approx(0)
    # With std normalisation both groups move it alike: what the option is for.
    std = [
        normalise_group([episode_reward(e, cfg) for e in g]) for g in ((ATTEMPT, MALFORMED), (SOLVE, ATTEMPT))
    ]
    assert max(map(abs, std[0])) == pytest.approx(max(map(abs, std[1])), rel=1e-3)
