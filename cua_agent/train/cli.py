"""The training command line, as `train_areal.py` and the launchers around it read it:

train_areal.py --config CONFIG [--resume | --resume_from_checkpoint PATH] [--check [--gpu-memory-gib N]
               [--host-memory-gib N]] [key=value ...]
"""

from __future__ import annotations

from areal.api.cli_args import parse_cli_args, to_structured_cfg
from omegaconf import OmegaConf

from cua_agent.config import CUAGRPOConfig

CHECK_FLAGS = ("--gpu-memory-gib", "--host-memory-gib")


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
    cfg, _ = parse_cli_args(config_args(argv))
    config = OmegaConf.to_object(to_structured_cfg(cfg, config_cls=CUAGRPOConfig))
    assert isinstance(config, CUAGRPOConfig)
    return config
