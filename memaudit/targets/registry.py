"""Name -> target: the targets extensions declare, or ``PKG.MOD:FACTORY``.

Every target, memaudit's own included, is declared by an extension
(:class:`memaudit.extension.Extension`, ``targets``: name -> ``module:Class``); naming one imports
nothing but its module, when it is asked for. A package that is not memaudit ships a target the
same way, with its own shape, recipes and options.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

from memaudit.errors import UsageError, did_you_mean
from memaudit.extension import Extension, extensions
from memaudit.report import CaseReport
from memaudit.spec import CaseSpec, RunFlag, ShapeParam
from memaudit.targets.base import Target
from memaudit.targets.custom import CustomTarget

FALLBACK = "reference"
"""The default target where no built-in target's real code runs here."""


@dataclass(frozen=True)
class Registered:
    """A target an extension declares: its name, where its class is, and the extension."""

    name: str
    ref: str
    extension: Extension


def _registered_targets() -> tuple[Registered, ...]:
    """Every extension's targets: memaudit's own first (``reference`` first of them), then the others,
    each by name (the order of the union of options ``run --help`` shows without ``--target``); a name
    two extensions declare is the first one's."""
    return _scan(extensions())


@functools.cache
def _scan(exts: tuple[Extension, ...]) -> tuple[Registered, ...]:
    out: dict[str, Registered] = {}
    for ext in exts:
        for name, ref in ext.targets.items():
            out.setdefault(name, Registered(name, ref, ext))
    return tuple(sorted(out.values(), key=lambda r: (not r.extension.builtin, r.name != FALLBACK, r.name)))


def builtin_names() -> tuple[str, ...]:
    """The targets memaudit itself registers."""
    return tuple(r.name for r in _registered_targets() if r.extension.builtin)


def target_names() -> tuple[str, ...]:
    """Every registered target's name (memaudit's first)."""
    return tuple(r.name for r in _registered_targets())


def target_class(name: str) -> type[Target] | None:
    """The class registered as ``name``, or None; a registered class that is not a
    :class:`~memaudit.targets.base.Target` is a UsageError."""
    reg = next((r for r in _registered_targets() if r.name == name), None)
    if reg is None:
        return None
    try:
        cls = reg.extension.load(reg.ref)
    except UsageError as exc:
        raise UsageError(f"target {name!r} ({reg.ref}) does not load: {exc.message}", key="--target") from None
    if not (isinstance(cls, type) and _is_target(cls)):
        raise UsageError(f"target {name!r} ({reg.ref}) is not a memaudit.targets.base.Target subclass", key="--target")
    return cls


def _is_target(cls: type) -> bool:
    """A Target subclass, by the class's identity or (the module was imported twice, as a test
    harness that restores ``sys.modules`` does) by its module and name."""
    return issubclass(cls, Target) or any(
        c.__module__ == Target.__module__ and c.__qualname__ == Target.__qualname__ for c in cls.__mro__
    )


def get_target(name: str) -> Target:
    """Resolve a target name; unknown names are a UsageError on --target."""
    cls = target_class(name)
    if cls is not None:
        return cls()
    if ":" in name:
        return CustomTarget(name)
    names = target_names()
    raise UsageError(
        f"unknown target {name!r}{did_you_mean(name, names)}; use one of {', '.join(names)} or PKG.MOD:FACTORY",
        key="--target",
    )


def find_target(name: str) -> Target | None:
    """The target ``name`` names where it can be had here without running user code (a registered
    target; a ``PKG.MOD:FACTORY`` factory is imported only by :func:`get_target`), else None."""
    cls = target_class(name)
    return cls() if cls is not None else None


def owner_of(spec: CaseSpec) -> Target | None:
    """The target of ``spec``: the one it carries, else (a spec read from a report) the registered
    target of its name, or None where none is registered here."""
    if isinstance(spec.owner, Target):
        return spec.owner
    return _registered(spec.target, tuple(sys.path))


@functools.cache
def _registered(name: str, path: tuple[str, ...]) -> Target | None:
    """The registered target ``name`` (one object per name and ``sys.path``), or None."""
    try:
        return find_target(name)
    except UsageError:
        return None


def path_label(case: CaseReport) -> str | None:
    """A short name of the path ``case`` took: its target's words (:meth:`Target.path_label`),
    else fused / unfused, or None where it records no path."""
    if case.path is None:
        return None
    owner = owner_of(case.spec)
    return owner.path_label(case.path) if owner is not None else case.path.label()


def execution_label(case: CaseReport) -> str | None:
    """What tables show beside ``case``'s status (:meth:`Target.execution_label`): its target's
    words, else the emulated machine or ``estimated``; None for a measured case."""
    owner = owner_of(case.spec)
    if owner is not None:
        return owner.execution_label(case)
    if case.emulation is not None:
        return case.emulation.label()
    return "estimated" if case.execution == "estimated" else None


def path_detail(case: CaseReport) -> str:
    """What ``case``'s target says about its path beyond its name, or ''."""
    owner = owner_of(case.spec)
    return owner.path_detail(case.path) if owner is not None and case.path is not None else ""


def default_target_name() -> str:
    """The first of memaudit's targets whose real code runs here (the TE target wherever TE is
    installed and its forward runs: a GPU, or emulated kernels on fake CUDA), else ``reference``."""
    for name in builtin_names():
        cls = target_class(name)
        if name != FALLBACK and cls is not None and cls().runs_here():
            return name
    return FALLBACK


def builtin_targets() -> tuple[Target, ...]:
    """One of each of memaudit's own targets."""
    out = []
    for name in builtin_names():
        cls = target_class(name)
        if cls is not None:
            out.append(cls())
    return tuple(out)


def union_shape(targets: tuple[Target, ...]) -> tuple[ShapeParam, ...]:
    """The dimensions of ``targets`` (one per name, first declaration wins)."""
    seen: dict[str, ShapeParam] = {}
    for t in targets:
        for p in t.shape:
            seen.setdefault(p.name, p)
    return tuple(seen.values())


def union_flags(targets: tuple[Target, ...]) -> tuple[RunFlag, ...]:
    """The run options of ``targets`` (one per name, first declaration wins)."""
    seen: dict[str, RunFlag] = {}
    for t in targets:
        for flag in t.flags:
            seen.setdefault(flag.name, flag)
    return tuple(seen.values())


def union_recipes(targets: tuple[Target, ...]) -> tuple[str, ...]:
    """Every recipe name ``targets`` declare, in declaration order."""
    out: dict[str, Any] = {}
    for t in targets:
        out.update(dict.fromkeys(t.recipes))
    return tuple(out)
