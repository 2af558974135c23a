"""Case specifications: what one cell of the matrix runs, its id, and its token splits.

Recipe names and their alignment belong to the targets (``Target.recipes``, ``Target.alignment``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from memaudit.errors import UsageError

DTYPES = ("bf16", "fp32")


@dataclass(frozen=True)
class RunFlag:
    """A ``memaudit run`` option a target declares; its value reaches ``Target.configure(flags)``.

    ``annotation`` is the option's Python type, ``decls`` typer's declarations where the default
    spelling (``--single-grouped-weight``) is not enough (``("--fused/--no-fused",)``).
    """

    name: str
    annotation: Any
    default: Any
    help: str
    decls: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShapeParam:
    """A shape dimension a target declares: its name (``tokens``), its letter in case ids (``t``),
    its ``memaudit run`` help, and whether group splits divide it (``split``)."""

    name: str
    letter: str
    help: str
    split: bool = False


@dataclass(frozen=True)
class CaseSpec:
    """One cell: a target run at one recipe, group count and shape.

    The matrix is recipes x group counts; ``shape`` holds the target's own dimensions
    (``Target.shape``), in its declared order, and each reads as an attribute (``spec.tokens``).
    Build one with :meth:`make`.
    """

    target: str
    recipe: str
    groups: int
    shape: tuple[tuple[str, int], ...] = ()
    dtype: str = "bf16"
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    splits: tuple[int, ...] | None = None

    @classmethod
    def make(cls, target: str, recipe: str, groups: int, *, dtype: str = "bf16", device: str = "cpu",
             options: dict[str, Any] | None = None, splits: tuple[int, ...] | None = None, **dims: int) -> CaseSpec:
        """A spec with ``dims`` in the order ``target`` declares them (a dimension it does not
        declare is a UsageError)."""
        from memaudit.targets.registry import shape_params

        declared = shape_params(target)
        if declared is not None:
            names = [p.name for p in declared]
            unknown = sorted(set(dims) - set(names))
            missing = [n for n in names if n not in dims]
            if unknown or missing:
                raise UsageError(f"target {target!r} has dimensions {', '.join(names)}; "
                                 f"got {', '.join(dims) or 'none'}")
            dims = {n: dims[n] for n in names}
        return cls(target, recipe, groups, tuple(dims.items()), dtype, device, dict(options or {}), splits)

    @property
    def dims(self) -> dict[str, int]:
        """The shape as a dict, in declared order."""
        return dict(self.shape)

    def __getattr__(self, name: str) -> int:
        if not name.startswith("_") and name != "shape":
            for key, value in object.__getattribute__(self, "shape"):
                if key == name:
                    return value
        raise AttributeError(f"{type(self).__name__} has no attribute or dimension {name!r}")

    def replace(self, **changes: Any) -> CaseSpec:
        """A copy with fields or dimensions changed (``spec.replace(recipe="bf16", tokens=8192)``)."""
        dims = {k: changes.pop(k) for k in list(changes) if k in self.dims}
        shape = tuple((k, dims.get(k, v)) for k, v in self.shape)
        return dataclasses.replace(self, shape=shape, **changes)

    @property
    def id(self) -> str:
        """Stable case id (the target's format; by default target/recipe/gG/tT-hH-fF/dtype
        with the target's dimension letters, then the sorted options)."""
        from memaudit.targets.registry import case_id

        return case_id(self)

    def alignment(self) -> int:
        """The per-group token alignment the target needs for this recipe."""
        from memaudit.targets.registry import alignment

        return alignment(self.target, self.recipe)

    def split_sizes(self) -> list[int]:
        """Explicit splits if given, else the default uneven splits of the target's split dimension."""
        if self.splits is not None:
            return list(self.splits)
        from memaudit.targets.registry import split_dim

        dim = split_dim(self.target)
        if dim is None:
            return []
        return default_splits(self.dims[dim], self.groups, self.alignment(), key=f"--{dim}")


def default_splits(tokens: int, groups: int, align: int, *, key: str = "--tokens") -> list[int]:
    """Uneven, deterministic splits, each a multiple of ``align``, summing to ``tokens`` (the
    target's split dimension, named by ``key`` in messages).

    As in TE's tests, one group (index 1) gets 0 tokens when there are 3 or more groups; the
    others get tokens in proportion 1, 2, 3, ... so real routing's imbalance is represented.
    """
    if groups < 1:
        raise UsageError(f"group count must be >= 1, got {groups}", key="--groups")
    what = key.lstrip("-")
    if tokens < 1:
        raise UsageError(f"{what} must be >= 1, got {tokens}", key=key)
    if tokens % align:
        raise UsageError(
            f"{tokens} {what} cannot be split into groups of multiples of {align} "
            f"(the recipe's alignment); use a multiple of {align}",
            key=key,
        )
    units = tokens // align
    if groups == 1:
        return [tokens]
    zero = 1 if groups >= 3 else None
    weights = [0 if i == zero else i + 1 for i in range(groups)]
    live = groups if zero is None else groups - 1  # the groups with a weight
    if units < live:
        raise UsageError(
            f"{tokens} {what} are too few for {groups} groups at alignment {align} "
            f"(need at least {live * align})",
            key=key,
        )
    # Every live group gets one unit, the rest is shared by weight (largest remainder, stable).
    rest = units - live
    total_w = sum(weights)
    shares = [rest * w // total_w for w in weights]
    left = rest - sum(shares)
    if left:  # largest remainders first; sorted() is stable, so ties go by index
        order = [-(rest * w % total_w) for w in weights]
        for i in sorted(range(groups), key=order.__getitem__)[:left]:
            shares[i] += 1
    return [(s + 1) * align if w else s * align for s, w in zip(shares, weights, strict=True)]


def validate_splits(splits: list[int], tokens: int, groups: int, align: int, *, source: str | None = None, key: str | None = None) -> None:
    """Check explicit splits: count, sum and alignment."""
    if len(splits) != groups:
        raise UsageError(f"{len(splits)} splits given for {groups} groups: {splits}", source=source, key=key)
    if sum(splits) != tokens:
        raise UsageError(f"splits {splits} sum to {sum(splits)}, not {tokens} tokens", source=source, key=key)
    bad = [s for s in splits if s < 0 or s % align]
    if bad:
        raise UsageError(f"splits {bad} are not non-negative multiples of {align}", source=source, key=key)
