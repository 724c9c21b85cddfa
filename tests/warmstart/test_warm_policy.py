"""The warm start that setup builds (the embedded default's starting policy) is what `make local` and
`make learn` rely on: a policy that clicks the button sometimes, at the sampling temperature of training.
A build that underfits the tool-call format lets GRPO learn nothing (every group fails alike) while its
SFT loss still looks fine: the 32-seed cosine recipe ended at answer loss 0.195, and its sampled answers
were 82-100% malformed (`[6, 97]` for `[62, 97]`, `"action": "coordinate"`), 5 of 48 held-out seeds solved
at temperature 0.5. This plays the setup-built policy as users do (docs/warm-start.md)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from cua_agent.evaluate import __main__ as cli
from cua_agent.inference.local_server import REPO, WARM_MODEL

pytestmark = pytest.mark.slow

EPISODES = 64
# Two builds of the recipe solved 34.4% and 40.6% of 64 unseen seeds (docs/warm-start.md); P(< 13/64) at
# 34.4% is ~0.5%.
MIN_SUCCESS = 0.20
MAX_FORMAT_FAILURES = 0.30  # of turns; measured 11% and 12% (the same builds)


def test_the_setup_built_warm_start_solves_held_out_seeds_sometimes_at_temperature_1(tmp_path):
    out = tmp_path / "eval"
    agent = OmegaConf.load(REPO / "configs" / "local_cpu.yaml").agent  # as the embedded default plays it
    rc = cli.main(
        ["--checkpoint", str(WARM_MODEL), "--task-ids", "miniwob/click-test", "--seeds-per-task", str(EPISODES),
         "--max-turns", str(agent.max_turns), "--history-screenshots", str(agent.history_screenshots),
         "--max-new-tokens", str(agent.max_new_tokens), "--temperature", str(agent.temperature),
         "--out", str(out)]
    )  # fmt: skip
    overall = json.loads((out / "report.json").read_text())["overall"]
    assert rc == 0 and overall["episodes"] == EPISODES and overall["infra_failures"] == 0, overall
    assert overall["format_failure_rate"] <= MAX_FORMAT_FAILURES, overall
    assert MIN_SUCCESS <= overall["success_rate"] < 1.0, overall  # sometimes, not always: room for GRPO
