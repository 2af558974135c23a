"""Factories for the distributed tests (imported as ``dist_factory`` on the ranks' PYTHONPATH)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch

WAIT_FOR = "DIST_FACTORY_WAIT_FOR"
"""A file the dying rank waits for before it dies (the test names rank 0's file, so that the
order of events is fixed: rank 0 has finished its case when rank 1 is killed)."""


class Replica(torch.nn.Module):
    """Linear(H, F) -> tanh -> Linear(F, H); ``die`` kills the process in forward (SIGKILL, as the
    kernel's OOM killer or a scheduler would), once the file ``DIST_FACTORY_WAIT_FOR`` names exists."""

    def __init__(self, hidden: int, ffn: int, *, die: bool = False) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)
        self.die = die

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.up(x))
        if self.die:
            wait = os.environ.get(WAIT_FOR)
            deadline = time.monotonic() + 60
            while wait and not Path(wait).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return self.down(h)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def killed_on_rank1(spec: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """Every rank builds the same replica; rank 1's forward is killed."""
    torch.manual_seed(0)
    return Replica(spec.hidden, spec.ffn, die=_rank() == 1), torch.randn(spec.tokens, spec.hidden, requires_grad=True)


def rank1_saves_more(spec: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """Data-parallel replicas that should be identical, except that rank 1 runs twice the tokens."""
    torch.manual_seed(0)
    tokens = spec.tokens * (2 if _rank() == 1 else 1)
    return Replica(spec.hidden, spec.ffn), torch.randn(tokens, spec.hidden, requires_grad=True)
