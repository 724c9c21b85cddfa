"""bench/rollout.py runs end to end with tiny parameters (stand-in model and sandbox, ~12 s) and its
numbers are sane: the executor keeps K episodes in flight, and the async loop overlaps rollouts with
training. Episodes stay above 1 s: AReaL's prepare_batch prefetches only after a 1 s wait slice."""

from __future__ import annotations

import pytest

from bench.rollout import main


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
def test_rollout_bench_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    result = main(
        [
            *("--ks", "8", "--rounds", "1", "--turns", "3", "--model-ms", "200", "--step-ms", "100"),
            *("--batch", "8", "--loop-k", "8", "--steps", "3", "--train-ms", "400"),
        ]
    )
    assert result["episode_s"] == pytest.approx(1.2)
    k8 = result["throughput"][8]
    assert k8["episodes"] == 8
    assert 0.5 <= k8["ratio"] <= 1.05, k8  # above 1 would mean the stand-ins sleep less than configured

    sync, asyn = result["loop"][0], result["loop"][2]
    assert sync["max_lag"] == 0  # max_head_offpolicyness=0: every batch comes from the current version
    assert asyn["max_lag"] <= 2
    assert asyn["step_s"] < sync["step_s"]
    assert result["sync_over_async"] > 1.15, result["loop"]  # ideal 1.6 s / 1.2 s = 1.33
    assert "sync/async step time" in capsys.readouterr().out
