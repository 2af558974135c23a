"""Name -> target. ``reference``, ``te-grouped-mlp`` or ``PKG.MOD:FACTORY``."""

from __future__ import annotations

from memaudit.errors import UsageError
from memaudit.targets.base import Target

BUILTIN = ("reference", "te-grouped-mlp")


def get_target(name: str) -> Target:
    """Resolve a target name; unknown names are a UsageError on --target."""
    if name == "reference":
        from memaudit.targets.reference import ReferenceTarget

        return ReferenceTarget()
    if name == "te-grouped-mlp":
        from memaudit.te.target import TEGroupedMLPTarget

        return TEGroupedMLPTarget()
    if ":" in name:
        from memaudit.targets.custom import CustomTarget

        return CustomTarget(name)
    raise UsageError(f"unknown target {name!r}; use one of {', '.join(BUILTIN)} or PKG.MOD:FACTORY", key="--target")


def te_and_gpu_present() -> bool:
    """True when the TE target can run: CUDA is available and TE imports."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("transformer_engine") is not None
