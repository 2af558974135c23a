"""Budgets: apply rules to a case's saved rows and give the verdicts they yield.

:func:`evaluate_rule` runs a rule's check (:mod:`memaudit.judge.checks`) and wraps what it found
into a :class:`Verdict` (``pass``, ``fail``, ``xfail``, ``XPASS`` or ``n/a``). The rules themselves
are :mod:`memaudit.judge.rules`, their failure text :mod:`memaudit.judge.rows`, TE version ranges
:mod:`memaudit.judge.versions`; parsing rules from TOML or marker arguments lives in
:mod:`memaudit.judge.scenario`. Nothing here imports torch or TE.

A rule that points at nothing raises :class:`~memaudit.errors.UsageError`: that is bad input
(exit 2), not a failed budget.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from memaudit.judge.checks import CHECK_FUNCTIONS, Context, NotApplicable
from memaudit.judge.rows import format_rows
from memaudit.judge.rules import CaseLike, Rule
from memaudit.judge.versions import te_version_of

# Context, format_rows and te_version_of are imported from here by the CLI and the pytest plugin.
__all__ = [
    "INCOMPLETE",
    "VERDICTS",
    "Context",
    "Verdict",
    "evaluate_case",
    "evaluate_rule",
    "format_rows",
    "summarize",
    "summary_line",
    "te_version_of",
]

VERDICTS = ("pass", "fail", "xfail", "XPASS", "n/a")

INCOMPLETE = (
    "case incomplete: memaudit did not see everything this case keeps for backward ({first}); "
    "a budget cannot pass on a partial count (allow it with --allow-incomplete, or "
    "allow_incomplete = true in the scenario)"
)


@dataclass
class Verdict:
    """The outcome of one rule on one case."""

    case_id: str
    rule: str
    kind: str
    verdict: str
    expected: str
    actual: str = ""
    message: str = ""
    rows: list[int] = field(default_factory=list)
    why: str | None = None
    select: str = ""

    @property
    def failed(self) -> bool:
        """A fail or an XPASS: what makes the gate exit 1."""
        return self.verdict in ("fail", "XPASS")

    def to_dict(self) -> dict[str, Any]:
        """The entry stored in ``CaseReport.budgets``."""
        return {
            "rule": self.rule,
            "kind": self.kind,
            "verdict": self.verdict,
            "expected": self.expected,
            "actual": self.actual,
            "select": self.select,
            "message": self.message,
            "rows": list(self.rows),
        }


def evaluate_rule(rule: Rule, case: CaseLike, ctx: Context | None = None) -> Verdict:
    """Apply one rule to one case. Raises UsageError when the rule points at nothing."""
    ctx = ctx or Context()
    base: dict[str, Any] = {
        "case_id": case.id,
        "rule": rule.name,
        "kind": rule.kind,
        "expected": rule.expected(),
        "why": rule.why,
        "select": rule.selection(),
    }
    if case.status != "ok":
        reason = f": {case.reason}" if case.reason else ""
        return Verdict(verdict="n/a", message=f"case {case.status}{reason}", **base)
    why_not = rule.not_applicable(case) or rule.path_mismatch(case)
    if why_not:
        return Verdict(verdict="n/a", message=why_not, **base)
    if not getattr(case, "complete", True) and not ctx.allow_incomplete:
        warnings = getattr(case, "warnings", None) or ["see the case's warnings"]
        return Verdict(verdict="fail", message=INCOMPLETE.format(first=warnings[0]), **base)
    try:
        actual, violation = CHECK_FUNCTIONS[type(rule.check)](rule, case, ctx)
    except NotApplicable as exc:
        return Verdict(verdict="n/a", message=str(exc), **base)
    base["expected"] = rule.expected_for(case)
    kf = rule.known_failure
    if kf is not None and kf.applies(ctx.te_version):
        if violation is not None:
            return Verdict(
                verdict="xfail",
                actual=violation.actual,
                message=f"known failure on TE {ctx.te_version} ({kf.te}): {kf.reason}",
                rows=list(violation.rows),
                **base,
            )
        return Verdict(
            verdict="XPASS",
            actual=actual,
            message=(
                f"{rule.name}: passed on TE {ctx.te_version}, but known_failure says it fails on TE {kf.te} "
                f"({kf.reason}); narrow or remove known_failure"
            ),
            **base,
        )
    if violation is None:
        return Verdict(verdict="pass", actual=actual, **base)
    message = violation.text()
    if rule.why:
        message += f"\n  why: {rule.why}"
    return Verdict(verdict="fail", actual=violation.actual, message=message, rows=list(violation.rows), **base)


def evaluate_case(case: CaseLike, rules: Iterable[Rule], ctx: Context | None = None) -> list[Verdict]:
    """Every rule on one case, in rule order."""
    return [evaluate_rule(rule, case, ctx) for rule in rules]


def summarize(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """Count of each verdict, in VERDICTS order."""
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        counts[v.verdict] += 1
    return counts


def summary_line(verdicts: Iterable[Verdict]) -> str:
    """'3 pass, 1 fail, 0 xfail, 0 XPASS, 2 n/a', the n/a said in words where there are any
    (a rule that does not apply to a case's recipe, group count or path; a skipped or errored case)."""
    verdicts = list(verdicts)
    line = ", ".join(f"{n} {k}" for k, n in summarize(verdicts).items())
    na = [v for v in verdicts if v.verdict == "n/a"]
    if na:
        cases = sum(1 for v in na if v.message.startswith("case "))
        parts = (
            [f"{len(na) - cases} where a rule does not apply to the case (another recipe, group count or path)"]
            if len(na) > cases
            else []
        ) + ([f"{cases} on cases skipped or in error"] if cases else [])
        line += f" (n/a: {'; '.join(parts)})"
    return line
