"""Will this config fit? Estimates, from the config, the model's config.json and its image processor, the
GPU memory of one trainer rank, the host memory of one node and the disk under cluster.fileroot, prints
them line by line, and refuses a config that does not fit, naming the field that decides it.

    python train_areal.py --config configs/cua_grpo.yaml --check [--gpu-memory-gib 80] [--host-memory-gib N]

These are estimates, not measurements, on purpose conservative where the workload decides (every token
of a micro-batch may be an image token; screenshots are assumed PNG_BYTES each); the weight sync's share of
the host is checked against rank 0's measured peak (bench/weight_sync_memory.py). What they count:
- GPU, per rank: FSDP-sharded model states (params, grads, Adam m and v in actor.optimizer_dtype), the
  layers being gathered, and one micro-batch of actor.mb_spec.max_tokens_per_mb tokens through the update
  (backward included): decoder-layer inputs kept by gradient checkpointing plus one layer recomputed,
  the logits (with their temperature-scaled copy and gradient), the vision tower on the patches of those
  tokens, and their pixel values. Loading puts the whole model in optimizer_dtype on each GPU first.
- Host, per node: rollouts a rank holds (groups running plus finished ones waiting, PNG screenshots once
  per episode and token tensors per row), one micro-batch's pixel values before they are copied to the
  GPU, the weights rank 0 gathers to write each weight update (every parameter in optimizer_dtype and its
  actor.dtype copy; a LoRA run's adapter alone), and sandboxes (their memory limit).
- Disk: recover checkpoints (the parameters that train, i.e. a LoRA run's adapter, and their Adam state in
  optimizer_dtype: 12 bytes per parameter in fp32, measured on the tiny model at 12.85 with its
  small-tensor overhead) x (checkpoint.keep_last + the one being written), the HF saves the saver never prunes, the weight-update copy, saved screenshots.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cua_agent.config import LORA_DEFAULT_MODULES, CUAGRPOConfig, evaluation_boxes
from cua_agent.episode.families import ModelFamilyError, check_checkpoint
from cua_agent.inference.model_files import ModelNotFoundError, model_dir

GiB = 1024**3
PNG_BYTES = 300_000  # per screenshot; MiniWoB 1280x800 screens measure 30 kB (bench/screenshot_memory.py)
ROW_BYTES_PER_TOKEN = 29  # a row's tensors (rollout/rows.py): ids 8, attention 1, loss 4, logprobs 4,
#                           versions 4, mm_token_type_ids 8
RUNTIME_OVERHEAD = 3 * GiB  # CUDA context, NCCL buffers, allocator slack
RAY_PROBE_TIMEOUT_S = 3.0  # whether a Ray address answers at all
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    vision_depth: int
    vision_hidden: int
    vision_intermediate: int
    patch_values: int  # numbers per vision patch: channels x temporal patch x patch^2
    merge: int  # vision patches per image token: merge^2
    image_tokens: int  # per screenshot at the run's screen size
    # the language model's linear layers by name (q_proj, ...): their in + out features summed over layers,
    # so a rank-r adapter on some of them has r * sum parameters
    lm_linear_io: dict[str, int] = field(default_factory=dict)

    def lora_params(self, config: CUAGRPOConfig) -> int:
        """Parameters of the run's LoRA adapter on the language model (config.lora_target_modules)."""
        names = config.actor.target_modules or LORA_DEFAULT_MODULES
        return config.actor.lora_rank * sum(self.lm_linear_io.get(n, 0) for n in names)


def model_shape(path: str | Path, screen: tuple[int, int]) -> ModelShape:
    """From config.json (parameters counted on the meta device: no weights needed) and the image processor
    (the exact resize of a `screen`-sized image)."""
    import torch
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageTextToText

    where = model_dir(path, files=["config.json", "preprocessor_config.json"])
    cfg = AutoConfig.from_pretrained(where)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())
    lm_linear_io: dict[str, int] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".language_model." in f".{name}":
            key = name.rsplit(".", 1)[-1]
            lm_linear_io[key] = lm_linear_io.get(key, 0) + module.in_features + module.out_features
    text, vision = cfg.get_text_config(), cfg.vision_config
    ip = AutoImageProcessor.from_pretrained(where, use_fast=True)
    t, h, w = (
        int(v) for v in ip(images=[Image.new("RGB", screen)], return_tensors="pt")["image_grid_thw"][0]
    )
    merge = int(ip.merge_size)
    return ModelShape(
        params=params,
        layers=text.num_hidden_layers,
        hidden=text.hidden_size,
        intermediate=text.intermediate_size,
        vocab=text.vocab_size,
        vision_depth=vision.depth,
        vision_hidden=vision.hidden_size,
        vision_intermediate=vision.intermediate_size,
        patch_values=3 * int(ip.temporal_patch_size) * int(ip.patch_size) ** 2,
        merge=merge,
        image_tokens=t * h * w // merge**2,
        lm_linear_io=lm_linear_io,
    )


@dataclass
class Item:
    what: str
    nbytes: float
    field: str  # the config field that moves it ("" for fixed costs)


@dataclass
class Budget:
    name: str
    items: list[Item] = field(default_factory=list)
    capacity: float | None = None  # bytes; None = unknown here
    where: str = ""

    @property
    def total(self) -> float:
        return sum(i.nbytes for i in self.items)

    def add(self, what: str, nbytes: float, field_name: str = "") -> None:
        self.items.append(Item(what, nbytes, field_name))

    def render(self) -> str:
        cap = (
            "capacity unknown" if self.capacity is None else f"of {self.capacity / GiB:.0f} GiB {self.where}"
        )
        lines = [f"{self.name}: {self.total / GiB:.1f} GiB {cap}"]
        lines += [
            f"  {i.nbytes / GiB:8.2f} GiB  {i.what}" + (f"  [{i.field}]" if i.field else "")
            for i in self.items
        ]
        return "\n".join(lines)


@dataclass
class Workload:
    """What the config and the task rows make of a run."""

    dp: int  # trainer ranks (FSDP data-parallel size)
    ranks_per_node: int
    row_tokens: int | None  # longest row: max_prompt_tokens + max_new_tokens (None: no prompt budget)
    turns: int  # most turns an episode can take: min(agent.max_turns, the rows' max_turns)
    steps: int
    box_memory: float  # bytes: the largest sandbox memory limit of the rows
    screen: tuple[int, int]


def workload(config: CUAGRPOConfig, rows: list[dict[str, Any]]) -> Workload:
    from areal.api.alloc_mode import ModelAllocation

    from sandbox.base import SandboxSpec

    dp = ModelAllocation.from_str(config.actor.backend, name="actor").parallel.dp_size
    specs = [SandboxSpec.from_dict(r.get("sandbox")) for r in rows]
    agent = config.agent
    steps = config.total_train_steps or config.total_train_epochs * math.ceil(
        len(rows) / config.train_dataset.batch_size
    )
    return Workload(
        dp=dp,
        ranks_per_node=math.ceil(dp / max(1, config.cluster.n_nodes)),
        row_tokens=None
        if agent.max_prompt_tokens is None
        else agent.max_prompt_tokens + agent.max_new_tokens,
        turns=max(min(agent.max_turns, int(r.get("max_turns") or agent.max_turns)) for r in rows),
        steps=int(steps),
        box_memory=max(s.memory_mb for s in specs) * 2**20,
        screen=max((s.screen for s in specs), key=lambda wh: wh[0] * wh[1]),
    )


def optimizer_bytes(actor: Any) -> tuple[int, str]:
    """Bytes per parameter of the optimizer's state, and what they are: `adam` keeps m and v in the storage
    dtype (actor.optimizer_dtype); `adam_bf16` (AReaL's AnyPrecisionAdamW) keeps m, v and a Kahan
    compensation buffer in bfloat16."""
    if actor.optimizer is not None and actor.optimizer.type == "adam_bf16":
        return 6, "Adam m, v, Kahan compensation in bfloat16"
    store = DTYPE_BYTES[actor.optimizer_dtype]
    return 2 * store, f"Adam m, v in {actor.optimizer_dtype}"


def gpu_budget(config: CUAGRPOConfig, m: ModelShape, w: Workload) -> tuple[Budget, Budget]:
    """(one rank during training, one rank while loading the model)."""
    actor = config.actor
    store, comp = DTYPE_BYTES[actor.optimizer_dtype], DTYPE_BYTES[actor.dtype]
    tokens = actor.mb_spec.max_tokens_per_mb
    patches = tokens * m.merge**2  # upper bound: every token of the micro-batch an image token
    mb = "actor.mb_spec.max_tokens_per_mb"
    b = Budget("GPU memory, one trainer rank, training")
    opt, opt_what = optimizer_bytes(actor)
    if actor.use_lora:  # the base is frozen: its parameters only; the adapter has grads and Adam state
        adapter = m.lora_params(config)
        b.add(
            f"frozen base: {m.params / 1e9:.2f}B params in {actor.optimizer_dtype} / {w.dp} ranks",
            m.params * store / w.dp,
            "actor.backend",
        )
        b.add(
            f"LoRA adapter: {adapter / 1e6:.1f}M params x (param, grad in {actor.optimizer_dtype}; {opt_what})"
            f" / {w.dp} ranks",
            adapter * (2 * store + opt) / w.dp,
            "actor.lora_rank",
        )
    else:
        b.add(
            f"model states: {m.params / 1e9:.2f}B params x (param, grad in {actor.optimizer_dtype}; {opt_what})"
            f" / {w.dp} ranks",
            m.params * (2 * store + opt) / w.dp,
            "actor.backend",
        )
    b.add("layers gathered by FSDP (2 in flight)", 2 * m.params / m.layers * comp)
    layer = tokens * (4 * m.hidden + 3 * m.intermediate) * comp  # attention and MLP activations, one layer
    if actor.gradient_checkpointing:
        b.add(
            f"decoder: {m.layers} checkpointed layer inputs + 1 layer recomputed, {tokens} tokens",
            m.layers * tokens * m.hidden * comp + 2 * layer,
            mb,
        )
    else:
        b.add(f"decoder: activations of {m.layers} layers, {tokens} tokens", m.layers * layer, mb)
    b.add(
        f"logits: {tokens} tokens x {m.vocab} vocab (logits, /temperature copy, gradient)",
        3 * tokens * m.vocab * comp,
        mb,
    )
    v_layer = patches * (4 * m.vision_hidden + 3 * m.vision_intermediate) * comp
    v_acts = (
        m.vision_depth * patches * m.vision_hidden * comp + 2 * v_layer
        if actor.gradient_checkpointing
        else m.vision_depth * v_layer
    )
    b.add(f"vision tower: {patches} patches (all {tokens} tokens image tokens)", v_acts, mb)
    b.add("pixel values of the micro-batch (fp32 + compute copy)", patches * m.patch_values * (4 + comp), mb)
    b.add("CUDA context, NCCL buffers, allocator slack", RUNTIME_OVERHEAD)
    load = Budget("GPU memory, one trainer rank, loading")
    if not actor.fsdp.memory_efficient_load:
        load.add(
            f"the whole model in {actor.optimizer_dtype} before sharding",
            m.params * store,
            "actor.fsdp.memory_efficient_load",
        )
        load.add("CUDA context, NCCL buffers, allocator slack", RUNTIME_OVERHEAD)
    return b, load


def weight_sync_host_bytes(config: CUAGRPOConfig, m: ModelShape) -> float:
    """Rank 0's host memory for one weight sync (AReaL's `_save_model_to_hf`, every step): the weights it
    syncs (every parameter; a LoRA run's adapter alone, train/patches.py fix 7) gathered in optimizer_dtype,
    then cast to actor.dtype (a second copy when they differ) and serialized. Measured against rank 0's
    peak RSS by bench/weight_sync_memory.py."""
    actor = config.actor
    synced = m.lora_params(config) if actor.use_lora else m.params
    gathered = DTYPE_BYTES[actor.optimizer_dtype]
    cast = DTYPE_BYTES[actor.dtype] if actor.dtype != actor.optimizer_dtype else 0
    return synced * (gathered + cast)


def host_budget(config: CUAGRPOConfig, m: ModelShape, w: Workload) -> Budget:
    agent, rollout, actor = config.agent, config.rollout, config.actor
    row_tokens = w.row_tokens or actor.mb_spec.max_tokens_per_mb
    group = agent.group_size * (w.turns * row_tokens * ROW_BYTES_PER_TOKEN + (w.turns + 1) * PNG_BYTES)
    running = math.ceil(rollout.max_concurrent_rollouts / w.dp)
    waiting = (rollout.max_head_offpolicyness + 1) * math.ceil(config.train_dataset.batch_size / w.dp)
    n = w.ranks_per_node
    b = Budget(f"Host memory, one node ({n} trainer rank(s))")
    b.add(
        f"rollouts: {n} x ({running} groups running + {waiting} finished waiting) x {group / 1e6:.0f} MB "
        f"({agent.group_size} episodes x {w.turns} turns)",
        n * (running + waiting) * group,
        "rollout.max_concurrent_rollouts",
    )
    patches = actor.mb_spec.max_tokens_per_mb * m.merge**2
    b.add(
        f"pixel values of a micro-batch before the GPU copy, x {n}",
        n * patches * m.patch_values * 4,
        "actor.mb_spec.max_tokens_per_mb",
    )
    b.add(
        f"weight update: {'the adapter' if actor.use_lora else 'every parameter'} gathered to rank 0 in "
        f"{actor.optimizer_dtype}"
        + (f", its {actor.dtype} copy" if actor.dtype != actor.optimizer_dtype else "")
        + ", written as the HF copy",
        weight_sync_host_bytes(config, m),
        "actor.lora_rank" if actor.use_lora else "actor.optimizer_dtype",
    )
    if actor.fsdp.memory_efficient_load:
        b.add(
            f"loading: the whole model in {actor.optimizer_dtype} on each rank (VLMs)",
            n * m.params * DTYPE_BYTES[actor.optimizer_dtype],
            "actor.fsdp.memory_efficient_load",
        )
    if config.sandbox.backend == "docker" or config.sandbox.backend == "local":
        boxes = n * config.sandbox.max_concurrency
        b.add(f"sandboxes: {boxes} x their memory limit", boxes * w.box_memory, "sandbox.max_concurrency")
    return b


def disk_budget(config: CUAGRPOConfig, m: ModelShape, w: Workload) -> Budget:
    actor, saver = config.actor, config.saver
    store, comp = DTYPE_BYTES[actor.optimizer_dtype], DTYPE_BYTES[actor.dtype]
    b = Budget(f"Disk under cluster.fileroot ({config.cluster.fileroot})")
    keep = config.checkpoint.keep_last + 1
    trained = m.lora_params(config) if actor.use_lora else m.params  # recover checkpoints skip a frozen base
    if config.recover.mode not in ("disabled", "off"):
        opt, opt_what = optimizer_bytes(actor)
        one = trained * (store + opt)
        b.add(
            f"recover checkpoints: {keep} x {one / GiB:.2f} GiB ({'the adapter' if actor.use_lora else 'params'} "
            f"in {actor.optimizer_dtype}, {opt_what}; keep_last + the one being written)",
            keep * one,
            "checkpoint.keep_last",
        )
    saves = (w.steps // saver.freq_steps if saver.freq_steps else 0) + (
        config.total_train_epochs // saver.freq_epochs if saver.freq_epochs else 0
    )
    saved = trained  # a LoRA run's HF saves are the adapter
    b.add(
        f"HF saves, never pruned: {saves} over {w.steps} steps x {saved * comp / GiB:.2f} GiB",
        saves * saved * comp,
        "saver.freq_steps",
    )
    if actor.use_lora:
        keep = config.rollout.max_head_offpolicyness + 2
        b.add(f"weight update copies: the {keep} adapters the servers keep", keep * saved * comp)
    else:
        b.add("weight update copy (rewritten at each update)", m.params * comp)
    if config.agent.save_screenshots:
        episodes = w.steps * config.train_dataset.batch_size * config.agent.group_size
        budget = config.agent.screenshots_budget_mb * 2**20
        shots = episodes * (w.turns + 1) * PNG_BYTES
        b.add(
            f"saved screenshots: {episodes} episodes x {w.turns + 1}"
            + (
                f", pruned at {config.agent.screenshots_budget_mb:g} MiB" if budget and shots > budget else ""
            ),
            min(shots, budget) if budget else shots,
            "agent.screenshots_budget_mb" if budget else "agent.save_screenshots",
        )
    return b


def host_memory() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_disk(path: str | Path) -> float:
    p = Path(path).resolve()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def gpu_memory() -> float | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory
    except Exception:  # no usable CUDA here: capacity unknown
        pass
    return None


def check(
    config: CUAGRPOConfig,
    rows: list[dict[str, Any]],
    shape: ModelShape | None = None,
    *,
    gpu_bytes: float | None,
    host_bytes: float | None,
    disk_bytes: float | None,
    ray_nodes: list[dict[str, Any]] | None = None,
    ray_unchecked: str = "no Ray cluster was asked",
) -> tuple[list[Budget], list[str], list[str]]:
    """(budgets, problems that refuse the config, notes). Each problem starts with its field. `ray_nodes`:
    the Ray cluster's `ray.nodes()` for `sandbox.backend: ray`, or None and why (`ray_unchecked`)."""
    w = workload(config, rows)
    m = shape or model_shape(config.actor.path, w.screen)
    train, load = gpu_budget(config, m, w)
    host, disk = host_budget(config, m, w), disk_budget(config, m, w)
    train.capacity = load.capacity = gpu_bytes
    host.capacity, disk.capacity = host_bytes, disk_bytes
    train.where = load.where = "per GPU"
    host.where, disk.where = "on this machine", "free"
    problems: list[str] = []
    notes: list[str] = []
    if shape is None:  # the model's own files: its architecture must be the agent's model family's
        try:
            check_checkpoint(config.agent.model_family, model_dir(config.actor.path, files=["config.json"]))
        except ModelFamilyError as exc:
            problems.append(str(exc))
    mb = config.actor.mb_spec.max_tokens_per_mb
    if w.row_tokens is not None and w.row_tokens > mb:
        problems.append(
            f"actor.mb_spec.max_tokens_per_mb: {mb} is below the longest row, {w.row_tokens} tokens "
            f"(agent.max_prompt_tokens + agent.max_new_tokens): a row must fit one micro-batch"
        )
    if gpu_bytes is not None:
        fixed = sum(i.nbytes for i in train.items if i.field != "actor.mb_spec.max_tokens_per_mb")
        if fixed > gpu_bytes:
            problems.append(
                f"actor.backend: model states alone need {fixed / GiB:.0f} GiB per GPU of {gpu_bytes / GiB:.0f}:"
                f" shard over more ranks"
            )
        elif train.total > gpu_bytes:
            per_token = (train.total - fixed) / mb
            fits = int((gpu_bytes - fixed) / per_token) // 1024 * 1024
            problems.append(
                f"actor.mb_spec.max_tokens_per_mb: {mb} tokens need {train.total / GiB:.0f} GiB per GPU of "
                f"{gpu_bytes / GiB:.0f}; about {fits} fit"
            )
        if load.total > gpu_bytes:
            problems.append(
                f"actor.fsdp.memory_efficient_load: loading puts {load.total / GiB:.0f} GiB on each GPU of "
                f"{gpu_bytes / GiB:.0f}: set it true"
            )
    else:
        notes.append("GPU capacity unknown here (no CUDA device): pass --gpu-memory-gib to check against it")
    for budget in (host, disk):
        if budget.capacity is not None and budget.total > budget.capacity:
            worst = max(budget.items, key=lambda i: i.nbytes if i.field else 0)
            problems.append(
                f"{worst.field}: {budget.name} needs {budget.total / GiB:.0f} GiB, {budget.capacity / GiB:.0f} "
                f"GiB {budget.where}; the largest share is {worst.what} ({worst.nbytes / GiB:.0f} GiB)"
            )
    gbox_rows = any((r.get("sandbox") or {}).get("backend") == "gbox" for r in rows)
    if (config.sandbox.backend == "gbox" or gbox_rows) and not gbox_key_set():
        problems.append(
            (
                "sandbox.backend: gbox needs"
                if config.sandbox.backend == "gbox"
                else "tasks.train_path: rows on gbox need"
            )
            + " GBOX_API_KEY (in the environment or .env; env.example lists it)"
        )
    if config.sandbox.backend == "ray":
        problem, note = sandbox_slots(config, rows, ray_nodes, ray_unchecked)
        problems += [problem] if problem else []
        notes += [note] if note else []
    boxes_needed = math.ceil(config.rollout.max_concurrent_rollouts / w.dp) * config.agent.group_size
    if config.sandbox.max_concurrency < boxes_needed:
        notes.append(
            f"sandbox.max_concurrency={config.sandbox.max_concurrency} per rank is below the episodes a rank runs "
            f"at once ({boxes_needed} = rollout.max_concurrent_rollouts / {w.dp} ranks x agent.group_size): "
            f"episodes will wait for boxes"
        )
    if config.agent.max_turns > w.turns:
        notes.append(
            f"agent.max_turns={config.agent.max_turns} has no effect beyond {w.turns}: the task rows cap turns"
        )
    return [train, load, host, disk], problems, notes


def sandbox_slots(
    config: CUAGRPOConfig, rows: list[dict[str, Any]], nodes: list[dict[str, Any]] | None, unchecked: str
) -> tuple[str | None, str | None]:
    """(problem, note) of `sandbox.backend: ray`: the slots of the cluster's live machines against the boxes
    the run holds at once, by the launcher's rule (sandbox/backends/ray_hosts.py)."""
    from areal.api.alloc_mode import ModelAllocation

    from sandbox.backends.ray_hosts import SLOT, slot_shortage, slots_needed

    if nodes is None:
        return None, f"sandbox.backend=ray: the Ray cluster's {SLOT} were not checked: {unchecked}"
    trainers = ModelAllocation.from_str(config.actor.backend, name="actor").parallel.world_size
    shape = (trainers, config.sandbox.max_concurrency, rows, evaluation_boxes(config))
    problem = slot_shortage(nodes, *shape)
    if problem:
        return problem, None
    slots = sum(n["Resources"].get(SLOT, 0) for n in nodes if n.get("Alive"))
    need = slots_needed(*shape)[0]
    return (
        None,
        f"sandbox.backend=ray: the Ray cluster's live nodes offer {slots:g} {SLOT}; the run holds {need} at most",
    )


def ray_cluster_nodes(address: str) -> tuple[list[dict[str, Any]] | None, str]:
    """`ray.nodes()` of the cluster at `address` ("auto": the one this machine is in), or None and why not.
    An address that does not answer is told in seconds (ray.init would retry for minutes)."""
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=RAY_PROBE_TIMEOUT_S).close()
        except (OSError, ValueError) as exc:
            return None, f"nothing answers at {address} ({exc})"
    import ray

    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError) as exc:  # "auto" with no cluster on this machine: ConnectionError
        return None, f"no Ray cluster at {address} ({str(exc).splitlines()[0][:200]})"
    try:
        return ray.nodes(), ""
    finally:
        ray.shutdown()


def gbox_key_set() -> bool:
    from cua_agent.settings import Settings

    key = Settings().gbox_api_key
    return key is not None and bool(key.get_secret_value())


def main(config: CUAGRPOConfig, argv: list[str]) -> int:
    """`train_areal.py --check`: print the budgets; exit status 1 when the config does not fit."""
    from cua_agent.rollout.task_rows import training_rows

    ap = argparse.ArgumentParser(prog="train_areal.py --check")
    ap.add_argument("--gpu-memory-gib", type=float, default=None, help="default: this machine's GPU 0")
    ap.add_argument("--host-memory-gib", type=float, default=None, help="default: this machine's MemTotal")
    args = ap.parse_args(argv)
    gpu = args.gpu_memory_gib * GiB if args.gpu_memory_gib else gpu_memory()
    host = args.host_memory_gib * GiB if args.host_memory_gib else host_memory()
    rows = training_rows(config.tasks)
    nodes, unchecked = None, ""
    if config.sandbox.backend == "ray":
        address = config.sandbox.ray_address or os.environ.get("RAY_ADDRESS") or "auto"
        nodes, unchecked = ray_cluster_nodes(address)
    try:
        budgets, problems, notes = check(
            config,
            rows,
            gpu_bytes=gpu,
            host_bytes=host,
            disk_bytes=free_disk(config.cluster.fileroot),
            ray_nodes=nodes,
            ray_unchecked=unchecked,
        )
    except ModelNotFoundError as exc:
        print(f"actor.path: {exc} (the check needs only its config.json and preprocessor_config.json)")
        return 2
    for b in budgets:
        if b.items:
            print(b.render())
    for n in notes:
        print(f"note: {n}")
    if problems:
        print("the config does not fit:\n" + "\n".join(f"  - {p}" for p in problems))
        return 1
    print("the config fits")
    return 0
