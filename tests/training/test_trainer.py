"""AReaL's PPOTrainer (FSDP on CPU over gloo) trains through `train_areal.py` against a real vLLM CPU server.

The run is a subprocess (FSDP and torch.distributed state are process-global) in its own session, so the
test can check that it leaves nothing running. Its workflow, defined here, is one chat turn per episode
on a synthetic 1280x800 screenshot; the reward is a deterministic function of the sampled tokens.
"""

from __future__ import annotations

import asyncio
import getpass
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from areal.api.workflow_api import RolloutWorkflow
from areal.utils.data import concat_padded_tensors

from cua_agent.config import CUAGRPOConfig
from cua_agent.episode.model_view import VISION_TOKENS
from cua_agent.inference.engine import StockVLLMEngine
from cua_agent.inference.local_server import MODELS
from cua_agent.inference.processing import load_processor
from cua_agent.inference.vllm_server import SamplingParams
from cua_agent.rollout.rows import SCREENSHOTS
from tests.inference.reference import chat_messages, screenshot
from tests.training.harness import restore_weights, run_training


def token_reward(output_ids: list[int], vocab_size: int) -> float:
    """Fraction of sampled tokens in the lower half of the vocabulary: learnable, deterministic."""
    return sum(t < vocab_size // 2 for t in output_ids) / max(1, len(output_ids))


class SyntheticChatWorkflow(RolloutWorkflow):
    """A group of agent.group_size one-turn episodes on one screenshot → one row per episode, rewards
    normalised within the group (as the real workflow does: actor.reward_norm is null)."""

    def __init__(self, config: CUAGRPOConfig):
        self.group_size = config.agent.group_size
        self.processor = load_processor(config.actor.path)
        tok = self.processor.tokenizer
        self.image_token_id = tok.convert_tokens_to_ids("<|image_pad|>")
        # As the real workflow does: a sampled vision placeholder would be an image slot without an image
        # for the trainer's model (its rope index raises StopIteration).
        self.sampling = SamplingParams(
            max_tokens=config.agent.max_new_tokens,
            temperature=config.agent.temperature,
            banned_token_ids=[tok.convert_tokens_to_ids(t) for t in VISION_TOKENS],
        )
        self.vocab_size = len(tok)

    async def arun_episode(self, engine: StockVLLMEngine, data: dict[str, Any]) -> dict[str, Any]:
        image = screenshot(int(data["seed"]))
        messages = chat_messages([image], "Click OK.")
        for _ in range(20):  # a group of equal rewards has no gradient: draw again (a step must move weights)
            turns = await asyncio.gather(
                *(engine.achat(messages, self.sampling, rid=uuid.uuid4().hex) for _ in range(self.group_size))
            )
            if len({token_reward(t.output_token_ids, self.vocab_size) for t in turns}) > 1:
                break
        ip = self.processor.image_processor
        grid = ip(images=[image], return_tensors="pt")["image_grid_thw"]
        n_image_tokens = int((grid.prod(-1) // ip.merge_size**2).sum())
        png = io.BytesIO()
        image.save(png, "PNG")  # as rows carry screenshots: the trainer decodes them (patches.py, fix 4)
        rewards = torch.tensor([token_reward(t.output_token_ids, self.vocab_size) for t in turns])
        rewards = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6)
        rows = []
        for turn, reward in zip(turns, rewards, strict=True):
            prompt, out = turn.prompt_token_ids, turn.output_token_ids
            seen = sum(t == self.image_token_id for t in prompt)
            if seen != n_image_tokens:
                raise AssertionError(f"{seen} image tokens in the prompt, processor expects {n_image_tokens}")
            ids = prompt + out
            rows.append(
                {
                    "input_ids": torch.tensor([ids]),
                    "attention_mask": torch.ones(1, len(ids), dtype=torch.bool),
                    "loss_mask": torch.tensor([[0] * len(prompt) + [1] * len(out)], dtype=torch.int32),
                    "logprobs": torch.tensor([[0.0] * len(prompt) + turn.output_logprobs]),
                    "versions": torch.tensor(
                        [[-1] * len(prompt) + [turn.version] * len(out)], dtype=torch.int32
                    ),
                    "mm_token_type_ids": torch.tensor([[int(t == self.image_token_id) for t in ids]]),
                    "rewards": reward.reshape(1).float(),
                    "multi_modal_input": [{"image_grid_thw": grid, SCREENSHOTS: [png.getvalue()]}],
                }
            )
        return concat_padded_tensors(rows)


def _one_gpu_sized_step(vllm_servers, tmp_path: Path, *overrides: str) -> tuple[dict, dict]:
    """One training step at the GPU configs' lr 1e-6 in bfloat16: (the recover checkpoint's state, flat; the
    initial weights)."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    server = vllm_servers["untied"]
    exp = tmp_path / "exp"
    run = run_training(
        [
            f"cluster.fileroot={exp}",
            "total_train_steps=1",
            "inference.launch_local=false",
            f'inference.addresses=["{server.address}"]',
            "workflow=tests.training.test_trainer.SyntheticChatWorkflow",
            "tasks.task_ids=[miniwob/click-button]",
            "agent.group_size=4",
            "agent.max_new_tokens=8",
            "actor.dtype=bfloat16",
            "actor.optimizer.lr=1e-6",
            *overrides,
        ],
        tmp_path / "run.log",
    )
    assert run.rc == 0, f"train_areal.py exited {run.rc}:\n{run.tail()}"
    restore_weights(server.address, MODELS["untied"], tmp_path, version=2)
    ckpt = exp / "checkpoints" / getpass.getuser() / "cua-local" / "trial0" / "recover" / "globalstep0"
    dcp_to_torch_save(ckpt / "model", tmp_path / "state.pt")
    state = dict(_flat(torch.load(tmp_path / "state.pt", weights_only=False)))
    return state, load_file(MODELS["untied"] / "model.safetensors")


def _stored(state: dict, name: str, suffix: str = "") -> torch.Tensor | None:
    """The checkpoint's tensor for HF weight `name` (+ an optimizer-state suffix such as ".compensation")."""
    tail = name.split("model.", 1)[-1] + suffix
    return next((v for k, v in state.items() if k.endswith(tail)), None)


@pytest.mark.slow
def test_a_bf16_actor_keeps_fp32_master_weights_that_a_gpu_sized_step_moves(vllm_servers, tmp_path: Path):
    """The GPU configs train in bfloat16 at lr 1e-6. An Adam step moves a weight by about lr, far below
    bf16's resolution (~1e-4 at the tiny model's weight scale), so with bf16 master weights the update would
    vanish. AReaL keeps fp32 masters (actor.optimizer_dtype): one step on CPU must leave fp32 weights in the
    recover checkpoint that differ from the initial ones by about the learning rate."""
    state, initial = _one_gpu_sized_step(vllm_servers, tmp_path)
    moved = 0
    for name, before in initial.items():
        after = _stored(state, name)
        if after is None or after.shape != before.shape:
            continue
        assert after.dtype == torch.float32, (name, after.dtype)
        delta = (after - before).abs().max().item()
        assert delta < 1e-4, (name, delta)  # one step at lr 1e-6: small moves, no bf16 rounding of masters
        moved += delta > 0
    assert moved > 10, f"only {moved} tensors moved"


@pytest.mark.slow
def test_bf16_weights_with_adam_bf16_keep_a_gpu_sized_step_in_their_kahan_compensation(
    vllm_servers, tmp_path: Path
):
    """The single-GPU config stores weights and Adam state in bfloat16 (optimizer.type adam_bf16: 10 bytes
    per parameter instead of 16). A step at lr 1e-6 is below bf16's resolution; AReaL's AnyPrecisionAdamW
    keeps what rounding drops in a Kahan compensation buffer, so weight + compensation must move by about
    the learning rate (plain adam with bf16 storage would lose it: AReaL issue #1292)."""
    state, initial = _one_gpu_sized_step(
        vllm_servers, tmp_path, "actor.optimizer_dtype=bfloat16", "actor.optimizer.type=adam_bf16"
    )
    moved = 0
    for name, before in initial.items():
        after, comp = _stored(state, name), _stored(state, name, ".compensation")
        if after is None or comp is None or after.shape != before.shape:
            continue
        assert after.dtype == torch.bfloat16, (name, after.dtype)
        effective = after.float() + comp.float()
        delta = (effective - before.bfloat16().float()).abs().max().item()
        assert delta < 1e-4, (name, delta)
        moved += delta > 0
    assert moved > 10, f"only {moved} tensors moved"


def _flat(d: Any, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        elif torch.is_tensor(v):
            yield f"{prefix}{k}", v
