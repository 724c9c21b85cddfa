"""Serving copies and explicit heads for tied-embedding checkpoints (no server needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cua_agent.inference.local_server import MODELS
from cua_agent.inference.tied_head import (
    HEAD_FILE,
    HEAD_KEY,
    INDEX_FILE,
    prepare_serving_copy,
    ties_embeddings,
    write_explicit_head,
)


def embedding(path: Path) -> torch.Tensor:
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return f.get_tensor("model.embed_tokens.weight")


def test_tie_detection_reads_top_level_and_text_config(tmp_path: Path):
    assert ties_embeddings(MODELS["tied"]) and not ties_embeddings(MODELS["untied"])
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"tie_word_embeddings": True}}))
    assert ties_embeddings(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json"):
        ties_embeddings(tmp_path)


def test_serving_copy_of_tied_model_is_untied_with_equal_head(tmp_path: Path):
    served = prepare_serving_copy(MODELS["tied"], tmp_path / "serve")
    config = json.loads((served / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["text_config"]["tie_word_embeddings"] is False
    assert (served / "model.safetensors").is_symlink()  # weights are linked, not copied
    head = load_file(str(served / HEAD_FILE))[HEAD_KEY]
    assert torch.equal(head, embedding(MODELS["tied"]))
    # cached: a second call changes nothing; a change of the source rebuilds
    mtime = (served / HEAD_FILE).stat().st_mtime_ns
    assert prepare_serving_copy(MODELS["tied"], tmp_path / "serve") == served
    assert (served / HEAD_FILE).stat().st_mtime_ns == mtime


def test_untied_model_is_served_as_is(tmp_path: Path):
    assert prepare_serving_copy(MODELS["untied"], tmp_path / "serve") == MODELS["untied"].resolve()
    assert not (tmp_path / "serve").exists()


def test_explicit_head_follows_new_embeddings_and_sharded_index(tmp_path: Path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(MODELS["tied"], ckpt)
    # reshard as a trainer would save a large model: two files + an index
    weights = load_file(str(ckpt / "model.safetensors"))
    (ckpt / "model.safetensors").unlink()
    names = sorted(weights)
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    save_file({k: weights[k] for k in first}, str(ckpt / "model-00001-of-00002.safetensors"))
    save_file({k: weights[k] for k in second}, str(ckpt / "model-00002-of-00002.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first}
    weight_map |= {k: "model-00002-of-00002.safetensors" for k in second}
    (ckpt / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    write_explicit_head(ckpt)
    write_explicit_head(ckpt)  # idempotent
    index = json.loads((ckpt / INDEX_FILE).read_text())["weight_map"]
    assert index[HEAD_KEY] == HEAD_FILE
    assert torch.equal(load_file(str(ckpt / HEAD_FILE))[HEAD_KEY], weights["model.embed_tokens.weight"])
    assert not list(ckpt.glob("*.tmp"))


def test_checkpoint_without_embeddings_is_a_clear_error(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    save_file({"visual.patch_embed.proj.weight": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="no text embedding"):
        write_explicit_head(tmp_path)
