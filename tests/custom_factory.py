"""Factories for the ``PKG.MOD:FACTORY`` target in tests/cli/test_cli_run.py (imported as ``custom_factory``)."""

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


class _SavesWaste(torch.autograd.Function):
    """Saves its input and a tokens x hidden fp32 tensor its backward never touches (the planted waste)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, torch.ones(x.shape[0], x.shape[1], dtype=torch.float32))
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, _waste = ctx.saved_tensors
        return 2 * g * x


class Wasteful(torch.nn.Module):
    """TinyMLP after a square that saves a buffer backward never reads (tokens x hidden x 4 bytes)."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.mlp = TinyMLP(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(_SavesWaste.apply(x))


def make_wasteful(spec: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Wasteful(spec.hidden, spec.ffn), torch.randn(spec.tokens, spec.hidden, requires_grad=True)
