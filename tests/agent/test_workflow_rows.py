"""Group → training rows without servers: the calls are built with the real tiny processor, exactly as the
server would expand them, so row checks (image tokens, masks, pixel values) run on real data."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from areal.infra.workflow_executor import check_trajectory_format

from cua_agent.config import AgentConfig, SandboxConfig
from cua_agent.episode.actions import Click
from cua_agent.episode.loop import Episode
from cua_agent.episode.turn import Turn
from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS
from cua_agent.inference.model_call import ModelCall
from cua_agent.rollout.rewards import normalise_group
from cua_agent.rollout.workflow import CUAWorkflow
from tests.inference.reference import screenshot

# The tiny model of each family the workflow is tested with.
FAMILY_MODELS = {"qwen2.5-vl": MODELS["untied"], "qwen3-vl": QWEN3_VL_MODELS["untied"]}


def config(**agent) -> SimpleNamespace:
    """The workflow's config sections: the real dataclasses (every field, its default), small values; the
    model is agent.model_family's tiny model."""
    overrides = dict(
        group_size=3,
        max_turns=4,
        max_new_tokens=16,
        turn_timeout_s=60.0,
        episode_timeout_s=300.0,
        save_screenshots=True,
    )
    agent_config = AgentConfig(**{**overrides, **agent})
    model = str(FAMILY_MODELS[agent_config.model_family])
    return SimpleNamespace(
        agent=agent_config,
        sandbox=SandboxConfig(max_concurrency=2, acquire_timeout_s=60.0),
        tokenizer_path=model,
        actor=SimpleNamespace(path=model),
    )


@pytest.fixture(scope="module")
def workflow_factory(tmp_path_factory):
    def make(**agent) -> CUAWorkflow:
        out = tmp_path_factory.mktemp("run") / "rollouts.jsonl"
        return CUAWorkflow(config(**agent), rollouts_path=out)

    return make


def png(seed: int) -> bytes:
    import io

    buf = io.BytesIO()
    screenshot(seed).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def call(wf: CUAWorkflow, n_images: int, n_out: int, seed: int) -> ModelCall:
    """A call as the server returns it: the chat template applied, image pads expanded."""
    images = [png(seed + i) for i in range(n_images)]
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": "Click OK."}]
    proc = wf.view.processor
    text = proc.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    import io

    from PIL import Image

    pil = [Image.open(io.BytesIO(b)) for b in images]
    prompt = proc(text=[text], images=pil or None, return_tensors="pt")["input_ids"][0].tolist()
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(0, 1000, (n_out,), generator=g).tolist()
    return ModelCall(
        "<tool_call>{}</tool_call>",
        prompt,
        out,
        [-float(i + 1) for i in range(n_out)],
        latency_s=0.1,
        version=3,
        images=images,
    )


def episode(
    wf: CUAWorkflow, turns: int, reward: float | None, status: str = "max_turns", seed: int = 0
) -> Episode:
    ep = Episode("miniwob/click-test", seed, "Click OK.", task_reward=reward, status=status)
    for t in range(turns):
        c = call(wf, n_images=min(t + 1, 2), n_out=3 + t, seed=seed * 10 + t)
        ep.turns.append(Turn(c, Click(1, 2), "ok", 0.1, 0.02))
    return ep


def rows_of(batch: dict) -> int:
    return batch["input_ids"].shape[0]


@pytest.mark.parametrize("family", list(FAMILY_MODELS))
def test_variable_length_group_gives_one_exact_row_per_turn(workflow_factory, family):
    wf = workflow_factory(model_family=family)
    eps = [episode(wf, 1, 1.0, seed=1), episode(wf, 2, 0.0, seed=2), episode(wf, 3, 0.0, seed=3)]
    batch = wf.group_to_batch(eps, {"task_id": "miniwob/click-test", "seed": 0})
    assert batch is not None and rows_of(batch) == 6
    # AReaL's check wants pixel_values in multi_modal_input; ours carries PNG screenshots (rows.py)
    check_trajectory_format({k: v for k, v in batch.items() if k != "multi_modal_input"})
    assert len(batch["multi_modal_input"]) == 6

    # every row: its turn's prompt then output tokens, the output alone under the loss mask, logprobs and
    # versions on it only, images that match the prompt
    calls = [t.call for ep in eps for t in ep.turns]
    for i, c in enumerate(calls):
        real = batch["attention_mask"][i].bool()
        assert batch["input_ids"][i][real].tolist() == c.prompt_token_ids + c.output_token_ids
        mask = batch["loss_mask"][i].bool()
        assert int(mask.sum()) == len(c.output_token_ids)
        assert batch["input_ids"][i][mask].tolist() == c.output_token_ids
        assert torch.allclose(batch["logprobs"][i][mask], torch.tensor(c.output_logprobs))
        assert set(batch["versions"][i][mask].tolist()) == {3}
        grid = batch["multi_modal_input"][i]["image_grid_thw"]
        n_img = int((batch["input_ids"][i] == wf.view.image_token_id).sum())
        assert n_img == int((grid.prod(-1) // 4).sum()) == 640 * len(c.images)

    # rewards: each turn carries its episode's group-normalised return (discount 1)
    adv = normalise_group([1.0, 0.0, 0.0])
    expected = [adv[0]] + [adv[1]] * 2 + [adv[2]] * 3
    assert torch.allclose(batch["rewards"], torch.tensor(expected), atol=1e-6)
    assert math.isclose(sum(adv), 0.0, abs_tol=1e-6)


def test_turn_discount_and_format_reward(workflow_factory):
    wf = workflow_factory(turn_discount=0.5, format_reward=0.2, quit_penalty=0.1)
    a, b = episode(wf, 2, 1.0, seed=4), episode(wf, 2, 1.0, seed=5)
    for t in b.turns:  # same task reward, but two unparseable outputs: worse
        t.action, t.note = None, "no valid action: no action found"
    b.format_failures = 2
    batch = wf.group_to_batch([a, b], {"task_id": "t", "seed": 0})
    adv = normalise_group([1.0 + 0.2, 1.0 - 0.2])
    assert adv[0] > 0 > adv[1]
    assert torch.allclose(
        batch["rewards"], torch.tensor([adv[0] * 0.5, adv[0], adv[1] * 0.5, adv[1]]), atol=1e-6
    )


def test_group_with_too_many_infra_failures_is_rejected_not_zero(workflow_factory):
    wf = workflow_factory()
    eps = [
        episode(wf, 2, 1.0, seed=6),
        episode(wf, 1, None, status="infra_error", seed=7),
        Episode("miniwob/click-test", 8, status="infra_error", error="SandboxDied: box gone"),
    ]
    assert wf.group_to_batch(eps, {"task_id": "miniwob/click-test", "seed": 8}) is None
    assert wf.stats["groups_rejected"] == 1 and wf.stats["infra_failures"] == 2
    lines = [json.loads(x) for x in Path(wf.recorder.path).read_text().splitlines()]
    assert [r["status"] for r in lines] == ["max_turns", "infra_error", "infra_error"]
    assert all(r["advantage"] is None for r in lines)  # nobody was trained on


def test_row_that_disagrees_with_server_drops_its_episode(workflow_factory):
    wf = workflow_factory(min_group_size=2)
    good1, good2, bad = (
        episode(wf, 1, 1.0, seed=9),
        episode(wf, 1, 0.0, seed=10),
        episode(wf, 1, 0.0, seed=11),
    )
    bad.turns[0].call.prompt_token_ids.remove(wf.view.image_token_id)  # processor drift: one pad short
    batch = wf.group_to_batch([good1, good2, bad], {"task_id": "t", "seed": 0})
    assert batch is not None and rows_of(batch) == 2
    assert bad.status == "infra_error" and "RowMismatchError" in bad.error


def test_rollouts_jsonl_and_screenshots(workflow_factory):
    wf = workflow_factory()
    eps = [episode(wf, 2, 1.0, seed=12), episode(wf, 1, 0.0, seed=13)]
    wf.group_to_batch(eps, {"task_id": "t", "seed": 0})
    rec = [json.loads(x) for x in Path(wf.recorder.path).read_text().splitlines()][-2:]
    assert rec[0]["task_reward"] == 1.0 and rec[0]["advantage"] > 0 > rec[1]["advantage"]
    assert [len(r["turns"]) for r in rec] == [2, 1]
    assert rec[0]["turns"][1]["images"] == 2 and rec[0]["turns"][1]["version"] == 3
    shots = sorted((Path(wf.recorder.path).parent / "screenshots").rglob("*.png"))
    assert len(shots) >= 3


def test_output_with_a_vision_placeholder_is_the_policys_failure_not_a_dropped_episode(workflow_factory):
    """A sampled <|image_pad|> would be taken for an image slot by the trainer's model: that turn has no
    row, and it counts as a malformed turn. The episode is not dropped (dropping the policy's failures
    would hide them from the gradient): it keeps its place and its lower reward in the group."""
    wf = workflow_factory(min_group_size=2)
    good1, good2, bad = (
        episode(wf, 1, 1.0, seed=14),
        episode(wf, 2, 0.0, seed=15),
        episode(wf, 2, 0.0, seed=16),
    )
    bad.turns[0].call.output_token_ids[1] = wf.view.image_token_id
    batch = wf.group_to_batch([good1, good2, bad], {"task_id": "t", "seed": 0})
    assert batch is not None and rows_of(batch) == 4  # 1 + 2 + the bad episode's clean turn
    assert bad.ok and bad.format_failures == 1 and bad.turns[0].note.startswith("no valid action")
    rewards = batch["rewards"].tolist()
    assert rewards[3] < rewards[1] < 0 < rewards[0]  # below the clean failure: it also broke the format
    # image slots are marked on prompt positions only
    for i in range(4):
        out = batch["loss_mask"][i].bool()
        assert not batch["mm_token_type_ids"][i][out].any()


@pytest.mark.parametrize("family", list(FAMILY_MODELS))
def test_rows_keep_each_screenshot_once_as_png_and_pixel_values_are_built_from_them(workflow_factory, family):
    """A row holds its screenshots as the episode's PNG bytes (shared with the other rows that show them),
    never decoded pixel values (~25 MB per 1280x800 image for Qwen2.5-VL-7B); the trainer builds pixel
    values from them, equal to the processor's on the same images."""
    import io

    from PIL import Image

    from cua_agent.rollout.rows import SCREENSHOTS, batch_pixel_values, pixel_values

    wf = workflow_factory(model_family=family)
    ep = Episode("miniwob/click-test", 0, "Click OK.", task_reward=1.0, status="done")
    shots: list[bytes] = []
    for t in range(3):  # as the loop does: each call embeds the newest screenshots, the same objects
        c = call(wf, n_images=min(t + 1, 2), n_out=3, seed=40 + t)
        shots.append(c.images[-1])
        c.images[:] = shots[-2:]
        ep.turns.append(Turn(c, Click(1, 2), "ok", 0.1, 0.02))
    other = episode(wf, 2, 0.0, seed=9)
    batch = wf.group_to_batch([ep, other], {"task_id": "miniwob/click-test", "seed": 0})
    assert batch is not None
    mm = batch["multi_modal_input"]
    assert all(set(m) == {"image_grid_thw", SCREENSHOTS} for m in mm), [set(m) for m in mm]
    held = [png for m in mm[:3] for png in m[SCREENSHOTS]]
    assert len(held) == 5 and len({id(p) for p in held}) == 3  # 3 screenshots, each stored once
    assert all(any(p is s for s in shots) for p in held)

    for m, turn in zip(mm, [*ep.turns, *other.turns], strict=True):
        images = [Image.open(io.BytesIO(b)).convert("RGB") for b in turn.call.images]
        ref = wf.view.image_processor(images=images, return_tensors="pt")
        assert torch.equal(m["image_grid_thw"], ref["image_grid_thw"])
        assert torch.equal(pixel_values(m, wf.view.image_processor), ref["pixel_values"])
    # a micro-batch's rows, decoded on threads: the same tensor, in row order
    serial = batch_pixel_values(mm, wf.view.image_processor)
    assert torch.equal(batch_pixel_values(mm, wf.view.image_processor, workers=3), serial)
