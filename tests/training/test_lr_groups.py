"""Per-parameter learning rates (config `lr_groups`): which parameters get which lr. That a group at scale 0
really stays still through AReaL's optimizer and scheduler is checked on a real run in test_sync_exact.py."""

from __future__ import annotations

import pytest
import torch

from cua_agent.config import ConfigError, LrGroup
from cua_agent.train.lr_groups import param_groups


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.visual = torch.nn.ModuleDict({"attn": torch.nn.Linear(2, 2)})
        self.language_model = torch.nn.ModuleDict(
            {"self_attn": torch.nn.Linear(2, 2), "mlp": torch.nn.Linear(2, 2)}
        )
        self.lm_head = torch.nn.Linear(2, 2, bias=False)


def names_by_group(model: torch.nn.Module, groups: list[LrGroup], lr: float) -> list[tuple[float, list[str]]]:
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [
        (g["lr"], [name_of[id(p)] for p in g["params"]])
        for g in param_groups(model.named_parameters(), groups, lr)
    ]


def test_unmatched_parameters_come_first_at_the_base_lr_then_each_group_at_its_scale():
    groups = [LrGroup(r"language_model\.self_attn\.", 0.0), LrGroup(r"attn", 0.5)]
    assert names_by_group(TinyLM(), groups, 1e-3) == [
        (1e-3, ["language_model.mlp.weight", "language_model.mlp.bias", "lm_head.weight"]),
        (0.0, ["language_model.self_attn.weight", "language_model.self_attn.bias"]),
        (5e-4, ["visual.attn.weight", "visual.attn.bias"]),
    ]


def test_a_group_that_earlier_groups_leave_empty_is_refused():
    """`attn` takes the language model's attention first: the second group would silently train nothing."""
    groups = [LrGroup("attn", 0.25), LrGroup(r"language_model\.self_attn", 0.0), LrGroup("lm_head", 2.0)]
    with pytest.raises(ConfigError, match=r"^lr_groups\.match: 'language_model\\\\\.self_attn' matches no"):
        names_by_group(TinyLM(), groups, 1.0)


def test_a_pattern_that_matches_nothing_is_refused_with_example_names():
    with pytest.raises(
        ConfigError, match=r"^lr_groups\.match: 'self_atn' matches no parameter .*'visual\.attn\.weight'"
    ):
        param_groups(TinyLM().named_parameters(), [LrGroup("self_atn", 0.0)], 1.0)


def test_every_parameter_matched_leaves_no_empty_base_group():
    lrs = [lr for lr, _ in names_by_group(TinyLM(), [LrGroup(".", 0.1)], 1.0)]
    assert lrs == [pytest.approx(0.1)]


@pytest.mark.parametrize(
    ("match", "scale", "field"),
    [("", 1.0, "lr_groups.match"), ("(", 1.0, "lr_groups.match"), ("x", -0.1, "lr_groups.scale")],
)
def test_bad_groups_name_the_field(match, scale, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        LrGroup(match, scale)
