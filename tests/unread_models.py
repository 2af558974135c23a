"""Factories for the ``--unread`` tests (imported as ``unread_models``; ``PKG.MOD:FACTORY`` targets).

Plain PyTorch models small enough for a CPU test, each built from a fixed seed (the poisoned method
rebuilds a case and needs the same values every time), and a planted waste: an
``autograd.Function`` that saves a tensor its backward never touches.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

PLANTED_BYTES = 64 * 256 * 4
"""The planted waste: a float32 (64, 256) tensor saved and never read."""


class SavesJunk(torch.autograd.Function):
    """``x @ w`` that also saves a tensor nothing in its backward reads."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, junk: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w, junk)
        return x @ w

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, w, _junk = ctx.saved_tensors
        return g @ w.t(), x.t() @ g, None


class Planted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        junk = torch.ones(64, 256)
        return torch.tanh(SavesJunk.apply(x, self.w, junk))


def planted() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Planted(), torch.randn(8, 32, requires_grad=True)


def transformer() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True).train()
    return model, torch.randn(2, 8, 32, requires_grad=True)


def lstm() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.LSTM(16, 32, num_layers=2).train(), torch.randn(6, 3, 16, requires_grad=True)


def conv_bn_relu() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for cin, cout in ((3, 8), (8, 8)):
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*layers).train(), torch.randn(2, 3, 8, 8)


class AutocastMLP(nn.Module):
    """An embedding and a Linear-GELU-Linear under bf16 autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.mlp(self.emb(ids))


def autocast_mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return AutocastMLP(), torch.randint(0, 64, (4, 8))


class Checkpointed(nn.Module):
    """Two residual MLP blocks under non-reentrant ``torch.utils.checkpoint``."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=False)
        return x


def checkpointed() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Checkpointed(), torch.randn(4, 16, requires_grad=True)


_COMPILED: dict[str, Any] = {}


def compiled_mlp() -> tuple[nn.Module, torch.Tensor]:
    """A Linear-GELU-Linear compiled with aot_eager (compiled once per process: every rebuild runs
    the same compiled graph)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    return compiled, torch.randn(4, 16, requires_grad=True)
