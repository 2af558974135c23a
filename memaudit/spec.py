"""Case specifications: what one cell of the matrix runs, its id, and its token splits.

A spec is made by its target (``Target.spec``) and carries it (``spec.owner``): the id, the
alignment and the splits are the target's answers. This module imports nothing above itself; it
knows a target only as :class:`SpecOwner`, the little a spec asks of it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

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


class SpecOwner(Protocol):
    """What a spec asks of the target that made it (:class:`memaudit.targets.base.Target`)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[ShapeParam, ...]: ...

    def alignment(self, recipe: str) -> int: ...

    def case_id(self, spec: CaseSpec) -> str: ...


def default_case_id(spec: CaseSpec, shape: tuple[ShapeParam, ...]) -> str:
    """``target/recipe/gG/<letter><value>-.../dtype`` with the dimension letters ``shape`` declares,
    then the sorted options (``/k=v,...``) where there are any."""
    letters = {p.name: p.letter for p in shape}
    dims = "-".join(f"{letters.get(k, k)}{v}" for k, v in spec.shape)
    base = f"{spec.target}/{spec.recipe}/g{spec.groups}/{dims}/{spec.dtype}"
    opts = ",".join(f"{k}={v}" for k, v in sorted(spec.options.items()))
    return f"{base}/{opts}" if opts else base


@dataclass(frozen=True)
class CaseSpec:
    """One cell: a target run at one recipe, group count and shape.

    The matrix is recipes x group counts; ``shape`` holds the target's own dimensions
    (``Target.shape``), in its declared order, and each reads as an attribute (``spec.tokens``).
    Build one with ``target.spec(...)`` (:meth:`make`). ``owner`` is the target that made it
    (None for a spec read back from a report: its id is the report's, and what needs the target
    (``alignment``, ``split_sizes``) says so).
    """

    target: str
    recipe: str
    groups: int
    shape: tuple[tuple[str, int], ...] = ()
    dtype: str = "bf16"
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    splits: tuple[int, ...] | None = None
    owner: SpecOwner | None = field(default=None, hash=False, compare=False, repr=False)

    @classmethod
    def make(
        cls,
        owner: SpecOwner,
        recipe: str,
        groups: int,
        *,
        dtype: str = "bf16",
        device: str = "cpu",
        options: dict[str, Any] | None = None,
        splits: tuple[int, ...] | None = None,
        **dims: int,
    ) -> CaseSpec:
        """A spec of ``owner`` with ``dims`` in the order it declares them (a dimension it does
        not declare, or one missing, is a UsageError)."""
        names = [p.name for p in owner.shape]
        unknown = sorted(set(dims) - set(names))
        missing = [n for n in names if n not in dims]
        if unknown or missing:
            raise UsageError(
                f"target {owner.name!r} has dimensions {', '.join(names) or 'none'}; got {', '.join(dims) or 'none'}"
            )
        shape = tuple((n, dims[n]) for n in names)
        return cls(owner.name, recipe, groups, shape, dtype, device, dict(options or {}), splits, owner)

    def _owner(self, what: str) -> SpecOwner:
        if self.owner is None:
            raise ValueError(
                f"{what} of case {self.target}/{self.recipe}/g{self.groups} needs its target, "
                "and this spec has none (it was read from a report)"
            )
        return self.owner

    @property
    def dims(self) -> dict[str, int]:
        """The shape as a dict, in declared order."""
        return dict(self.shape)

    def __getattr__(self, name: str) -> int:
        if not name.startswith("_") and name not in ("shape", "owner"):
            for key, value in object.__getattribute__(self, "shape"):
                if key == name:
                    return value
        raise AttributeError(f"{type(self).__name__} has no attribute or dimension {name!r}")

    def replace(self, **changes: Any) -> CaseSpec:
        """A copy with fields or dimensions changed (``spec.replace(recipe="bf16", tokens=8192)``)."""
        dims = {k: changes.pop(k) for k in list(changes) if k in self.dims}
        shape = tuple((k, dims.get(k, v)) for k, v in self.shape)
        return dataclasses.replace(self, shape=shape, **changes)

    def retarget(self, owner: SpecOwner) -> CaseSpec:
        """This case as a case of ``owner`` (same recipe, groups, shape and options): a target
        that hands a case to another (a fallback, local experts) asks it this way."""
        return dataclasses.replace(self, target=owner.name, owner=owner)

    @property
    def id(self) -> str:
        """Stable case id (the target's ``case_id``; by default :func:`default_case_id`)."""
        return self._owner("the id").case_id(self)

    def alignment(self) -> int:
        """The per-group token alignment the target needs for this recipe."""
        return self._owner("the alignment").alignment(self.recipe)

    def split_dim(self) -> str | None:
        """The dimension group splits divide (``ShapeParam.split``), or None."""
        return next((p.name for p in self._owner("the split dimension").shape if p.split), None)

    def split_sizes(self) -> list[int]:
        """Explicit splits if given, else the default uneven splits of the target's split dimension."""
        if self.splits is not None:
            return list(self.splits)
        dim = self.split_dim()
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
            f"{tokens} {what} are too few for {groups} groups at alignment {align} (need at least {live * align})",
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


def validate_splits(
    splits: list[int], tokens: int, groups: int, align: int, *, source: str | None = None, key: str | None = None
) -> None:
    """Check explicit splits: count, sum and alignment."""
    if len(splits) != groups:
        raise UsageError(f"{len(splits)} splits given for {groups} groups: {splits}", source=source, key=key)
    if sum(splits) != tokens:
        raise UsageError(f"splits {splits} sum to {sum(splits)}, not {tokens} tokens", source=source, key=key)
    bad = [s for s in splits if s < 0 or s % align]
    if bad:
        raise UsageError(f"splits {bad} are not non-negative multiples of {align}", source=source, key=key)
