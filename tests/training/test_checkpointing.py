"""Checkpoint store logic: atomic commit, keep-last-N, what counts as latest, corrupt and incompatible
checkpoints named as such, RNG round trip. Real files on disk; no trainer (tests/training/test_resume.py
drives the real one)."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from cua_agent.train.checkpointing import (
    CheckpointError,
    CheckpointStore,
    differences,
    load_trainer_state,
    read_manifest,
    resolve_resume,
    rng_state,
    set_rng_state,
)


def commit(store: CheckpointStore, step: int, payload: bytes = b"weights") -> Path:
    staging = store.fresh_staging(step)
    (staging / "model").mkdir()
    (staging / "model" / "shard.bin").write_bytes(payload)
    return store.commit(staging, step, {"format": 1, "global_step": step, "compat": {"world_size": 1}})


def test_commit_renames_a_complete_staging_dir_and_latest_ignores_partial_saves(tmp_path: Path):
    store = CheckpointStore(tmp_path / "recover")
    first = commit(store, 0)
    assert first.name == "globalstep0" and read_manifest(first)["files"] == {"model/shard.bin": 7}
    # A save killed half-way: a staging dir with some files and no manifest.
    partial = store.fresh_staging(1)
    (partial / "model").mkdir()
    (partial / "model" / "shard.bin").write_bytes(b"wei")
    assert store.latest() == first
    store.remove_staging()
    assert not partial.exists() and store.latest() == first


def test_keep_last_prunes_oldest_and_recommit_replaces(tmp_path: Path):
    store = CheckpointStore(tmp_path / "recover")
    for step in range(5):
        commit(store, step)
    assert [s for s, _ in store.committed()] == [0, 1, 2, 3, 4]
    store.prune(2)
    assert [s for s, _ in store.committed()] == [3, 4]
    commit(store, 4, b"other weights")  # a resumed run reaching step 4 again
    assert read_manifest(store.path(4))["files"]["model/shard.bin"] == len(b"other weights")
    assert not list(store.root.glob(".staging-*"))


def test_supersede_sets_newer_checkpoints_aside(tmp_path: Path):
    store = CheckpointStore(tmp_path / "recover")
    for step in range(4):
        commit(store, step)
    moved = store.supersede_after(1)
    assert [s for s, _ in store.committed()] == [0, 1]
    assert sorted(p.name.split("-")[0] for p in moved) == ["globalstep2", "globalstep3"]
    assert all(p.parent.name == "superseded" for p in moved)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "manifest.json").unlink(), "not a complete checkpoint: no manifest.json"),
        (lambda d: (d / "model" / "shard.bin").write_bytes(b"w"), "has 1 bytes, the manifest says 7"),
        (lambda d: (d / "model" / "shard.bin").unlink(), "model/shard.bin is missing"),
        (lambda d: (d / "manifest.json").write_text("{"), "unreadable manifest.json"),
    ],
)
def test_damaged_checkpoints_are_refused_with_the_reason(tmp_path: Path, damage, message: str):
    store = CheckpointStore(tmp_path / "recover")
    ckpt = commit(store, 0)
    damage(ckpt)
    with pytest.raises(CheckpointError, match=message):
        read_manifest(ckpt)


def test_resolve_resume(tmp_path: Path):
    store = CheckpointStore(tmp_path / "recover")
    assert resolve_resume(None, "auto", store) is None  # fresh start
    with pytest.raises(CheckpointError, match="--resume: no checkpoint of this trial"):
        resolve_resume("latest", "auto", store)
    commit(store, 0)
    commit(store, 1)
    assert resolve_resume(None, "auto", store) == store.path(1)
    assert resolve_resume(None, "disabled", store) is None
    assert resolve_resume("latest", "on", store) == store.path(1)
    assert resolve_resume(str(store.path(0)), "on", store) == store.path(0)
    assert resolve_resume(str(store.root), "on", store) == store.path(1)  # a recover/ dir: its newest
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_resume(str(tmp_path / "nope"), "on", store)


def test_differences_name_each_field():
    saved = {"model": {"hidden_size": 64, "vocab_size": 10}, "actor.backend": "fsdp:d1"}
    now = {"model": {"hidden_size": 128, "vocab_size": 10}, "actor.backend": "fsdp:d2"}
    assert differences(saved, now) == [
        "actor.backend: checkpoint has 'fsdp:d1', this run has 'fsdp:d2'",
        "model.hidden_size: checkpoint has 64, this run has 128",
    ]
    assert differences(saved, json.loads(json.dumps(saved))) == []


def test_rng_state_round_trip():
    state = rng_state()
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.random(), np.random.rand(), torch.rand(3)  # move every generator on
    set_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


class RunsCode:
    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_trainer_state_loads_as_data_and_one_that_would_run_code_is_refused(tmp_path: Path):
    """torch.load(weights_only=False) ran whatever a trainer_state file named: a checkpoint was code."""
    saved = {"lr_scheduler": {"base_lrs": [1e-3], "last_epoch": 3}, "rng": rng_state()}
    torch.save(saved, tmp_path / "rank0.pt")
    loaded = load_trainer_state(tmp_path / "rank0.pt")
    assert loaded["lr_scheduler"] == saved["lr_scheduler"]
    set_rng_state(loaded["rng"])
    evil = RunsCode()
    evil.marker = str(tmp_path / "ran")
    torch.save({"lr_scheduler": evil, "rng": rng_state()}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError):
        load_trainer_state(tmp_path / "evil.pt")
    assert not (tmp_path / "ran").exists()
