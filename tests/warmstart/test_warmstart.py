"""`python -m cua_agent.warmstart`, small: the oracles' demonstrations through real sandboxes, then the
supervised warm start with AReaL's FSDP LM engine on CPU. The answer tokens' loss falls over the epochs,
and the output is a model folder the processor and transformers load."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from cua_agent.inference.processing import load_processor
from cua_agent.warmstart.__main__ import main

pytestmark = pytest.mark.slow


def test_demonstrations_then_supervised_training_lower_the_loss(tmp_path):
    out = tmp_path / "warm"
    args = ["--out", str(out), "--task-ids", "miniwob/click-test", "--seeds-per-task", "4"]
    # Batches of 2: 8 optimizer steps over the 4 rows (batches of 4 gave 4 steps, loss 7.59 -> 6.47)
    assert main([*args, "--epochs", "4", "--batch", "2", "--lr", "5e-3"]) == 0
    info = json.loads((out / "warmstart.json").read_text())
    # One row an episode: the task ends the episode at the click.
    assert info["episodes"] == 4 and info["solved"] == 4 and info["rows"] == 4
    losses = info["losses"]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses
    # The lr anneals to 0 over the run: at a constant lr the final weights are wherever the last step lands
    # (a setup build ended on a spike: answer loss 0.165 after epoch 14, 0.346 in epoch 15).
    lrs = info["lrs"]
    assert len(lrs) == 4 and lrs[0] < 5e-3 and all(b < a for a, b in pairwise(lrs)) and lrs[-1] < 1e-4, lrs
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert load_processor(out).tokenizer.convert_tokens_to_ids("<tool_call>") == 1899
    # Built once: the same inputs again leave the folder as it is; no partial build is left behind.
    stamp = (out / "warmstart.json").stat().st_mtime_ns
    assert main([*args, "--epochs", "4", "--batch", "2", "--lr", "5e-3"]) == 0
    assert (out / "warmstart.json").stat().st_mtime_ns == stamp
    assert not out.with_name("warm.partial").exists()
