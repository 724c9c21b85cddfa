"""`train_areal.py --check`: the shipped GPU configs fit the GPUs they are written for, and a config that
does not fit is refused naming the field. Model shapes come from tests/fixtures/models (the 7B's and 3B's
config.json and preprocessor_config.json, no weights): the same code reads a downloaded model's."""

from __future__ import annotations

import subprocess
import sys
from functools import cache

import pytest

from cua_agent.episode.families import check_checkpoint
from cua_agent.inference.local_server import MODELS, REPO
from cua_agent.rollout.task_rows import load_task_rows
from cua_agent.train.preflight import GiB, ModelShape, check, model_shape
from tests.training.test_config import load

SHAPES = REPO / "tests" / "fixtures" / "models"
# (config, model, GiB of GPU memory the trainer has: an 80 GB H100, or 75% of it beside vLLM)
GPU_CONFIGS = [
    ("configs/cua_grpo.yaml", "qwen2.5-vl-7b", 80),
    ("configs/cua_grpo_multinode.yaml", "qwen2.5-vl-7b", 80),
    ("configs/cua_grpo_single_gpu.yaml", "qwen2.5-vl-3b", 60),
    ("configs/cua_grpo_qwen3vl_8b.yaml", "qwen3-vl-8b", 80),
    ("configs/cua_grpo_qwen3vl_32b_lora.yaml", "qwen3-vl-32b", 80),
]
PLENTY = 1 << 50  # host memory and disk that never limit


@cache
def shape(model: str) -> ModelShape:
    return model_shape(SHAPES / model, (1280, 800))


def run_check(tmp_path, config: str, model: str, *overrides: str, gpu=80, host=PLENTY, disk=PLENTY):
    cfg = load(tmp_path, *overrides, config=config)
    rows = load_task_rows(REPO / cfg.tasks.train_path, cfg.tasks.train_split, list(cfg.tasks.task_ids))
    return check(cfg, rows, shape(model), gpu_bytes=gpu * GiB, host_bytes=host, disk_bytes=disk)


def test_model_shapes_are_counted_from_config_files_alone():
    seven, three = shape("qwen2.5-vl-7b"), shape("qwen2.5-vl-3b")
    assert seven.params == 8_292_166_656 and three.params == 3_754_622_976  # the published sizes
    # 1280x800 → resized to 1288x812 → 92x58 patches of 14 px → 2x2 merged: 1334 tokens per screenshot
    assert seven.image_tokens == three.image_tokens == 1334
    assert seven.merge == 2 and seven.patch_values == 3 * 2 * 14 * 14
    # Qwen3-VL-8B: patch 16 -> 1280x800 stays 1280x800 (multiples of 32) -> 80x50 patches -> 40x25 merged
    eight = shape("qwen3-vl-8b")
    assert eight.params == 8_767_123_696 and eight.image_tokens == 1000
    assert eight.patch_values == 3 * 2 * 16 * 16 and eight.layers == 36 and eight.vocab == 151936


@pytest.mark.parametrize(("config", "model", "gpu"), GPU_CONFIGS)
def test_shipped_gpu_configs_fit_their_gpus(tmp_path, config, model, gpu):
    check_checkpoint(load(tmp_path, config=config).agent.model_family, SHAPES / model)  # the right family
    budgets, problems, notes = run_check(tmp_path, config, model, gpu=gpu)
    assert problems == []
    train = budgets[0]
    assert 0.5 * gpu * GiB < train.total <= gpu * GiB  # fits, without leaving most of the GPU idle
    assert not any("max_turns" in n for n in notes), notes  # no setting that cannot take effect


def test_a_micro_batch_that_does_not_fit_names_max_tokens_per_mb_and_what_fits(tmp_path):
    _, problems, _ = run_check(
        tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", "actor.mb_spec.max_tokens_per_mb=32768"
    )
    assert len(problems) == 1 and problems[0].startswith("actor.mb_spec.max_tokens_per_mb: 32768 tokens need")
    fits = int(problems[0].rsplit("about ", 1)[1].split()[0])
    assert 16384 <= fits < 32768
    _, problems, _ = run_check(
        tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", f"actor.mb_spec.max_tokens_per_mb={fits}"
    )
    assert problems == []


def test_fp32_adam_for_the_3b_on_a_shared_gpu_is_refused(tmp_path):
    _, problems, _ = run_check(
        tmp_path,
        "configs/cua_grpo_single_gpu.yaml",
        "qwen2.5-vl-3b",
        "actor.optimizer_dtype=float32",
        "actor.optimizer.type=adam",
        gpu=60,
    )
    assert problems and problems[0].split(":")[0] in ("actor.backend", "actor.mb_spec.max_tokens_per_mb")


def test_model_states_that_cannot_fit_name_the_ranks(tmp_path):
    _, problems, _ = run_check(
        tmp_path,
        "configs/cua_grpo.yaml",
        "qwen2.5-vl-7b",
        "actor.backend=fsdp:d1",
        "train_dataset.batch_size=8",
    )
    assert any(p.startswith("actor.backend: model states alone need") for p in problems), problems


def test_a_row_longer_than_a_micro_batch_is_refused(tmp_path):
    _, problems, _ = run_check(
        tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", "agent.max_prompt_tokens=20000"
    )
    assert any(
        p.startswith("actor.mb_spec.max_tokens_per_mb: 16384 is below the longest row, 20256 tokens")
        for p in problems
    ), problems


def test_disk_counts_recover_checkpoints_and_unpruned_hf_saves(tmp_path):
    budgets, problems, _ = run_check(tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", disk=100 * GiB)
    disk = budgets[3]
    recover = next(i for i in disk.items if i.field == "checkpoint.keep_last")
    assert recover.nbytes == 3 * 8_292_166_656 * 12  # (keep_last 2 + 1 being written) x (fp32 params, m, v)
    saves = next(i for i in disk.items if i.field == "saver.freq_steps")
    assert saves.nbytes == 10 * 8_292_166_656 * 2  # one bf16 save per epoch, 10 epochs
    assert problems == [problems[0]] and problems[0].startswith("checkpoint.keep_last: Disk under")
    _, problems, _ = run_check(
        tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", "saver.freq_steps=10", disk=600 * GiB
    )
    assert problems and problems[0].startswith("saver.freq_steps: Disk under"), problems


def test_saved_screenshots_count_up_to_their_budget(tmp_path):
    def screenshots(*overrides: str) -> float:
        budgets, _, _ = run_check(tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", *overrides)
        return next(i for i in budgets[3].items if "screenshots" in i.what).nbytes

    unlimited = screenshots("agent.save_screenshots=true", "agent.screenshots_budget_mb=0")
    assert unlimited > 2 * GiB  # 10 epochs of 8 groups of 8 episodes a step, up to 11 screenshots each
    assert screenshots("agent.save_screenshots=true", "agent.screenshots_budget_mb=2048") == 2 * GiB


def test_host_memory_names_its_largest_share(tmp_path):
    _, problems, _ = run_check(tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", host=64 * GiB)
    assert problems and problems[0].startswith("sandbox.max_concurrency: Host memory"), problems


def weight_update(budgets) -> float:
    host = budgets[2]
    (item,) = [i for i in host.items if i.what.startswith("weight update")]
    return item.nbytes


def test_a_weight_sync_counts_what_rank_0_gathers(tmp_path):
    """Every parameter in optimizer_dtype plus its actor.dtype copy (AReaL's `_save_model_to_hf`; the 7B:
    31 + 15 GiB), and under LoRA the adapter alone (train/patches.py fix 7), not the frozen 32B base it
    gathered before (124 + 62 GiB). bench/weight_sync_memory.py measures the figure against rank 0's peak."""
    seven = shape("qwen2.5-vl-7b")
    full = weight_update(run_check(tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b")[0])
    assert full == seven.params * (4 + 2)
    fp32 = weight_update(
        run_check(tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", "actor.dtype=float32")[0]
    )
    assert fp32 == seven.params * 4  # no second copy when the dtypes match
    config = "configs/cua_grpo_qwen3vl_32b_lora.yaml"
    lora = weight_update(run_check(tmp_path, config, "qwen3-vl-32b")[0])
    adapter = shape("qwen3-vl-32b").lora_params(load(tmp_path, config=config))
    assert lora == adapter * (4 + 2) and lora < 1 * GiB


def test_notes_for_settings_without_effect(tmp_path):
    _, _, notes = run_check(
        tmp_path, "configs/cua_grpo.yaml", "qwen2.5-vl-7b", "agent.max_turns=15", "sandbox.max_concurrency=4"
    )
    assert any(n.startswith("agent.max_turns=15 has no effect beyond 10") for n in notes), notes
    assert any(n.startswith("sandbox.max_concurrency=4 per rank is below") for n in notes), notes


def test_train_areal_check_prints_budgets_and_exits_by_verdict(tmp_path):
    base = [sys.executable, str(REPO / "train_areal.py"), "--config", str(REPO / "configs/local_cpu.yaml")]
    base += [f"cluster.fileroot={tmp_path}", f"actor.path={MODELS['untied']}", "--check"]
    ok = subprocess.run(
        [*base, "--gpu-memory-gib", "80"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "GPU memory, one trainer rank, training" in ok.stdout and "the config fits" in ok.stdout
    bad = subprocess.run(
        [*base, "--gpu-memory-gib", "0.001"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert bad.returncode == 1 and "  - actor." in bad.stdout, bad.stdout + bad.stderr
    missing = subprocess.run(
        [*base[:-2], "actor.path=no-such-org/no-such-model", "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert missing.returncode == 2 and missing.stdout.startswith("actor.path: "), (
        missing.stdout + missing.stderr
    )


def test_a_hub_id_needs_only_its_config_files_in_the_cache(tmp_path, monkeypatch):
    """The GPU configs name `Qwen/Qwen2.5-VL-7B-Instruct`: the check reads its two config files from the
    Hugging Face cache (or fetches just those), never the weights. The cache here holds nothing else."""
    import shutil

    hub_id = "Qwen/Qwen2.5-VL-7B-Instruct"
    snapshot = tmp_path / "hub" / f"models--{hub_id.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(SHAPES / "qwen2.5-vl-7b", snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_shape(hub_id, (1280, 800)) == shape("qwen2.5-vl-7b")


def test_a_gbox_config_needs_its_api_key_and_no_other_config_does(tmp_path, monkeypatch):
    monkeypatch.delenv("GBOX_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here to supply it
    cfg = ("configs/cua_grpo.yaml", "qwen2.5-vl-7b")
    _, problems, _ = run_check(tmp_path, *cfg, "sandbox.backend=gbox")
    assert problems == [
        "sandbox.backend: gbox needs GBOX_API_KEY (in the environment or .env; env.example lists it)"
    ]
    assert run_check(tmp_path, *cfg)[1] == []  # docker: no key asked for
    (tmp_path / ".env").write_text("GBOX_API_KEY=gbox-key-from-dotenv\n")
    assert run_check(tmp_path, *cfg, "sandbox.backend=gbox")[1] == []


def test_gbox_settings_are_validated_by_name(tmp_path):
    from cua_agent.config import ConfigError

    with pytest.raises(ConfigError, match=r"sandbox\.gbox_expires_in_s: must be >= 60"):
        load(tmp_path, "sandbox.backend=gbox", "sandbox.gbox_expires_in_s=10", config="configs/cua_grpo.yaml")


def test_a_model_of_another_family_is_refused_naming_agent_model_family(tmp_path):
    cfg = load(tmp_path, "agent.model_family=qwen3-vl", f"actor.path={SHAPES / 'qwen2.5-vl-7b'}")
    rows = load_task_rows(REPO / cfg.tasks.train_path, cfg.tasks.train_split, list(cfg.tasks.task_ids))
    _, problems, _ = check(cfg, rows, gpu_bytes=None, host_bytes=PLENTY, disk_bytes=PLENTY)
    assert [p for p in problems if p.startswith("agent.model_family is 'qwen3-vl'")], problems


def test_a_lora_run_keeps_the_base_frozen_and_syncs_and_saves_the_adapter(tmp_path):
    """Qwen3-VL-32B, rank 16 on the language model's 7 projections of 64 layers: 16 x (5120 + 8192 + 2 x (5120 +
    1024) + 8192 + 5120 + 3 x (5120 + 25600)) x 64 = 134,217,728 adapter parameters."""
    config = "configs/cua_grpo_qwen3vl_32b_lora.yaml"
    cfg = load(tmp_path, config=config)
    assert (
        shape("qwen3-vl-32b").params == 33_357_390_064
        and shape("qwen3-vl-32b").lora_params(cfg) == 134_217_728
    )
    train = run_check(tmp_path, config, "qwen3-vl-32b")[0][0]
    states = {i.what.split(":")[0]: i.nbytes for i in train.items}
    assert states["frozen base"] == 33_357_390_064 * 4 / 4  # fp32, no gradient, no Adam state, over 4 ranks
    assert states["LoRA adapter"] == 134_217_728 * 16 / 4
    full, _, _ = run_check(tmp_path, config, "qwen3-vl-32b", "actor.use_lora=false", "recover.mode=auto")
    assert full[0].total > 2 * train.total  # without LoRA the 32B does not fit four 80 GB GPUs
    disk = run_check(tmp_path, config, "qwen3-vl-32b")[0][-1]
    recover = next(i for i in disk.items if i.what.startswith("recover checkpoints"))
    assert recover.nbytes == 3 * 134_217_728 * 12  # keep_last 2 + 1 being written, the adapter + Adam in fp32
    assert disk.total < 10 * GiB  # adapters only: recover checkpoints, HF saves, the copies the servers keep
