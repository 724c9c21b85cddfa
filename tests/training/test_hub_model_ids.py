"""A hub model id as actor.path (the GPU configs' `Qwen/Qwen2.5-VL-7B-Instruct`) is resolved the way
transformers and vLLM resolve it: a local folder as it is, else the snapshot in the local Hugging Face cache
(HF_HUB_OFFLINE=1: the cache only). The cache here is a real hub cache layout, written by huggingface_hub's
own download code from a local copy of the tiny model (no hub is reachable)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from cua_agent.inference.local_server import MODELS
from cua_agent.inference.model_files import ModelNotFoundError, model_dir
from cua_agent.train.checkpointing import fingerprint

HUB_ID = "Qwen/Qwen2.5-VL-7B-Instruct"


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch) -> Path:
    """A hub cache holding the tiny model under HUB_ID, laid out as huggingface_hub lays it out."""
    cache = tmp_path / "hub"
    snapshot = cache / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(MODELS["untied"], snapshot)
    refs = snapshot.parents[1] / "refs"
    refs.mkdir()
    (refs / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


def config(path: str) -> SimpleNamespace:
    actor = SimpleNamespace(
        path=path, backend="fsdp:d1", use_lora=False, optimizer=SimpleNamespace(lr_scheduler_type="constant")
    )
    return SimpleNamespace(actor=actor, train_dataset=SimpleNamespace(batch_size=1), lr_groups=[])


def test_a_local_folder_is_used_as_it_is():
    assert model_dir(str(MODELS["untied"])) == MODELS["untied"]


def test_a_hub_id_resolves_to_its_snapshot_in_the_local_cache(hub_cache: Path):
    assert model_dir(HUB_ID) == hub_cache


def test_the_checkpoint_fingerprint_reads_a_hub_ids_config(hub_cache: Path):
    by_id = fingerprint(config(HUB_ID), world_size=1)
    assert by_id == fingerprint(config(str(MODELS["untied"])), world_size=1)
    assert by_id["model"]["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]


def test_an_unknown_id_offline_names_the_id_and_the_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"Qwen/Nope-7B.*not a local folder.*HF_HUB_OFFLINE"):
        model_dir("Qwen/Nope-7B")
