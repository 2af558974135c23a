"""Factories for the ``PKG.MOD:FACTORY`` target in tests/test_cli_run.py (imported as ``custom_factory``)."""

from __future__ import annotations

from typing import Any

import torch


class TinyMLP(torch.nn.Module):
    """Linear(H, F) -> tanh -> Linear(F, H), no bias; ``fail`` makes forward raise."""

    def __init__(self, hidden: int, ffn: int, *, fail: bool = False) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("custom model failed on purpose")
        return self.down(torch.tanh(self.up(x)))


def make(spec: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(spec.tokens, spec.hidden, requires_grad=True)
    return TinyMLP(spec.hidden, spec.ffn), x


def make_no_args() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return TinyMLP(8, 16), (torch.randn(4, 8, requires_grad=True),)


def make_failing_for_two_groups(spec: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    x = torch.randn(spec.tokens, spec.hidden, requires_grad=True)
    return TinyMLP(spec.hidden, spec.ffn, fail=spec.groups == 2), x


NOT_CALLABLE = 3
