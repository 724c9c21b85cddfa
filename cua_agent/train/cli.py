"""The training command line, as `train_areal.py` and the launchers around it read it:

train_areal.py --config CONFIG [--resume | --resume_from_checkpoint PATH] [--check [--gpu-memory-gib N]
               [--host-memory-gib N]] [key=value ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from cua_agent.config import CUAGRPOConfig

CHECK_FLAGS = ("--gpu-memory-gib", "--host-memory-gib")
STOP_TIMEOUT = "checkpoint.stop_timeout_s"

# What a launcher (torchrun, Ray) waits for its trainers beyond their own deadline (checkpoint.stop_timeout_s)
# before it kills them: their exit after the stop (sandboxes removed, process group torn down).
LAUNCHER_MARGIN_S = 60


def resume_overrides(argv: list[str]) -> list[str]:
    """`--resume` / `--resume_from_checkpoint PATH` (or `=PATH`) → the checkpoint.resume_from override."""
    out: list[str] = []
    resume: str | None = None
    args = iter(argv)
    for arg in args:
        if arg == "--resume":
            resume = "latest"
        elif arg == "--resume_from_checkpoint":
            resume = next(args, None)
            if not resume or resume.startswith("-"):
                raise SystemExit("--resume_from_checkpoint needs a checkpoint directory")
        elif arg.startswith("--resume_from_checkpoint="):
            resume = arg.split("=", 1)[1]
        else:
            out.append(arg)
    if resume is not None:
        out.append(f"checkpoint.resume_from={resume}")
    return out


def split_check(argv: list[str]) -> tuple[list[str] | None, list[str]]:
    """(the preflight's own arguments, or None without --check; the rest)."""
    check: list[str] | None = None
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--check":
            check = check or []
        elif arg.split("=", 1)[0] in CHECK_FLAGS:
            check = (check or []) + ([arg] if "=" in arg else [arg, next(args, "")])
        else:
            rest.append(arg)
    return check, rest


def config_args(argv: list[str]) -> list[str]:
    """The arguments AReaL's config loader takes: the training command line without our own flags."""
    return resume_overrides(split_check(argv)[1])


def read_config(argv: list[str]) -> CUAGRPOConfig:
    """The config a training command line describes, read without side effects (AReaL's
    `load_expr_config` also writes it to the log folder): for launchers that only need to look at it."""
    from areal.api.cli_args import parse_cli_args, to_structured_cfg  # torch, AReaL: ~4 s of CPU

    from cua_agent.config import CUAGRPOConfig

    cfg, _ = parse_cli_args(config_args(argv))
    config = OmegaConf.to_object(to_structured_cfg(cfg, config_cls=CUAGRPOConfig))
    assert isinstance(config, CUAGRPOConfig)
    return config


def stop_timeout_s(argv: list[str]) -> float:
    """checkpoint.stop_timeout_s of a training command line. Where the config file or an override sets it
    as a number, read with OmegaConf alone: torchrun's launcher needs nothing else before it starts the
    ranks, and AReaL's loader (torch, AReaL: ~4 s of CPU) would delay every start. Else the whole config
    (its default)."""
    args = config_args(argv)
    found = None
    if "--config" in args[:-1]:
        found = OmegaConf.select(OmegaConf.load(args[args.index("--config") + 1]), STOP_TIMEOUT)
    for arg in args:
        key, _, value = arg.lstrip("+").partition("=")
        if key == STOP_TIMEOUT:
            found = value
    try:
        return float(found)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float(read_config(argv).checkpoint.stop_timeout_s)
