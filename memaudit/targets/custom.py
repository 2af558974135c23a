"""Target ``PKG.MOD:FACTORY``: any PyTorch model from a factory returning ``(model, inputs)``.

The factory is called with the case's ``CaseSpec`` if it takes an argument, else with none.
``inputs`` is a tuple of positional arguments (or one tensor). Forward is ``model(*inputs)``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from memaudit.errors import UsageError
from memaudit.spec import CaseSpec
from memaudit.targets.base import MLP_SHAPE, Built, backward_sum

if TYPE_CHECKING:
    from memaudit.capture import Capture


def load_factory(ref: str) -> Any:
    """Import ``PKG.MOD:FACTORY``; a failure is a UsageError naming --target and the value."""
    mod_name, _, attr = ref.partition(":")
    if not mod_name or not attr:
        raise UsageError(f"expected PKG.MOD:FACTORY, got {ref!r}", key="--target")
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is bad input here
        raise UsageError(f"cannot import {mod_name!r} from {ref!r}: {type(exc).__name__}: {exc}", key="--target") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise UsageError(f"{mod_name!r} has no callable {attr!r} (from {ref!r})", key="--target")
    return factory


class CustomTarget:
    """Wraps a user factory."""

    recipes = ("bf16",)
    default_recipes = ("bf16",)
    supported_recipes = ("bf16",)
    shape = MLP_SHAPE
    defaults: dict[str, Any] = {"tokens": 1024, "hidden": 256, "ffn": 512, "groups": (1,), "dtype": "bf16"}
    default_device = "cpu"

    @staticmethod
    def runs_here() -> bool:
        return True

    @staticmethod
    def alignment(recipe: str) -> int:
        return 16

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        return {}

    def __init__(self, ref: str) -> None:
        self.name = ref
        self.factory = load_factory(ref)

    def skip_reason(self, spec: CaseSpec) -> str | None:
        return None

    def build(self, spec: CaseSpec) -> Built:
        takes_spec = bool(inspect.signature(self.factory).parameters)
        model, inputs = self.factory(spec) if takes_spec else self.factory()
        args = inputs if isinstance(inputs, tuple) else (inputs,)

        def forward(cap: Capture) -> Any:
            return model(*args)

        return Built(forward=forward, backward=backward_sum)
