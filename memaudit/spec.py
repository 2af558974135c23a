"""Case specifications: what one cell of the matrix runs, its id, and its token splits.

Recipe names and their alignment belong to the targets (``Target.recipes``, ``Target.alignment``).
"""

from __future__ import annotations

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
class CaseSpec:
    """One cell: a target run at one recipe, group count and shape."""

    target: str
    recipe: str
    groups: int
    tokens: int
    hidden: int
    ffn: int
    dtype: str = "bf16"
    device: str = "cpu"
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    splits: tuple[int, ...] | None = None

    @property
    def id(self) -> str:
        """Stable case id: target/recipe/gG/tT-hH-fF/dtype (+ sorted options)."""
        base = f"{self.target}/{self.recipe}/g{self.groups}/t{self.tokens}-h{self.hidden}-f{self.ffn}/{self.dtype}"
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{base}/{opts}" if opts else base

    def alignment(self) -> int:
        """The per-group token alignment the target needs for this recipe."""
        from memaudit.targets.registry import alignment

        return alignment(self.target, self.recipe)

    def split_sizes(self) -> list[int]:
        """Explicit splits if given, else the default uneven splits."""
        if self.splits is not None:
            return list(self.splits)
        return default_splits(self.tokens, self.groups, self.alignment())


def default_splits(tokens: int, groups: int, align: int) -> list[int]:
    """Uneven, deterministic splits, each a multiple of ``align``, summing to ``tokens``.

    As in TE's tests, one group (index 1) gets 0 tokens when there are 3 or more groups; the
    others get tokens in proportion 1, 2, 3, ... so real routing's imbalance is represented.
    """
    if groups < 1:
        raise UsageError(f"group count must be >= 1, got {groups}", key="--groups")
    if tokens < 1:
        raise UsageError(f"tokens must be >= 1, got {tokens}", key="--tokens")
    if tokens % align:
        raise UsageError(
            f"{tokens} tokens cannot be split into groups of multiples of {align} "
            f"(the recipe's alignment); use a multiple of {align}",
            key="--tokens",
        )
    units = tokens // align
    if groups == 1:
        return [tokens]
    zero = 1 if groups >= 3 else None
    weights = [0 if i == zero else i + 1 for i in range(groups)]
    live = sum(1 for w in weights if w)
    if units < live:
        raise UsageError(
            f"{tokens} tokens are too few for {groups} groups at alignment {align} "
            f"(need at least {live * align})",
            key="--tokens",
        )
    # Every live group gets one unit, the rest is shared by weight (largest remainder, stable).
    rest = units - live
    total_w = sum(weights)
    shares = [rest * w // total_w for w in weights]
    remainders = sorted(range(groups), key=lambda i: (-(rest * weights[i] % total_w), i))
    left = rest - sum(shares)
    for i in remainders[:left]:
        shares[i] += 1
    return [(s + (1 if w else 0)) * align for s, w in zip(shares, weights, strict=True)]


def validate_splits(splits: list[int], tokens: int, groups: int, align: int, *, source: str | None = None, key: str | None = None) -> None:
    """Check explicit splits: count, sum and alignment."""
    if len(splits) != groups:
        raise UsageError(f"{len(splits)} splits given for {groups} groups: {splits}", source=source, key=key)
    if sum(splits) != tokens:
        raise UsageError(f"splits {splits} sum to {sum(splits)}, not {tokens} tokens", source=source, key=key)
    bad = [s for s in splits if s < 0 or s % align]
    if bad:
        raise UsageError(f"splits {bad} are not non-negative multiples of {align}", source=source, key=key)
