"""The checks: one function per kind of rule, each returning what it found and a :class:`Violation`.

Each check function takes a rule, a case and a :class:`Context` and returns ``(actual, None)`` or
``(actual, Violation)``; the violation carries its own human-readable text (the pytest-memray
pattern). :data:`CHECK_FUNCTIONS` maps a check type to its function; :mod:`memaudit.judge.budgets`
turns the result into a verdict. Nothing here imports torch or TE.

A rule that points at nothing (its operand pattern matches no row of an ok case, a ratio whose
other case is missing, a path rule on a case without path info) raises :class:`UsageError`:
that is bad input (exit 2), not a failed budget. A check that cannot be judged for a reason of the
report's (the other case of a ratio did not run) raises :class:`NotApplicable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from memaudit.errors import did_you_mean
from memaudit.judge.rows import MAX_ROW_LINES, bytes_text, format_rows, is_indexed, operand_base
from memaudit.judge.rules import (
    ByteCheck,
    CaseLike,
    Count,
    ExactBytes,
    Forbid,
    MaxBytes,
    MaxUnreadBytes,
    PathCheck,
    Ratio,
    Rule,
    Selection,
    nonempty_groups,
    operand_matches,
)
from memaudit.report import CaseReport, unread_storages
from memaudit.targets import registry
from memaudit.units import fmt_bytes

# The first line of a violation's text, by the kind of the rule that failed ("" for a plain one).
HEADLINES = {
    "": "{rule}: expected {expected}, found {actual}",
    "count": "{rule}: expected count {expected}; {actual}",
    "forbid": "{rule}: forbidden rows were saved ({actual}); expected {expected}",
    "max_bytes": "{rule}: {actual} saved, expected {expected}",
    "exact_bytes": "{rule}: {actual} saved, expected {expected}",
    "max_unread_bytes": "{rule}: {actual} saved for backward and never read, expected {expected}",
    "ratio": "{rule}: ratio {actual}, expected {expected}",
    "path": "{rule}: path was {actual}, expected {expected}",
}


@dataclass(frozen=True)
class Violation:
    """A failed check: what was expected, what was found, and the rows to look at.

    ``kind`` is the failed rule's kind (a key of :data:`HEADLINES`); it picks the first line.
    """

    rule: str
    expected: str
    actual: str
    rows: tuple[int, ...] = ()
    row_lines: tuple[str, ...] = ()
    detail: str = ""
    selection: str = ""
    kind: str = ""

    def headline(self) -> str:
        return HEADLINES[self.kind].format(rule=self.rule, expected=self.expected, actual=self.actual)

    def text(self) -> str:
        lines = [self.headline()]
        if self.selection:
            lines.append(f"selection: {self.selection}")
        if self.detail:
            lines.append(self.detail)
        lines.extend("    " + line for line in self.row_lines)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


class NotApplicable(Exception):
    """The check cannot be judged on this case (the verdict is ``n/a``, with this message)."""


FindCase = Callable[[CaseLike, Ratio], "CaseLike | None"]


@dataclass
class Context:
    """What a rule may need beyond its own case."""

    te_version: str | None = None
    find_case: FindCase | None = None
    allow_incomplete: bool = False
    """Judge cases memaudit marked incomplete (some saved memory it could not see) anyway."""


# ---- the rows a rule looks at ---------------------------------------------------------------------
def _selected(rule: Rule, case: CaseLike) -> list[Any]:
    sel = rule.select or Selection()
    ne = nonempty_groups(case)
    return [r for r in case.rows if sel.matches(r, ne)]


def require_rows(rule: Rule, case: CaseLike) -> None:
    """The rule needs its selection to resolve: each operand pattern must name a row of the case."""
    sel = rule.select
    if sel is None or sel.operand is None:
        if not case.rows:
            raise rule.error(f"case {case.id} saved no rows, so the selection is empty", subkey=".select")
        return
    present = sorted({r.operand for r in case.rows if r.operand})
    for pattern in sel.operand:
        if not any(operand_matches(pattern, r.operand) for r in case.rows):
            bases = sorted({operand_base(p) for p in present})
            raise rule.error(
                f"operand pattern {pattern!r} matches no row of case {case.id}"
                f"{did_you_mean(pattern, bases + present)}; operands present: {', '.join(bases) or 'none'}",
                subkey=".select.operand",
            )


def measure_bytes(rows: Iterable[Any], measure: str) -> int:
    """logical: sum of row bytes; physical: each storage once at full size; saved: physical minus parameter
    and cached storages."""
    rows = list(rows)
    if measure == "logical":
        return sum(r.bytes for r in rows)
    storages: dict[str, int] = {}
    params: set[str] = set()
    loose = 0
    for r in rows:
        if r.storage is None:
            loose += 0 if (measure == "saved" and r.apart) else r.bytes
            continue
        storages[r.storage] = r.storage_bytes
        if r.apart:
            params.add(r.storage)
    if measure == "saved":  # as compute_totals: a parameter's or a cached copy's storage is not saved memory
        return sum(n for s, n in storages.items() if s not in params) + loose
    return sum(storages.values()) + loose


NOT_ANALYSED = (
    "case {case} was not analysed for reads (its rows carry no read verdicts), so its unread bytes are "
    'unknown, not zero: run it with --unread (or unread = "observed" in the scenario\'s cases, '
    "unread= in the saved_budget marker)"
)


def unread_bytes(rows: Iterable[Any], all_rows: Iterable[Any]) -> int:
    """Device storages of ``rows`` that backward never read (each once at its full size, parameters and
    cached copies excluded), a storage being unread when every row of the case that holds it is (``all_rows``)."""
    unread = set(unread_storages(all_rows))
    storages: dict[str, int] = {}
    params: set[str] = set()
    for r in rows:
        if r.storage is None or r.resides != "device" or r.storage not in unread:
            continue
        storages[r.storage] = r.storage_bytes
        if r.apart:
            params.add(r.storage)
    return sum(n for s, n in storages.items() if s not in params)


def _case_bytes(rule: Rule, case: CaseLike, measure: str) -> tuple[int, list[Any]]:
    """Bytes of the rule's selection (or the case totals when it has none) and the rows behind them."""
    if measure == "unread":
        rows = _selected(rule, case) if rule.select is not None else list(case.rows)
        if rule.select is not None:
            require_rows(rule, case)
        unread = set(unread_storages(case.rows))
        behind = [r for r in rows if r.storage in unread and not r.apart]
        if rule.select is None and case.totals.unread_bytes is not None:
            return case.totals.unread_bytes, behind
        return unread_bytes(rows, case.rows), behind
    if rule.select is None:
        totals = case.totals
        value = {"logical": totals.logical_bytes, "physical": totals.physical_bytes, "saved": totals.saved_bytes}[
            measure
        ]
        rows = [r for r in case.rows if not (measure == "saved" and r.apart)]
        return value, rows
    require_rows(rule, case)
    rows = _selected(rule, case)
    return measure_bytes(rows, measure), rows


def _largest(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (-r.bytes, r.index))


def _buckets(rule: Rule, case: CaseLike, per: str) -> list[tuple[str, list[Any], list[Any]]]:
    """(label, selected rows, other rows of the same operand/group) per bucket."""
    sel = rule.select or Selection()
    ne = nonempty_groups(case)
    rows = _selected(rule, case)
    if per == "case":
        return [("all", rows, [])]
    universe = [r for r in case.rows if sel.matches_operand(r)]
    operands = sorted({r.operand for r in universe}, key=lambda o: (o is None, o or ""))

    def groups_of(candidates: list[Any]) -> list[int | None]:
        if isinstance(sel.group, tuple):
            return list(sel.group)
        if sel.group == "nonempty" and ne is not None:
            return [g for g in sorted(ne)]
        seen = {r.group for r in candidates}
        if sel.group == "nonempty":
            seen.discard(None)
        return sorted(seen, key=lambda g: (g is None, g or 0))

    out = []
    if per == "operand":
        for op in operands:
            mine = [r for r in rows if r.operand == op]
            others = [r for r in universe if r.operand == op and r not in mine]
            out.append((op or "(unlabelled)", mine, others))
    elif per == "group":
        for g in groups_of(universe):
            mine = [r for r in rows if r.group == g]
            others = [r for r in universe if r.group == g and r not in mine]
            out.append((f"group {g}", mine, others))
    else:  # operand,group
        for op in operands:
            op_rows = [r for r in universe if r.operand == op]
            indexed = op is not None and is_indexed(op)
            groups = (
                sorted({r.group for r in op_rows}, key=lambda g: (g is None, g or 0)) if indexed else groups_of(op_rows)
            )
            for g in groups:
                if indexed and isinstance(sel.group, tuple) and g not in sel.group:
                    continue
                if indexed and sel.group == "nonempty" and (g is None or (ne is not None and g not in ne)):
                    continue
                mine = [r for r in rows if r.operand == op and r.group == g]
                others = [r for r in op_rows if r.group == g and r not in mine]
                label = op or "(unlabelled)"
                if g is not None and not indexed:
                    label += f"[{g}]"
                out.append((label, mine, others))
    return out


# ---- one function per check ----------------------------------------------------------------------
def check_count(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """Rows per bucket compared with ``op n``."""
    check = rule.check
    assert isinstance(check, Count)
    if check.needs_rows():
        require_rows(rule, case)
    buckets = _buckets(rule, case, check.per)

    def size(rows: list[Any]) -> int:
        if check.unit == "storages":
            return len({r.storage if r.storage is not None else f"#{r.index}" for r in rows})
        return len(rows)

    counts = [(label, size(mine)) for label, mine, _ in buckets]
    if check.per == "case":
        actual = str(counts[0][1])
    elif not counts:
        actual = f"no {check.per} matched"
    elif len({c for _, c in counts}) == 1:
        actual = f"{counts[0][1]} each ({len(counts)} x {check.per})"
    else:
        actual = ", ".join(f"{label}: {c}" for label, c in counts)
    bad = [(label, mine, others) for label, mine, others in buckets if not check.holds(size(mine))]
    if check.per != "case" and not buckets and check.needs_rows():
        bad = [("(none)", [], [])]
    if not bad:
        return actual, None
    offending: list[Any] = []
    context: list[Any] = []
    for _, mine, others in bad:
        offending.extend(mine)
        if size(mine) < check.n:
            context.extend(others)
    failing = ", ".join(f"{label}: {size(mine)}" for label, mine, _ in bad)
    detail = f"failing: {failing}" if check.per != "case" else ""
    lines = format_rows(offending)
    if context:
        detail += ("\n" if detail else "") + "rows of those operands that the selection did not match:"
        lines += format_rows(context)
    return actual, Violation(
        rule.name,
        rule.expected(),
        actual if check.per == "case" else failing,
        tuple(r.index for r in offending),
        tuple(lines),
        detail,
        rule.selection(),
        rule.kind,
    )


def check_forbid(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """No row may match."""
    rows = _selected(rule, case)
    actual = f"{len(rows)} row" + ("" if len(rows) == 1 else "s")
    if not rows:
        return actual, None
    return actual, Violation(
        rule.name,
        rule.expected(),
        actual,
        tuple(r.index for r in rows),
        tuple(format_rows(rows)),
        "",
        rule.selection(),
        rule.kind,
    )


def check_bytes(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """``max_bytes`` (<=) or ``exact_bytes`` (==) of the totals or of a selection."""
    check = rule.check
    assert isinstance(check, ByteCheck)
    target = rule.byte_target(case)
    if isinstance(check, MaxUnreadBytes) and getattr(case, "unread", None) is None:
        actual = "not analysed"
        return actual, Violation(
            rule.name, rule.expected_for(case), actual, (), (), NOT_ANALYSED.format(case=case.id), rule.selection()
        )
    value, rows = _case_bytes(rule, case, check.measure)
    actual = bytes_text(value)
    if check.holds(value, target):
        return actual, None
    expr = check.expr
    expected = (
        f"{check.op} {bytes_text(target)}" + (f" [{expr.text}]" if not expr.constant else "") + f" ({check.measure})"
    )
    top = _largest(rows)
    detail = f"over by {bytes_text(value - target)}" if value > target else f"under by {bytes_text(target - value)}"
    detail += f"; largest rows ({len(rows)} in all):" if rows else ""
    return actual, Violation(
        rule.name,
        expected,
        actual,
        tuple(r.index for r in top[:MAX_ROW_LINES]),
        tuple(format_rows(top)),
        detail,
        rule.selection(),
        rule.kind,
    )


def check_ratio(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """Bytes of the selection here / the same selection in another case <= max."""
    check = rule.check
    assert isinstance(check, Ratio)
    other = ctx.find_case(case, check) if ctx.find_case is not None else None
    if other is None:
        raise rule.error(
            f"ratio against {check.against_text()}: the report has no such case for {case.id}", subkey=".against"
        )
    if other.status != "ok":
        raise NotApplicable(f"the case it is compared with ({other.id}) is {other.status}")
    num, rows = _case_bytes(rule, case, check.measure)
    den, _ = _case_bytes(rule, other, check.measure)
    if den == 0:
        raise rule.error(f"ratio against {other.id}: that case's selection has 0 bytes", subkey=".against")
    ratio = num / den
    actual = f"{ratio:.3f} ({fmt_bytes(num)} / {fmt_bytes(den)} in {other.id})"
    if ratio <= check.max:
        return actual, None
    top = _largest(rows)
    return actual, Violation(
        rule.name,
        rule.expected(),
        actual,
        tuple(r.index for r in top[:MAX_ROW_LINES]),
        tuple(format_rows(top)),
        "largest rows here:",
        rule.selection(),
        rule.kind,
    )


def check_path(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """The fused op ran (``fused``) or did not (``unfused``)."""
    check = rule.check
    assert isinstance(check, PathCheck)
    path = case.path
    if path is None or path.fused is None:
        raise rule.error(
            f"path = {check.expected()!r} cannot apply: case {case.id} records no path (no 'fused' flag; the target "
            "reports none)",
            subkey=".path",
        )
    actual = "fused" if path.fused else "unfused"
    if path.fused == check.fused:
        return actual, None
    detail = registry.path_detail(case) if isinstance(case, CaseReport) else ""
    return actual, Violation(rule.name, check.expected(), actual, (), (), detail, kind=rule.kind)


CHECK_FUNCTIONS: dict[type, Callable[[Rule, CaseLike, Context], tuple[str, Violation | None]]] = {
    Count: check_count,
    Forbid: check_forbid,
    MaxBytes: check_bytes,
    ExactBytes: check_bytes,
    MaxUnreadBytes: check_bytes,
    Ratio: check_ratio,
    PathCheck: check_path,
}
