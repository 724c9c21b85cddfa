"""On CPU (sdpa) the trainer's attention keeps AReaL's packed sequences apart, as flash-attention's varlen
kernels do on GPUs."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from cua_agent.train.patches import segmented_sdpa as _segmented_sdpa


class _Causal(torch.nn.Module):
    is_causal = True


def test_packed_sequences_attend_only_within_themselves():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 11, 8) for _ in range(3))
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)  # two sequences + 2 padding tokens
    packed, _ = _segmented_sdpa(_Causal(), q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    for a, b in ((0, 4), (4, 9), (9, 11)):
        alone, _ = sdpa_attention_forward(_Causal(), q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], None)
        torch.testing.assert_close(packed[:, a:b], alone)
    whole, _ = sdpa_attention_forward(_Causal(), q, k, v, None)
    assert not torch.allclose(packed[:, 4:9], whole[:, 4:9]), "plain sdpa leaks across sequences"


def test_packed_sequences_get_the_gradients_they_get_alone():
    torch.manual_seed(0)
    bounds = ((0, 4), (4, 9), (9, 11))
    qkv = [torch.randn(1, 2, 11, 8, requires_grad=True) for _ in range(3)]
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    packed, _ = _segmented_sdpa(_Causal(), *qkv, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    weights = torch.randn_like(packed)
    (packed * weights).sum().backward()
    for a, b in bounds:
        alone = [t.detach()[:, :, a:b].clone().requires_grad_() for t in qkv]
        out, _ = sdpa_attention_forward(_Causal(), *alone, None)
        (out * weights[:, a:b]).sum().backward()
        for t, t_alone in zip(qkv, alone, strict=True):
            torch.testing.assert_close(t.grad[:, :, a:b], t_alone.grad)


def test_unpacked_calls_are_plain_sdpa():
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    out, _ = _segmented_sdpa(_Causal(), q, k, v, None)
    torch.testing.assert_close(out, sdpa_attention_forward(_Causal(), q, k, v, None)[0])


def test_qwen2_5_vl_image_positions_follow_the_original_mrope():
    """Image tokens: t = start (+ t_index * interval for video frames), h/w = start + row/column index.
    transformers 5.3 gives t = start * interval (tokens_per_second * second_per_grid)."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    from cua_agent.train import patches as trainer_patches

    trainer_patches.install("sdpa")
    pos = Qwen2_5_VLModel.get_vision_position_ids(None, 9, torch.tensor([1, 4, 6]), 1, 2, 4)
    assert pos.tolist() == [[9] * 6, [9, 9, 9, 10, 10, 10], [9, 10, 11, 9, 10, 11]]
    video = Qwen2_5_VLModel.get_vision_position_ids(None, 5, torch.tensor([2, 2, 2]), 1, 2, 3)
    assert video.tolist() == [[5, 8], [5, 5], [5, 5]]


def _tiny_inner_model(family: str):
    from transformers import AutoModelForImageTextToText

    from cua_agent.inference.local_server import MODELS, QWEN3_VL_MODELS

    path = {"qwen2.5-vl": MODELS["untied"], "qwen3-vl": QWEN3_VL_MODELS["untied"]}[family]
    return AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).model


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_a_text_only_batch_gets_text_positions_as_the_server_gives_them(family):
    """AReaL asks the VLM for 3-D positions of every batch; with no image in it (the terminal agent's rows)
    transformers returns None and the first step crashed in torch.einsum. Text positions are 0..n-1 per
    row, the same on the three axes (vLLM's mRoPE for a prompt without images), after an image batch too."""
    from cua_agent.train import patches as trainer_patches

    trainer_patches.install("sdpa")
    inner = _tiny_inner_model(family)
    ids = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    args = {"inputs_embeds": None, "past_key_values": None, "mm_token_type_ids": torch.zeros_like(ids)}
    for _ in range(2):  # the second call: transformers keeps rope_deltas of the first
        pos = inner.compute_3d_position_ids(
            input_ids=ids, image_grid_thw=None, video_grid_thw=None, attention_mask=mask, **args
        )
        assert pos is not None and pos.shape == (3, 2, 5)
        for axis in pos:
            assert axis[0, :4].tolist() == [0, 1, 2, 3] and axis[1, :3].tolist() == [0, 1, 2]


def backward_nodes(tensor: torch.Tensor) -> set[str]:
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(next_fn for next_fn, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


@pytest.mark.parametrize("entropy", [False, True], ids=["logprobs", "logprobs+entropy"])
def test_log_probabilities_in_chunks_are_one_pass_over_the_tokens_with_one_backward(entropy):
    """Fix 9, through AReaL's own entry points: the values and gradients of one pass over every token (a
    length that is no multiple of the chunk), and slices taken by a split, not one by one (each slice's
    backward zero-filled a tensor of all the micro-batch's logits)."""
    import areal.utils.functional.vocab_parallel as vocab_parallel

    from cua_agent.train import patches as trainer_patches

    trainer_patches.install("sdpa")
    torch.manual_seed(0)
    logits = torch.randn(2500, 64, requires_grad=True)
    labels = torch.randint(0, 64, (2500,))
    gather = vocab_parallel.gather_logprobs_entropy if entropy else vocab_parallel.gather_logprobs
    out = gather(logits, labels, temperature=0.7, chunk_size=1024)
    outs = out if entropy else (out,)
    assert "SliceBackward0" not in backward_nodes(outs[0]) and "SplitBackward0" in backward_nodes(outs[0])
    weights = [torch.randn(2500) for _ in outs]
    sum(((o * w).sum() for o, w in zip(outs, weights, strict=True)), torch.tensor(0.0)).backward()

    whole = logits.detach().clone().requires_grad_()
    log_probs = torch.log_softmax(whole / 0.7, dim=-1)
    expected = [log_probs.gather(-1, labels[:, None])[:, 0], -(log_probs.exp() * log_probs).sum(-1)]
    expected = expected[: len(outs)]
    sum(((e * w).sum() for e, w in zip(expected, weights, strict=True)), torch.tensor(0.0)).backward()
    for o, e in zip(outs, expected, strict=True):
        torch.testing.assert_close(o, e)
    torch.testing.assert_close(logits.grad, whole.grad)
