"""Per-parameter learning rates (config `lr_groups`) for AReaL's FSDP actor.

AReaL builds its optimizer over `self.model.parameters()` with one lr (fsdp_engine.py `_create_optimizer`,
adam, adam_bf16 and sgd alike) and its LR scheduler right after, from the optimizer's param groups. The
wrapped `_create_optimizer` hands it param groups instead of the parameters, so the scheduler scales each
group's own lr (warmup, decay) and the optimizer state is saved and loaded per group as usual.

Why: on the tiny model one Adam step of lr 1e-3 on the language model's attention alone takes the first
key of the tool call from ~99% to ~0.6% (docs/warm-start.md); configs/local_cpu.yaml keeps that group still.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from cua_agent.config import ConfigError, LrGroup

_groups: list[LrGroup] = []  # this process's groups, set by install() before the engine is built
_installed = False


def param_groups(
    named: Iterable[tuple[str, Any]], groups: Sequence[LrGroup], lr: float
) -> list[dict[str, Any]]:
    """The optimizer's param groups: parameters no group matches first, at `lr` (AReaL logs the first group's
    lr as the run's), then one per group at lr * scale. A group that matches no parameter is a ConfigError:
    a mistyped pattern would otherwise train everything at full lr without a word."""
    named_list = list(named)
    patterns = [re.compile(g.match) for g in groups]
    default: list[Any] = []
    members: list[list[Any]] = [[] for _ in groups]
    for name, param in named_list:
        index = next((i for i, p in enumerate(patterns) if p.search(name)), None)
        (default if index is None else members[index]).append(param)
    for group, params in zip(groups, members, strict=True):
        if not params:
            raise ConfigError(
                f"lr_groups.match: {group.match!r} matches no parameter of the model (names look like "
                f"{[named_list[0][0], named_list[len(named_list) // 2][0]]})"
            )
    out = [{"params": default, "lr": lr}] if default else []
    return out + [{"params": ps, "lr": lr * g.scale} for g, ps in zip(groups, members, strict=True)]


def install(groups: Sequence[LrGroup]) -> None:
    """Use `groups` for the optimizers built in this process from now on ([] = AReaL's single group)."""
    global _installed
    _groups[:] = groups
    if _installed:
        return
    from areal.engine.fsdp_engine import FSDPEngine

    create = FSDPEngine._create_optimizer

    def create_with_groups(self: Any, ft_spec: Any) -> None:
        if not _groups or self.optimizer_config is None:
            return create(self, ft_spec)
        grouped = param_groups(self.model.named_parameters(), _groups, self.optimizer_config.lr)
        # AReaL passes self.model.parameters() to the optimizer; for this call it yields the groups.
        self.model.parameters = lambda *args, **kwargs: iter(grouped)
        try:
            create(self, ft_spec)
        finally:
            del self.model.parameters

    FSDPEngine._create_optimizer = create_with_groups  # type: ignore[method-assign]
    _installed = True
