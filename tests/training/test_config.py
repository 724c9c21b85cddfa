"""CUAGRPOConfig loads from the shipped YAML files + overrides, and rejects bad values naming the field."""

from __future__ import annotations

import re

import pytest
from areal.api.cli_args import load_expr_config

from cua_agent.config import CUAGRPOConfig
from cua_agent.inference.local_server import REPO

SHIPPED_CONFIGS = [
    "configs/local_cpu.yaml",
    "configs/cua_grpo.yaml",
    "configs/cua_grpo_multinode.yaml",
    "configs/cua_grpo_single_gpu.yaml",
    "configs/cua_grpo_qwen3vl_8b.yaml",
    "configs/cua_grpo_qwen3vl_32b_lora.yaml",
]


def load(tmp_path, *overrides: str, config: str = "configs/local_cpu.yaml") -> CUAGRPOConfig:
    argv = ["--config", str(REPO / config), f"cluster.fileroot={tmp_path}", *overrides]
    cfg, _ = load_expr_config(argv, CUAGRPOConfig)
    return cfg


@pytest.mark.parametrize("config", SHIPPED_CONFIGS)
def test_shipped_configs_load(tmp_path, config):
    cfg = load(tmp_path, config=config)
    assert isinstance(cfg, CUAGRPOConfig)
    assert cfg.actor.weight_update_mode == "disk" and cfg.gconfig.n_samples == 1
    assert cfg.actor.reward_norm is None and cfg.actor.adv_norm is None
    assert cfg.actor.use_decoupled_loss and cfg.actor.rejection_sampling is not None
    assert cfg.rollout.backend.startswith("vllm:") and cfg.actor.backend.startswith("fsdp:")
    assert cfg.recover.mode == "auto", "every shipped run writes recover checkpoints (LoRA runs included)"


def test_defaults_and_overrides(tmp_path):
    cfg = load(
        tmp_path,
        "agent.group_size=8",
        'inference.addresses=["10.0.0.1:8000","10.0.0.2:8000"]',
        "inference.launch_local=false",
        "tasks.task_ids=[miniwob/click-button]",
    )
    assert cfg.agent.group_size == 8 and cfg.agent.min_group_size == 2
    assert cfg.inference.addresses == ["10.0.0.1:8000", "10.0.0.2:8000"]
    assert cfg.tasks.task_ids == ["miniwob/click-button"]
    assert cfg.sandbox.backend == "docker" and cfg.workflow == "cua_agent.rollout.workflow.CUAWorkflow"
    assert cfg.inference.tied_embeddings is None
    # every AReaL section writes under the experiment directory
    for section in (cfg.saver, cfg.recover, cfg.stats_logger, cfg.evaluator, cfg.rollout):
        assert section.fileroot == str(tmp_path)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("agent.group_size=0", "agent.group_size"),
        ("agent.min_group_size=5", "agent.min_group_size"),
        ("agent.model_family=llava", "agent.model_family"),
        ("agent.on_parse_failure=retry", "agent.on_parse_failure"),
        ("agent.turn_discount=0", "agent.turn_discount"),
        ("agent.episode_timeout_s=10", "agent.episode_timeout_s"),
        ("sandbox.backend=kubernetes", "sandbox.backend"),
        ("sandbox.warm=9", "sandbox.warm"),
        ('inference.addresses=["localhost"]', "inference.addresses[0]"),
        ("actor.weight_update_mode=xccl", "actor.weight_update_mode"),
        ("gconfig.n_samples=4", "gconfig.n_samples"),
        ("+actor.reward_norm.mean_level=group", "actor.reward_norm"),
        ("+actor.adv_norm.mean_level=batch", "actor.adv_norm"),
        ("actor.rejection_sampling=null", "actor.rejection_sampling"),
        ("+rollout.check_trajectory_format=true", "rollout.check_trajectory_format"),
        ("evaluation.seeds_per_task=0", "evaluation.seeds_per_task"),
        ("rollout.backend=sglang:d1", "rollout.backend"),
        ("workflow=CUAWorkflow", "workflow"),
    ],
)
def test_bad_values_name_the_field(tmp_path, override, field):
    with pytest.raises(ValueError, match="^" + re.escape(field) + ": "):
        load(tmp_path, override)


def test_addresses_and_launch_local_are_exclusive(tmp_path):
    with pytest.raises(ValueError, match=r"^inference\.launch_local: "):
        load(tmp_path, 'inference.addresses=["127.0.0.1:8000"]', "inference.launch_local=true")


@pytest.mark.parametrize("config", SHIPPED_CONFIGS)
def test_shipped_configs_spell_out_every_field_of_our_sections(config):
    """A field missing from the YAML can only be overridden as `+section.field=...` (Hydra's struct mode),
    which users do not expect."""
    import dataclasses

    from omegaconf import OmegaConf

    raw = OmegaConf.load(config)
    for f in dataclasses.fields(CUAGRPOConfig):
        if f.name in ("inference", "agent", "sandbox", "tasks", "checkpoint", "evaluation", "lora"):
            names = {x.name for x in dataclasses.fields(f.default_factory())}  # type: ignore[misc]
            missing = names - set(raw[f.name].keys())
            assert not missing, f"{config}: {f.name} lacks {sorted(missing)}"


LORA = ("actor.use_lora=true",)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (("actor.lora_rank=0", *LORA), "actor.lora_rank"),
        (("actor.lora_alpha=0", *LORA), "actor.lora_alpha"),
        (("actor.target_modules=[q_proj,'.*']", *LORA), "actor.target_modules"),
    ],
)
def test_bad_lora_values_name_the_field(tmp_path, overrides, field):
    with pytest.raises(ValueError, match="^" + re.escape(field) + ": "):
        load(tmp_path, *overrides)


def test_lora_targets_the_language_models_projections_unless_the_vision_tower_is_asked_for(tmp_path):
    """PEFT matches the expression against full module names of both families' tiny models."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from cua_agent.config import lora_target_modules
    from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS

    for model in (MODELS["untied"], QWEN3_VL_MODELS["untied"]):
        names = [
            n
            for n, _ in AutoModelForImageTextToText.from_config(
                AutoConfig.from_pretrained(model)
            ).named_modules()
        ]
        language = re.compile(lora_target_modules(load(tmp_path, *LORA)))
        picked = [n for n in names if language.fullmatch(n)]
        assert picked and all("language_model" in n for n in picked), picked
        assert {n.rsplit(".", 1)[1] for n in picked} == {
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        }
        everywhere = re.compile(lora_target_modules(load(tmp_path, *LORA, "lora.vision_tower=true")))
        if any("visual" in n and n.endswith("gate_proj") for n in names):  # Qwen2.5-VL's vision MLP
            assert any("visual" in n for n in names if everywhere.fullmatch(n))
        assert set(picked) <= {n for n in names if everywhere.fullmatch(n)}


@pytest.mark.parametrize("override", ["agent.temperature=0.7", "actor.temperature=0.7"])
def test_training_at_a_temperature_other_than_1_is_refused(tmp_path, override):
    """A stock vLLM server returns logprobs of the raw distribution (tests/inference/test_sampling_defaults.py),
    so at another temperature the behaviour logprobs would not be those the tokens were sampled from."""
    field = override.split("=")[0]
    with pytest.raises(ValueError, match="^" + re.escape(field) + ": "):
        load(tmp_path, override)


def test_held_out_evaluation_may_use_any_temperature(tmp_path):
    assert load(tmp_path, "evaluation.temperature=0.7").evaluation.temperature == 0.7
