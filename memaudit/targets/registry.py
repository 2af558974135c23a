"""Name -> target: the built-in targets by name, or ``PKG.MOD:FACTORY``.

Built-in targets are named here by module path only; each module is imported when its target is
asked for, so naming the TE target imports nothing of TE.
"""

from __future__ import annotations

import importlib
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import PathInfo
from memaudit.spec import CaseSpec, RunFlag, ShapeParam
from memaudit.targets.base import Target  # torch-free: the protocol only

BUILTIN = {
    "reference": "memaudit.targets.reference:ReferenceTarget",
    "te-grouped-mlp": "memaudit.te.target:TEGroupedMLPTarget",
    "ep-grouped-mlp": "memaudit.targets.ep:EPGroupedMLPTarget",
}
"""Built-in target name -> ``module:class``; the first whose ``runs_here()`` is true is the default."""

FALLBACK = "reference"


def target_class(name: str) -> Any | None:
    """The class of built-in target ``name``, or None."""
    ref = BUILTIN.get(name)
    if ref is None:
        return None
    module, _, cls = ref.partition(":")
    return getattr(importlib.import_module(module), cls)


def get_target(name: str) -> Target:
    """Resolve a target name; unknown names are a UsageError on --target."""
    cls = target_class(name)
    if cls is not None:
        return cls()
    if ":" in name:
        from memaudit.targets.custom import CustomTarget

        return CustomTarget(name)
    raise UsageError(f"unknown target {name!r}; use one of {', '.join(BUILTIN)} or PKG.MOD:FACTORY", key="--target")


def default_target_name() -> str:
    """The first built-in target that can run on this machine (the TE target wherever TE is installed and
    its forward runs: a GPU, or emulated kernels on fake CUDA)."""
    for name in BUILTIN:
        cls = target_class(name)
        if name != FALLBACK and cls is not None and cls.runs_here():
            return name
    return FALLBACK


def _class_of(name: str) -> Any:
    """The class that would serve ``name``: a built-in, or the custom-target adapter (not loaded)."""
    cls = target_class(name)
    if cls is None and ":" in name:
        from memaudit.targets.custom import CustomTarget

        return CustomTarget
    return cls


def recipes(target: str) -> tuple[str, ...]:
    """The recipe names ``target`` declares (a custom target's factory is not imported for this)."""
    cls = _class_of(target)
    return tuple(cls.recipes) if cls is not None else ()


def all_recipes() -> tuple[str, ...]:
    """Every recipe name any built-in target declares, in declaration order."""
    out: dict[str, None] = {}
    for name in BUILTIN:
        out.update(dict.fromkeys(recipes(name)))
    return tuple(out)


def alignment(target: str, recipe: str) -> int:
    """Per-group token alignment of ``recipe`` on ``target`` (16 for targets that declare none)."""
    cls = target_class(target)
    return cls.alignment(recipe) if cls is not None else 16


def path_label(target: str, path: PathInfo | None) -> str | None:
    """A short name of the path a case of ``target`` took, for tables (the target's own words
    where it declares ``path_label``; else fused / unfused, or None)."""
    if path is None:
        return None
    cls = _class_of(target)
    name = getattr(cls, "path_label", None)
    return name(path) if name is not None else path.label()


def path_detail(target: str, path: PathInfo) -> str:
    """What a target says about a path beyond its name (why a rule on it failed), or ''."""
    cls = _class_of(target)
    detail = getattr(cls, "path_detail", None)
    return detail(path) if detail is not None else ""


def run_flags() -> tuple[RunFlag, ...]:
    """The ``run`` options every built-in target declares (one per name, first declaration wins)."""
    seen: dict[str, RunFlag] = {}
    for name in BUILTIN:
        for flag in getattr(target_class(name), "flags", ()):
            seen.setdefault(flag.name, flag)
    return tuple(seen.values())


def shape_params(target: str) -> tuple[ShapeParam, ...] | None:
    """The shape dimensions ``target`` declares (``Target.shape``), or None for a name no target serves."""
    cls = _class_of(target)
    if cls is None:
        return None
    own = getattr(cls, "shape_of", None)  # a class whose dimensions depend on the name (a custom factory)
    return tuple(own(target)) if own is not None else tuple(cls.shape)


def default_dtype(target: str) -> str:
    """The dtype ``target`` runs without ``--dtype`` (bf16 for a name no target serves)."""
    cls = _class_of(target)
    return cls.defaults.get("dtype", "bf16") if cls is not None else "bf16"


def split_dim(target: str) -> str | None:
    """The dimension group splits divide (``ShapeParam.split``), or None."""
    return next((p.name for p in shape_params(target) or () if p.split), None)


def case_id(spec: CaseSpec) -> str:
    """The id of ``spec``: the target's ``case_id(spec)`` where it declares one, else
    ``target/recipe/gG/<letter><value>-.../dtype`` with its dimension letters, then the sorted options."""
    cls = _class_of(spec.target)
    own = getattr(cls, "case_id", None)
    if own is not None:
        return own(spec)
    letters = {p.name: p.letter for p in shape_params(spec.target) or ()}
    dims = "-".join(f"{letters.get(k, k)}{v}" for k, v in spec.shape)
    base = f"{spec.target}/{spec.recipe}/g{spec.groups}/{dims}/{spec.dtype}"
    opts = ",".join(f"{k}={v}" for k, v in sorted(spec.options.items()))
    return f"{base}/{opts}" if opts else base


def all_shape_params() -> tuple[ShapeParam, ...]:
    """The shape dimensions of every built-in target (one per name, first declaration wins): the
    ``run`` options ``--tokens`` and the like, and the scenario's case keys."""
    seen: dict[str, ShapeParam] = {}
    for name in BUILTIN:
        for p in target_class(name).shape:
            seen.setdefault(p.name, p)
    return tuple(seen.values())


def path_keys(target: str) -> tuple[str, ...]:
    """The ``path`` keys ``target``'s cases may record (``Target.path_keys``); none where it
    declares none (a scenario's ``when`` on such a target would apply nowhere, and is refused)."""
    return tuple(getattr(_class_of(target), "path_keys", ()))
