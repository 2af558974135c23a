"""Points of a ``memaudit estimate`` sweep: each configuration resolved and totalled, or skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import CaseReport
from memaudit.spec import CaseSpec
from memaudit.te.estimate.closed_form import FastTotals, estimate_totals
from memaudit.te.estimate.config import TARGET, Config, resolve


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One configuration of a sweep with its closed-form totals.

    A point that does not resolve is skipped: ``config`` and ``totals`` are None and ``reason``
    is the UsageError's text. ``diff_totals`` are the totals under the ``--diff`` variant, if any.
    """

    recipe: str
    tokens: int
    hidden: int
    ffn: int
    groups: int
    config: Config | None = None
    reason: str | None = None
    totals: FastTotals | None = None
    diff_totals: FastTotals | None = None

    @classmethod
    def from_config(cls, c: Config, variant: str, diff: str | None = None) -> SweepPoint:
        """The point of a resolved config, totalled under ``variant`` (and ``diff`` when given)."""
        return cls(
            c.recipe,
            c.tokens,
            c.hidden,
            c.ffn,
            c.groups,
            config=c,
            totals=estimate_totals(c, variant),
            diff_totals=estimate_totals(c, diff) if diff else None,
        )


def sweep_point(
    recipe: str,
    tokens: int,
    hidden: int,
    ffn: int,
    groups: int,
    variant: str = "te-2.20",
    diff: str | None = None,
    *,
    splits: Sequence[int] | None = None,
    **options: Any,
) -> SweepPoint:
    """Resolve (``options`` as :func:`~.config.resolve` takes them) and total one point, or skip it."""
    try:
        c = resolve(recipe, tokens, hidden, ffn, groups, splits=splits, **options)
    except UsageError as exc:
        return SweepPoint(recipe, tokens, hidden, ffn, groups, reason=str(exc))
    return SweepPoint.from_config(c, variant, diff)


def skipped_case(p: SweepPoint, variant: str, path: str | None) -> CaseReport:
    """The report entry of a skipped point: status ``skipped`` with its reason."""
    spec = CaseSpec(
        TARGET,
        p.recipe,
        p.groups,
        (("tokens", p.tokens), ("hidden", p.hidden), ("ffn", p.ffn)),
        options={"estimate": True, "variant": variant, "path": path},
        splits=(),
    )
    return CaseReport(
        spec,
        id=f"{TARGET}/{p.recipe}/g{p.groups}/t{p.tokens}-h{p.hidden}-f{p.ffn}/bf16/estimate",
        status="skipped",
        reason=p.reason,
    )
