"""A target of another shape (sequence x heads x head size, no FFN), registered by tests only:
it shows that a target owns its dimensions, case-id letters, scenario keys and byte variables.
``tests/house/test_third_party_target.py`` ships it as a package that is not memaudit (an entry point)."""

from __future__ import annotations

from typing import Any

import torch

from memaudit.spec import CaseSpec, ShapeParam
from memaudit.targets.base import Built, Target, backward_sum


class AttentionTarget(Target):
    """Q/K/V projections over ``seq`` tokens with ``heads`` heads of size ``head_dim``."""

    name = "attn"
    recipes = ("bf16",)
    shape = (
        ShapeParam("seq", "s", "Sequence length.", split=True),
        ShapeParam("heads", "n", "Attention heads."),
        ShapeParam("head_dim", "d", "Head size."),
    )
    defaults: dict[str, Any] = {"seq": 32, "heads": 2, "head_dim": 8, "groups": (1,), "dtype": "fp32"}

    def skip_reason(self, spec: CaseSpec) -> str | None:
        return None

    def build(self, spec: CaseSpec) -> Built:
        width = spec.heads * spec.head_dim
        gen = torch.Generator().manual_seed(0)
        model = torch.nn.Linear(width, 3 * width, bias=False)
        x = torch.randn(spec.seq, width, generator=gen, requires_grad=True)
        return Built(forward=lambda cap: model(x), backward=backward_sum, model=model, inputs=(x,))
