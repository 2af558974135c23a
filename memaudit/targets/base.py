"""The target protocol: build a model and inputs for a case, run forward, annotate rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from memaudit.capture import Capture, iter_tensors
from memaudit.report import Row
from memaudit.spec import CaseSpec


@dataclass
class Built:
    """A model ready to run for one case.

    ``forward(cap)`` runs the forward pass inside ``capture()`` and returns the outputs;
    ``backward(outputs)`` runs backward afterwards; ``annotate(rows, cap)`` may name operands
    and return the case's ``path`` dict.
    """

    forward: Callable[[Capture], Any]
    backward: Callable[[Any], None]
    annotate: Callable[[list[Row], Capture], dict[str, Any] | None] = lambda rows, cap: None
    options: dict[str, Any] = field(default_factory=dict)
    model: Any = None
    inputs: tuple[Any, ...] = ()
    warnings: list[str] = field(default_factory=list)


class Target(Protocol):
    """What the runner needs from a target."""

    name: str
    default_recipes: tuple[str, ...]
    supported_recipes: tuple[str, ...]
    defaults: dict[str, Any]

    def skip_reason(self, spec: CaseSpec) -> str | None:
        """Why this case cannot run here (shown in the skipped cell), or None."""

    def build(self, spec: CaseSpec) -> Built:
        """Build the model and inputs for ``spec``."""


def backward_sum(outputs: Any) -> None:
    """Backward through the sum of every floating output that requires grad."""
    loss = None
    for t in iter_tensors(outputs):
        if t.requires_grad and t.is_floating_point():
            s = t.float().sum()
            loss = s if loss is None else loss + s
    if loss is not None:
        loss.backward()
