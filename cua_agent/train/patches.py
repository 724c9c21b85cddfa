"""Fixes for the trainer process. 1 and 2 patch transformers (5.3, the newest AReaL 1.0.4 allows) so that
AReaL's FSDP actor recomputes exactly what the vLLM server computed; each was measured on the tiny
Qwen2.5-VL with tests/consistency (AReaL recompute vs the server's logprobs on real screenshot rows).
3 patches AReaL's redistribution of rollouts across trainer ranks.

1. Packed micro-batches with `sdpa`: AReaL packs several sequences into one row and passes their bounds as
   `cu_seq_lens_q` for flash-attention's varlen kernels, with `attention_mask={"full_attention": None}`
   (areal/engine/fsdp_engine.py:1897). Plain sdpa runs one causal attention over the whole row, so every
   sequence after the first attends to the ones before it: ~5e-2 logprob error (9.8e-2 on the tiny Qwen3-VL's
   rows, 4.8e-7 with the fix). Flash-attention (GPUs) is unaffected; CPU and any sdpa run are.
2. Qwen2.5-VL mRoPE: `Qwen2_5_VLModel.get_vision_position_ids` gives image tokens the temporal position
   `start * time_interval` (time_interval = tokens_per_second * second_per_grid_t) instead of
   `start + t_index * time_interval` (the original Qwen2.5-VL algorithm, which vLLM implements). Image tokens
   then carry wrong rotary phases: ~3e-3 logprob error on the tiny model (tokens_per_second 4; 2 in the real
   Qwen2.5-VL configs). HF's own forward only uses these 3-D positions when `mm_token_type_ids` is passed.
   Qwen3-VL's own positions are right (4.8e-7 without this fix), so it patches Qwen2.5-VL only.
3. Ragged lists across ranks: before every update AReaL gathers each rank's trajectories on every rank
   (areal/infra/dist_rollout.py, `all_gather_tensor_container`), element by element, and raises on lists
   of different lengths and on dicts with different keys. A group's `multi_modal_input` holds one entry per
   row (turn): two ranks whose groups differ in turns, or a GUI group (entries with screenshots) beside a
   terminal group (empty entries) with as many rows, crashed the first step with more than one trainer
   process (tests/training/test_ragged_redistribution.py). Such lists are gathered whole instead.
4. Screenshots as pixel values, one micro-batch at a time: rows carry their images as PNG bytes
   (cua_agent/rollout/rows.py). AReaL prepares every micro-batch of a call at once
   (`_prepare_mb_list` → `_prepare_multimodal_forward_inputs`) and moves them all to the GPU, so decoding
   there would hold a whole minibatch's fp32 pixel values. The screenshots ride along to
   `_prepare_mb_inputs`, which runs right before each micro-batch's forward; its pixel values are built
   there, on a copy of the micro-batch, and freed after the forward.
5. LoRA on a vision-language model: AReaL computes mRoPE positions with `self.model.model.
   compute_3d_position_ids` (fsdp_engine.py `_prepare_mb_list`), which is the HF model's inner model without
   LoRA; with it `self.model` is PEFT's wrapper, one level further out, and the first step crashed with
   AttributeError. The wrapped HF model is given the inner model's method.
6. Text-only batches on a vision-language model (the terminal agent's rows): AReaL asks the model for 3-D
   positions of every batch, and transformers returns None when no image grid is given (it would let
   the model infer positions later), so `_prepare_mb_list` crashed in torch.einsum. Such a batch gets
   text positions: 0..n-1 per row on all three axes, what vLLM's mRoPE gives a prompt without images
   (Qwen2.5-VL and Qwen3-VL).
7. A LoRA run's weight sync gathers the adapter alone: AReaL's `_save_model_to_hf` (every step's sync, and
   the saver's HF saves) gathers the full state dict to rank 0's host, frozen base included, in
   optimizer_dtype, then writes only the adapter keys of it (PEFT): for the 32B LoRA config, 124 GiB of
   fp32 base and its 62 GiB bf16 copy on one host, each step, for a 256 MiB file
   (tests/training/test_sync_gather.py). The parameters that train are gathered instead; the file written
   is the same.
8. Every rank runs the vision tower in every forward. FSDP shards it block by block, each block gathering
   its parameters when it runs (and reduce-scattering its gradients after backward); a rank whose
   micro-batch had no image (a terminal group's rows after the redistribution of a mixed step) skipped
   those collectives while another rank ran them: gloo aborted ("Received data size doesn't match
   expected size"), NCCL would hang (tests/training/test_mixed_ranks.py, found by the mixed rehearsal). With
   several ranks, a micro-batch without images runs the tower on a blank image of the smallest grid, and
   adds 0 x its output to the token embeddings: the same collectives on every rank, zero gradients, the
   same numbers.
9. Log-probabilities in chunks, with one backward: AReaL computes each micro-batch's log-probabilities and
   entropy in slices of 1,024 tokens (areal/utils/functional/vocab_parallel.py, `_chunked_apply`), and the
   backward of each slice writes its gradient into a zero-filled tensor as large as the micro-batch's whole
   logits, then adds it to the others: one pass over [tokens, vocabulary] per slice. Taken with one
   `split`, the slices' gradients are joined in one pass, with the same numbers (an update of 16 screenshot
   rows on 2 CPU cores: 5.1 s -> 4.2 s, the same weights after it; bench/chunked_logprobs.py).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import torch

from cua_agent.rollout.rows import SCREENSHOTS, batch_pixel_values

_installed: set[str] = set()
_image_processor: Any = None  # fix 4: the rollout's image processor (cua_agent/inference/processing.py)


def install(attn_impl: str) -> None:
    """Apply the fixes in this process (idempotent)."""
    if attn_impl == "sdpa" and "sdpa" not in _installed:
        from transformers import AttentionInterface

        AttentionInterface.register("sdpa", segmented_sdpa)
        _installed.add("sdpa")
    if "mrope" not in _installed:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

        Qwen2_5_VLModel.get_vision_position_ids = vision_position_ids  # type: ignore[method-assign]
        _installed.add("mrope")
    if "lora_vlm" not in _installed:
        from areal.engine.fsdp_engine import FSDPEngine

        FSDPEngine._apply_peft_wrapper = _peft_wrapper_with_positions(FSDPEngine._apply_peft_wrapper)  # type: ignore[method-assign]
        _installed.add("lora_vlm")
    if "text_positions" not in _installed:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

        for cls in (Qwen2_5_VLModel, Qwen3VLModel):
            cls.compute_3d_position_ids = _text_positions_without_images(cls.compute_3d_position_ids)  # type: ignore[method-assign]
        _installed.add("text_positions")
    if "lora_sync" not in _installed:
        from areal.engine.fsdp_engine import FSDPEngine

        FSDPEngine._save_model_to_hf = _adapter_alone_under_lora(FSDPEngine._save_model_to_hf)  # type: ignore[method-assign]
        _installed.add("lora_sync")
    if "ragged" not in _installed:
        import areal.infra.dist_rollout as dist_rollout

        dist_rollout.all_gather_tensor_container = all_gather_ragged
        _installed.add("ragged")
    if "chunked_logprobs" not in _installed:
        import areal.utils.functional.vocab_parallel as vocab_parallel

        vocab_parallel._chunked_apply = split_apply
        _installed.add("chunked_logprobs")


def install_screenshot_pixels(image_processor: Any) -> None:
    """Fix 4 with the image processor the rollouts used (the newest call's wins; idempotent)."""
    import areal.engine.fsdp_engine as fsdp_engine

    global _image_processor
    _image_processor = image_processor
    if "screenshots" in _installed:
        return
    forward_inputs = fsdp_engine._prepare_multimodal_forward_inputs
    prepare_mb_inputs = fsdp_engine.FSDPEngine._prepare_mb_inputs

    def forward_inputs_with_screenshots(mb: dict[str, Any], padded_mb: dict[str, Any]) -> None:
        items = mb.get("multi_modal_input") or padded_mb.get("multi_modal_input") or []
        shots = [m for m in items if SCREENSHOTS in m]  # text-only rows have an empty entry
        if shots and any("pixel_values" in m for m in items):
            raise ValueError("a micro-batch mixes rows with screenshots and rows with pixel values")
        forward_inputs(mb, padded_mb)  # concatenates the grids, drops multi_modal_input
        if shots:
            padded_mb[SCREENSHOTS] = shots

    def prepare_mb_inputs_with_pixels(self: Any, mb_item: Any) -> Any:
        shots = mb_item.padded_mb.get(SCREENSHOTS)
        if shots is not None:
            padded = {k: v for k, v in mb_item.padded_mb.items() if k != SCREENSHOTS}
            pixels = batch_pixel_values(shots, _image_processor, _decode_workers())
            padded["pixel_values"] = pixels.to(self.device)
            mb_item = mb_item._replace(padded_mb=padded)
        elif "pixel_values" not in mb_item.padded_mb and _several_ranks():
            _vision_in_text_forwards(self.model).arm(self.device)  # fix 8
        return prepare_mb_inputs(self, mb_item)

    fsdp_engine._prepare_multimodal_forward_inputs = forward_inputs_with_screenshots
    fsdp_engine.FSDPEngine._prepare_mb_inputs = prepare_mb_inputs_with_pixels  # type: ignore[method-assign]
    _installed.add("screenshots")


def _several_ranks() -> bool:
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_world_size() > 1


class _VisionInTextForwards:
    """Fix 8: armed before the forward of a micro-batch without images, it runs the vision tower on a blank
    image from within that forward (a hook on the token embeddings, where the model's own parameters are
    gathered) and adds 0 x the result."""

    def __init__(self, model: Any):
        self.hf = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT's wrapper
        self.inputs: dict[str, torch.Tensor] | None = None
        self._blank: dict[str, torch.Tensor] | None = None
        self.hf.get_input_embeddings().register_forward_hook(self._add_vision)

    def arm(self, device: Any) -> None:
        if self._blank is None:
            from PIL import Image

            small = Image.new("RGB", (56, 56))  # smart_resize raises it to the processor's smallest grid
            got = _image_processor(images=[small], return_tensors="pt")
            self._blank = {"pixel_values": got["pixel_values"], "image_grid_thw": got["image_grid_thw"]}
        self.inputs = {k: v.to(device) for k, v in self._blank.items()}

    def _add_vision(self, module: Any, args: Any, embeds: torch.Tensor) -> torch.Tensor:
        inputs, self.inputs = self.inputs, None
        if inputs is None:
            return embeds
        features = self.hf.get_image_features(**inputs)
        nothing = sum(t.float().sum() for t in _tensors(features) if t.is_floating_point()) * 0.0
        return embeds + nothing.to(embeds.dtype)


def _vision_in_text_forwards(model: Any) -> _VisionInTextForwards:
    hook = getattr(model, "_cua_vision_in_text_forwards", None)
    if hook is None:
        hook = _VisionInTextForwards(model)
        model._cua_vision_in_text_forwards = hook
    return hook


def _peft_wrapper_with_positions(apply_peft_wrapper: Any) -> Any:
    """Fix 5: AReaL's PEFT wrapping, then the HF model under PEFT answers `compute_3d_position_ids`."""

    def apply(self: Any) -> None:
        apply_peft_wrapper(self)
        hf = self.model.get_base_model()
        inner = getattr(hf, "model", None)
        if hasattr(inner, "compute_3d_position_ids") and not hasattr(hf, "compute_3d_position_ids"):
            hf.compute_3d_position_ids = inner.compute_3d_position_ids

    return apply


def _adapter_alone_under_lora(save_model_to_hf: Any) -> Any:
    """Fix 7: under LoRA, the HF save of the parameters that train (PEFT writes the adapter keys only)."""
    import areal.engine.fsdp_engine as fsdp_engine
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    def save(self: Any, path: str, tokenizer: Any, processor: Any) -> None:
        if not self.config.use_lora:
            return save_model_to_hf(self, path, tokenizer, processor)
        os.makedirs(path, exist_ok=True)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        state = fsdp_engine.get_model_state_dict(self.model, options=options)  # collective; rank 0 gets it
        if dist.get_rank() == 0:
            state = {k: self._cast_to_compute_dtype(v) for k, v in state.items()}
            self.model.save_pretrained(path, state_dict=state)  # adapter_config.json + adapter weights
            self.model_config.save_pretrained(path)
        dist.barrier(group=self.cpu_group)

    return save


def _text_positions_without_images(compute: Any) -> Any:
    """Fix 6: positions of a batch without images or videos are text positions, not None."""

    def compute_3d_position_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        no_media = kwargs.get("image_grid_thw") is None and kwargs.get("video_grid_thw") is None
        if args or not no_media or input_ids is None or kwargs.get("past_key_values") is not None:
            return compute(self, *args, **kwargs)
        mask = kwargs.get("attention_mask")
        mask = torch.ones_like(input_ids) if mask is None else mask
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
        return positions.unsqueeze(0).expand(3, -1, -1)

    return compute_3d_position_ids


def _decode_workers() -> int:
    """This rank's share of the node's cores (the trainer ranks of a node decode at the same time)."""
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, min(16, (os.cpu_count() or 1) // max(1, local_ranks)))


def segmented_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa, run per packed sequence when AReaL passes `cu_seq_lens_q` (fix 1)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.pop("cu_seq_lens_q", None)
    packed = (
        cu is not None
        and attention_mask is None
        and getattr(module, "is_causal", False)
        and query.shape[0] == 1
        and query.shape[2] == key.shape[2]
    )
    if not packed:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = [int(x) for x in cu.tolist()]
    if bounds[-1] < query.shape[2]:  # padding after the last sequence
        bounds.append(query.shape[2])
    kwargs = {k: v for k, v in kwargs.items() if k not in ("cu_seq_lens_k", "max_length_q", "max_length_k")}
    outs = [
        sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None, **kwargs)[0]
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]
    return torch.cat(outs, dim=1), None  # sdpa_attention_forward returns [batch, seq, heads, dim]


def vision_position_ids(
    self: Any,
    start_position: int,
    grid_thw: Any,
    temp_merge_size: int = 1,
    spatial_merge_size: int = 1,
    time_interval: int = 1,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """(3, n) positions of one image/video's tokens: t = start + t_index * interval, h/w = start + index."""
    t = int(grid_thw[0]) // temp_merge_size
    h = int(grid_thw[1]) // spatial_merge_size
    w = int(grid_thw[2]) // spatial_merge_size
    t_index = (torch.arange(t, device=device) * time_interval).repeat_interleave(h * w)
    h_index = torch.arange(h, device=device).repeat_interleave(w).repeat(t)
    w_index = torch.arange(w, device=device).repeat(h * t)
    return torch.stack([t_index, h_index, w_index]).long() + start_position


def all_gather_ragged(data: Any, group: Any = None) -> Any:
    """AReaL's `all_gather_tensor_container` (fix 3): the same result, but the lists of the ranks may differ
    in shape. A list whose length, or whose items' kinds (a dict's keys), differ across ranks is gathered whole
    as one object per rank (its tensors through the CPU, then back on this rank's device): a GUI group's
    per-row entries hold screenshots, a terminal group's are empty. Everything else goes through AReaL's
    tensor gathers."""
    import torch.distributed as dist
    from areal.utils.data import all_gather_tensor_container, tensor_container_to

    world = dist.get_world_size(group)
    if isinstance(data, list):
        shapes: list[Any] = [None] * world
        dist.all_gather_object(shapes, [_kind(d) for d in data], group=group)
        if any(s != shapes[0] for s in shapes):
            device = next((t.device for t in _tensors(data)), torch.device("cpu"))
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, tensor_container_to(data, "cpu"), group=group)
            return [tensor_container_to(x, device) for x in gathered]
        items = [all_gather_ragged(d, group) for d in data]
        return list(zip(*items, strict=True))  # as AReaL: one tuple per rank
    if isinstance(data, dict):
        keys: list[Any] = [None] * world
        dist.all_gather_object(keys, set(data), group=group)
        if any(k != set(data) for k in keys):
            raise RuntimeError(f"Trying to all-gather dicts with mismatched keys: {keys}")
        per_key = {k: all_gather_ragged(v, group) for k, v in data.items()}
        return [{k: v[i] for k, v in per_key.items()} for i in range(world)]
    return all_gather_tensor_container(data, group=group)


def _kind(item: Any) -> Any:
    """What must match across ranks for a list's items to be gathered one by one."""
    if isinstance(item, dict):
        return sorted(map(str, item))
    if isinstance(item, list | tuple):
        return len(item)
    return "tensor" if torch.is_tensor(item) else type(item).__name__


def _tensors(data: Any) -> Any:
    if torch.is_tensor(data):
        yield data
    elif isinstance(data, dict):
        for v in data.values():
            yield from _tensors(v)
    elif isinstance(data, list | tuple):
        for v in data:
            yield from _tensors(v)


def split_apply(fn: Any, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int = 1024) -> Any:
    """Fix 9: AReaL's `_chunked_apply` (`fn` on each slice of `chunk_size` tokens, the results joined), with
    the slices taken by one `split`, whose backward joins their gradients once."""
    if logits.shape[0] == 0:
        raise ValueError("log-probabilities of no tokens")
    results = [fn(lg, lb) for lg, lb in zip(logits.split(chunk_size), labels.split(chunk_size), strict=True)]
    if isinstance(results[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*results, strict=True))
    return torch.cat(results)
