"""Experiment configuration: AReaL's `GRPOConfig` plus the sections of the computer-use agent.

Loaded with `areal.api.cli_args.load_expr_config(argv, CUAGRPOConfig)` from YAML + `key=value` overrides.
Validation runs when OmegaConf instantiates the dataclasses, so a bad value fails at load time with the
name of the field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from areal.api.cli_args import GRPOConfig

from cua_agent.episode.families import DEFAULT_FAMILY, FAMILIES
from sandbox.backends import BACKENDS
from sandbox.backends.docker import check_docker_hosts

PARSE_FAILURE_MODES = ("noop", "end")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {message}")


@dataclass
class InferenceConfig:
    """Where the policy is served: stock vLLM servers reached over HTTP."""

    # "host:port" of each vLLM server; empty = env AREAL_LLM_SERVER_ADDRS, or a local server (launch_local).
    addresses: list[str] = field(default_factory=list)
    # Start a vLLM CPU server on actor.path for the run (stopped at the end, also on error/Ctrl-C).
    launch_local: bool = False
    # None = read tie_word_embeddings from each weight-sync checkpoint.
    tied_embeddings: bool | None = None
    # How long generation waits for a server that stopped answering (restart, crash) before its episodes
    # fail; a server that comes back without our weights gets them pushed again first.
    recovery_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for i, addr in enumerate(self.addresses):
            host, _, port = str(addr).rpartition(":")
            _check(
                bool(host) and port.isdigit(),
                f"inference.addresses[{i}]",
                f"expected host:port, got {addr!r}",
            )
        _check(
            self.recovery_timeout_s > 0,
            "inference.recovery_timeout_s",
            f"must be > 0, got {self.recovery_timeout_s}",
        )
        _check(
            not (self.launch_local and self.addresses),
            "inference.launch_local",
            "set either inference.addresses or inference.launch_local, not both",
        )


@dataclass
class AgentConfig:
    """The episode loop and how its turns become training rows."""

    group_size: int = 4  # episodes per task (GRPO group)
    min_group_size: int = 2  # fewer surviving episodes -> the group is rejected
    # This many groups rejected in a row (every episode lost to infrastructure: a dead server or sandbox
    # engine) aborts the run with the errors, instead of drawing rows forever.
    max_rejected_in_a_row: int = 16
    # A group whose episodes all got the same reward has advantage 0 everywhere: skip it (counted as
    # cua/groups_filtered) and draw another row, so every step trains on groups that carry a signal.
    filter_equal_reward_groups: bool = True
    # After this many filtered in a row the next equal-reward group is trained on (with a warning), so a
    # policy that fails or solves every episode alike cannot stall a step.
    max_filtered_in_a_row: int = 16
    max_turns: int = 6
    history_screenshots: int = 2  # last K screenshots in the prompt
    # How the agent talks to the model (episode/families.py): the prompt and tool format it was trained
    # with and its coordinates. Must match the checkpoint's config.json (checked when the model loads).
    model_family: str = DEFAULT_FAMILY
    max_new_tokens: int = 128
    temperature: float = 1.0
    on_parse_failure: str = "noop"  # "noop": keep going, "end": end the episode
    # Reward design (rollout/rewards.py): the format term spans +-format_reward (share of valid turns);
    # declaring done on an unsolved task costs quit_penalty. 0 < quit_penalty < 2 * format_reward ranks
    # solve > attempt > quit > malformed output.
    format_reward: float = 0.1
    quit_penalty: float = 0.1
    turn_discount: float = 1.0
    # Advantage = reward - group mean, divided by the group's std when true (GRPO). False keeps the
    # reward's scale (Dr. GRPO): a group told apart only by the format term then moves the policy a
    # tenth as much as one told apart by success, instead of as much.
    advantage_std_norm: bool = True
    turn_timeout_s: float = 180.0
    episode_timeout_s: float = 900.0
    max_prompt_tokens: int = 6000
    # Terminal agent (rows of repository tasks, cua_agent/terminal): a command running longer is killed
    # (the episode goes on, the model reads that it timed out); a tool's output is cut to this many
    # characters in the prompt.
    command_timeout_s: float = 30.0
    observation_chars: int = 2000
    rollouts_file: str = "rollouts.jsonl"
    # the screenshot the model saw at each turn, for the viewer; past the budget the oldest episodes'
    # screenshots are removed first (0: no limit)
    save_screenshots: bool = False
    screenshots_budget_mb: float = 1000.0

    def __post_init__(self) -> None:
        _check(self.group_size >= 1, "agent.group_size", f"must be >= 1, got {self.group_size}")
        _check(
            self.screenshots_budget_mb >= 0,
            "agent.screenshots_budget_mb",
            f"must be >= 0 (0: no limit), got {self.screenshots_budget_mb}",
        )
        _check(
            self.max_rejected_in_a_row >= 1,
            "agent.max_rejected_in_a_row",
            f"must be >= 1, got {self.max_rejected_in_a_row}",
        )
        _check(
            self.max_filtered_in_a_row >= 0,
            "agent.max_filtered_in_a_row",
            f"must be >= 0, got {self.max_filtered_in_a_row}",
        )
        _check(
            1 <= self.min_group_size <= self.group_size,
            "agent.min_group_size",
            f"must be in [1, agent.group_size={self.group_size}], got {self.min_group_size}",
        )
        _check(self.max_turns >= 1, "agent.max_turns", f"must be >= 1, got {self.max_turns}")
        _check(
            self.history_screenshots >= 1,
            "agent.history_screenshots",
            f"must be >= 1 (the current screenshot), got {self.history_screenshots}",
        )
        _check(
            self.model_family in FAMILIES,
            "agent.model_family",
            f"must be one of {list(FAMILIES)}, got {self.model_family!r}",
        )
        _check(self.max_new_tokens >= 1, "agent.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        _check(self.temperature >= 0, "agent.temperature", f"must be >= 0, got {self.temperature}")
        _check(
            self.on_parse_failure in PARSE_FAILURE_MODES,
            "agent.on_parse_failure",
            f"must be one of {PARSE_FAILURE_MODES}, got {self.on_parse_failure!r}",
        )
        _check(self.format_reward >= 0, "agent.format_reward", f"must be >= 0, got {self.format_reward}")
        _check(
            self.quit_penalty == 0 or 0 < self.quit_penalty < 2 * self.format_reward,
            "agent.quit_penalty",
            f"must be 0 or in (0, 2 * agent.format_reward = {2 * self.format_reward}): a larger one ranks "
            f"quitting below malformed output, got {self.quit_penalty}",
        )
        _check(
            0 < self.turn_discount <= 1, "agent.turn_discount", f"must be in (0, 1], got {self.turn_discount}"
        )
        _check(self.turn_timeout_s > 0, "agent.turn_timeout_s", f"must be > 0, got {self.turn_timeout_s}")
        _check(
            self.episode_timeout_s >= self.turn_timeout_s,
            "agent.episode_timeout_s",
            f"must be >= agent.turn_timeout_s={self.turn_timeout_s}, got {self.episode_timeout_s}",
        )
        _check(
            self.max_prompt_tokens > 0,
            "agent.max_prompt_tokens",
            f"must be > 0, got {self.max_prompt_tokens}",
        )
        _check(
            self.command_timeout_s > 0,
            "agent.command_timeout_s",
            f"must be > 0, got {self.command_timeout_s}",
        )
        _check(
            self.observation_chars >= 100,
            "agent.observation_chars",
            f"must be >= 100, got {self.observation_chars}",
        )
        _check(bool(self.rollouts_file), "agent.rollouts_file", "must not be empty")


@dataclass
class SandboxConfig:
    # "docker" (Docker or podman through docker-py) | "local" (host processes) | "gbox" (GBox cloud desktops:
    # GBOX_API_KEY, and GBOX_CLIENT_BASE_URL for another endpoint, from the environment or .env)
    backend: str = "docker"
    image: str = "cua-sandbox:latest"
    max_concurrency: int = 4
    warm: int = 0  # sandboxes kept started ahead of demand
    acquire_timeout_s: float = 300.0
    # Docker endpoints to spread boxes over (least-loaded first; one that fails is skipped with backoff),
    # e.g. ["unix:///run/cua/podman.sock", "unix:///run/cua/podman2.sock"]; empty = DOCKER_HOST or the
    # podman default. Engines on this machine (unix:// or loopback tcp://): box control is a unix socket.
    docker_hosts: list[str] = field(default_factory=list)
    # gbox: a box's lifetime on GBox (its backstop if every process that could reap it is gone), and a
    # shell command run in each new box before the task harness starts (e.g. installing what the box's
    # image lacks: chromium, chromium-driver, xdotool, requirements/sandbox.txt).
    gbox_expires_in_s: float = 3600.0
    gbox_setup_command: str = ""
    # ray: the Ray cluster whose machines offer sandbox slots (sandbox/backends/ray_hosts.py); "" = the
    # cluster a trainer under the Ray launcher is in, else RAY_ADDRESS or this machine's
    ray_address: str = ""

    def __post_init__(self) -> None:
        _check(
            self.backend in BACKENDS,
            "sandbox.backend",
            f"must be one of {BACKENDS}, got {self.backend!r}",
        )
        _check(bool(self.image), "sandbox.image", "must not be empty")
        _check(
            self.max_concurrency >= 1, "sandbox.max_concurrency", f"must be >= 1, got {self.max_concurrency}"
        )
        _check(
            0 <= self.warm <= self.max_concurrency,
            "sandbox.warm",
            f"must be in [0, sandbox.max_concurrency={self.max_concurrency}], got {self.warm}",
        )
        _check(
            self.acquire_timeout_s > 0,
            "sandbox.acquire_timeout_s",
            f"must be > 0, got {self.acquire_timeout_s}",
        )
        try:
            check_docker_hosts(list(self.docker_hosts), "sandbox.docker_hosts")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check(
            self.gbox_expires_in_s >= 60,
            "sandbox.gbox_expires_in_s",
            f"must be >= 60 (a box that expires mid-episode is lost), got {self.gbox_expires_in_s}",
        )
        _check(
            not self.docker_hosts or self.backend == "docker",
            "sandbox.docker_hosts",
            f"only for sandbox.backend=docker, not {self.backend!r}",
        )


@dataclass
class TasksConfig:
    # A task file of either family: desktop/web tasks (the GUI agent) or repository tasks (the terminal
    # agent, sandbox/repo/tasks.py); each row is played by its family's agent.
    train_path: str = "tasks/miniwob.jsonl"
    extra_train_paths: list[str] = field(default_factory=list)  # more task files, mixed into the rows
    valid_path: str | None = None
    train_split: str = "train"
    task_ids: list[str] = field(default_factory=list)  # empty = all tasks of the split

    def __post_init__(self) -> None:
        _check(bool(self.train_path), "tasks.train_path", "must not be empty")


@dataclass
class EvaluationConfig:
    """Held-out evaluation during training (cua_agent/evaluate): the policy as served after the step's weight
    update plays each held-out row once; AReaL's `evaluator` section says when (freq_steps, freq_epochs).
    Logged as eval/<scope>/<metric> and in steps.jsonl; reports under <fileroot>/eval/step<N>/."""

    enabled: bool = False
    split: str = "test"  # rows of tasks.valid_path (else tasks.train_path) of this split
    task_ids: list[str] = field(default_factory=list)  # empty = tasks.task_ids
    seeds_per_task: int = 4
    episodes_per_seed: int = 1  # plays of each seed (a sampled policy's rate on a narrow seed set)
    temperature: float = 0.0  # greedy: the policy's best guess
    concurrency: int = 4  # episodes (sandboxes) at once, beside the training rollouts
    retries: int = 2  # plays again of an episode lost to infrastructure

    def __post_init__(self) -> None:
        _check(
            self.seeds_per_task >= 1, "evaluation.seeds_per_task", f"must be >= 1, got {self.seeds_per_task}"
        )
        _check(
            self.episodes_per_seed >= 1,
            "evaluation.episodes_per_seed",
            f"must be >= 1, got {self.episodes_per_seed}",
        )
        _check(self.concurrency >= 1, "evaluation.concurrency", f"must be >= 1, got {self.concurrency}")
        _check(self.retries >= 0, "evaluation.retries", f"must be >= 0, got {self.retries}")
        _check(self.temperature >= 0, "evaluation.temperature", f"must be >= 0, got {self.temperature}")


def evaluation_boxes(config: Any) -> int:
    """The episodes (boxes) rank 0's held-out evaluation plays at once, 0 when it is off: of a CUAGRPOConfig,
    or of the raw YAML the Ray launcher reads (a DictConfig, defaults where it leaves a field out)."""
    ev = config.get("evaluation", {}) if hasattr(config, "get") else config.evaluation
    get = ev.get if hasattr(ev, "get") else lambda name, default: getattr(ev, name, default)
    if not get("enabled", EvaluationConfig.enabled):
        return 0
    return int(get("concurrency", EvaluationConfig.concurrency))


@dataclass
class CheckpointConfig:
    """Our recover checkpoints (AReaL's `recover` section sets when they are written: mode, freq_*).

    Each is written to a staging directory and renamed into place once complete, so a kill during a save
    never leaves a checkpoint that half-loads. Resuming restores model, optimizer, LR scheduler, RNG, data
    position (episodes in flight at the save are replayed first), counters, stats logger, and the weights
    on the inference servers (cua_agent/train/checkpointing.py)."""

    keep_last: int = 3  # newest committed checkpoints kept; older ones are deleted
    # None: resume if recover.mode is on/auto and the trial has a checkpoint; "latest": must resume from the
    # trial's newest (train_areal.py --resume); a path: that checkpoint (--resume_from_checkpoint PATH).
    resume_from: str | None = None
    save_on_stop: bool = True  # SIGINT/SIGTERM: checkpoint the last finished step if it has none yet
    stop_timeout_s: float = 60.0  # bound on abandoning in-flight episodes when stopping

    def __post_init__(self) -> None:
        _check(self.keep_last >= 1, "checkpoint.keep_last", f"must be >= 1, got {self.keep_last}")
        _check(
            self.resume_from is None or bool(str(self.resume_from).strip()),
            "checkpoint.resume_from",
            "must be null, 'latest' or a checkpoint directory",
        )
        _check(
            self.stop_timeout_s > 0, "checkpoint.stop_timeout_s", f"must be > 0, got {self.stop_timeout_s}"
        )


# The language model's projections in Qwen2.5-VL and Qwen3-VL: LoRA's default targets (actor.target_modules: []).
LORA_DEFAULT_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoraConfig:
    """LoRA beyond AReaL's own fields (actor.use_lora, actor.lora_rank, actor.lora_alpha, actor.target_modules:
    module names, [] = the language model's projections). The adapter is synced to the servers alone
    (cua_agent/inference/adapter_sync.py)."""

    # false: the modules named in actor.target_modules get adapters in the language model only (vLLM serves
    # language-model adapters); true: wherever those names occur, the vision tower included.
    vision_tower: bool = False


def lora_target_regex(names: Sequence[str] = LORA_DEFAULT_MODULES, vision_tower: bool = False) -> str:
    """The regular expression (PEFT matches it against full module names) of the modules named `names`, in
    the language model only unless `vision_tower`."""
    scope = r"(?:.*\.)?" if vision_tower else r"(?:.*\.)?language_model\.(?:.*\.)?"
    return f"{scope}(?:{'|'.join(map(re.escape, names))})"


def lora_target_modules(config: CUAGRPOConfig) -> str:
    """The run's LoRA targets (actor.target_modules, [] = LORA_DEFAULT_MODULES; lora.vision_tower)."""
    return lora_target_regex(config.actor.target_modules or LORA_DEFAULT_MODULES, config.lora.vision_tower)


@dataclass
class LrGroup:
    """Parameters whose full name matches `match` (a regular expression, searched, e.g. `self_attn\\.`) train
    at `scale` times actor.optimizer.lr (warmup and schedule alike); 0 keeps them as they are. A parameter
    belongs to the first group it matches; the rest train at actor.optimizer.lr."""

    match: str = ""
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(bool(self.match), "lr_groups.match", "must be a regular expression over parameter names")
        try:
            re.compile(self.match)
        except re.error as e:
            raise ConfigError(f"lr_groups.match: {self.match!r} is not a regular expression ({e})") from None
        _check(self.scale >= 0, "lr_groups.scale", f"must be >= 0, got {self.scale} (for {self.match!r})")


@dataclass
class CUAGRPOConfig(GRPOConfig):
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    # Per-parameter learning rates (cua_agent/train/lr_groups.py); [] = one lr for every parameter.
    lr_groups: list[LrGroup] = field(default_factory=list)
    # Import path of the RolloutWorkflow class; constructed as cls(config=config).
    workflow: str = "cua_agent.rollout.workflow.CUAWorkflow"

    def __post_init__(self) -> None:
        super().__post_init__()
        validate(self)


def validate(config: CUAGRPOConfig) -> None:
    """Cross-section rules: what our engine and workflow need from AReaL's own sections."""
    _check(
        config.actor.weight_update_mode == "disk",
        "actor.weight_update_mode",
        f"must be 'disk' (a stock vLLM server reloads weights from disk), got "
        f"{config.actor.weight_update_mode!r}",
    )
    _check(
        config.gconfig.n_samples == 1,
        "gconfig.n_samples",
        f"must be 1: the workflow runs agent.group_size episodes per task itself, got {config.gconfig.n_samples}",
    )
    _check(
        config.actor.reward_norm is None,
        "actor.reward_norm",
        "must be null: rewards are normalised per group in the workflow (AReaL's group normaliser assumes "
        "a fixed number of rows per group, episodes have a variable number of turns)",
    )
    adv_norm = config.actor.adv_norm
    _check(
        adv_norm is None or adv_norm.mean_level == "none",
        "actor.adv_norm",
        "must be null or have mean_level: none: advantages are normalised per group in the workflow, and "
        "re-centring them over the batch's tokens gives a group of equal rewards a non-zero advantage",
    )
    _check(
        not config.actor.use_decoupled_loss or config.actor.rejection_sampling is not None,
        "actor.rejection_sampling",
        "must be set with actor.use_decoupled_loss: without it AReaL applies no behaviour importance weight "
        "(pi_proximal / pi_behaviour), so rollouts of older weight versions are trained on uncorrected",
    )
    # A stock vLLM server returns the logprobs of the raw distribution, before temperature; AReaL's
    # trainer divides the logits by actor.temperature. Only at 1 are both the distribution the tokens
    # were sampled from. (Held-out evaluation needs no logprobs: evaluation.temperature is free.)
    for name, value in (
        ("agent.temperature", config.agent.temperature),
        ("actor.temperature", config.actor.temperature),
    ):
        _check(
            value == 1.0,
            name,
            f"must be 1.0 for training, got {value}: the server's logprobs are those of the model's raw "
            "distribution (before temperature), so the behaviour logprobs of tokens sampled at another "
            "temperature would be wrong",
        )
    _check(
        not config.rollout.check_trajectory_format,
        "rollout.check_trajectory_format",
        "must be false: AReaL's check wants decoded pixel_values in each row, and rows here carry their "
        "screenshots as PNG bytes (decoded per micro-batch in the trainer, cua_agent/rollout/rows.py)",
    )
    _check(
        ":" in config.rollout.backend and config.rollout.backend.split(":")[0] == "vllm",
        "rollout.backend",
        f"must be 'vllm:d<N>...' (the engine talks to vLLM servers), got {config.rollout.backend!r}",
    )
    _check(
        config.actor.backend.startswith("fsdp:"),
        "actor.backend",
        f"must be 'fsdp:d<N>' (FSDP is the trainer this stack runs), got {config.actor.backend!r}",
    )
    _check(bool(config.workflow), "workflow", "must be an import path like 'pkg.module.Class'")
    _check(
        "." in config.workflow,
        "workflow",
        f"must be an import path like 'pkg.module.Class', got {config.workflow!r}",
    )
    if config.actor.use_lora:
        _check(config.actor.lora_rank >= 1, "actor.lora_rank", f"must be >= 1, got {config.actor.lora_rank}")
        _check(config.actor.lora_alpha > 0, "actor.lora_alpha", f"must be > 0, got {config.actor.lora_alpha}")
        _check(
            config.actor.peft_type == "lora",
            "actor.peft_type",
            f"must be 'lora', got {config.actor.peft_type!r}",
        )
        _check(
            all(
                isinstance(m, str) and re.fullmatch(r"[A-Za-z0-9_.]+", m) for m in config.actor.target_modules
            ),
            "actor.target_modules",
            f"must be module names like q_proj ([] = {list(LORA_DEFAULT_MODULES)}), got "
            f"{list(config.actor.target_modules)}",
        )
    _check(
        not (config.checkpoint.resume_from and config.recover.mode in ("disabled", "off")),
        "checkpoint.resume_from",
        f"resuming needs recover.mode on or auto (checkpoints), got recover.mode={config.recover.mode!r}",
    )
    if config.inference.launch_local:
        _check(bool(config.actor.path), "actor.path", "inference.launch_local serves actor.path: set it")
