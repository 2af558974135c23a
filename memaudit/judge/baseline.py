"""Baselines and the regression gate: compare two reports, refresh a baseline.

Saved bytes are deterministic functions of shapes, recipe and TE version, so the gate is exact by
default (tolerance 0). Pure logic: nothing here prints, reads files or imports torch.

What counts as a failure (``fail_on="increase"``, the default):

* a case in both reports, ``ok`` in both, whose ``saved_bytes`` grew beyond the tolerance; or
  whose bytes for one operand, one kind or one orientation grew beyond it (so a single buffer that
  grows by one byte is caught and named); or whose row count grew (counts are checked exactly
  under a byte tolerance of 0, against the same fraction under a percent tolerance, and not at all
  under a non-zero byte tolerance);
* a status change ``ok -> error``, ``ok -> skipped`` or ``skipped -> error``;
* a case new in the current report that ended in ``error``;
* ``path.fused`` going from true to false (the fused kernel stopped being used), or recorded in
  one report only where that could hide it (the current case records none, or the baseline
  records none and the current case is unfused);
* an environment difference, only under ``strict_env``;
* ``cached_bytes`` (copies a module keeps across steps, such as TE's cached FP8 weights) is not
  gated, as parameters are not: a change is a note (failing only under ``fail_on="change"``);
* ``unread_bytes`` (bytes saved for backward that backward never read, ``run --unread``) grown
  beyond the tolerance; or recorded in one report only where that could hide growth: the
  baseline has it and the current case does not (it was run without ``--unread``), or the
  baseline was not analysed and the current case has unread bytes (refresh the baseline with
  ``--unread``). A current case with nothing unread over an unanalysed baseline is a note.

A case that the baseline has and the current report lacks is listed but is not a failure: it
usually means the scenario was narrowed or filtered, which is reviewed in the scenario's diff, not a
memory regression. ``fail_on="change"`` makes it a failure, together with every other change beyond
the tolerance in either direction (decreases, new cases, status and fused-path changes).

Byte metrics count rows that are neither parameters nor cached copies (what ``saved_bytes``
counts), logical bytes, each duplicate once. A percent tolerance is taken of the case's baseline
``saved_bytes``, for every byte metric of that case, so a new 100-byte buffer in a 1 GiB case passes under ``0.5%``.

Why one file of about 600 lines: the comparison model (findings, per-case diffs), the byte
metrics it compares and the baseline refresh share one notion of "the same buffer across runs"
(:func:`row_key`) and one tolerance; split, each half would need the other's internals.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from memaudit.environment import libraries
from memaudit.errors import UsageError, clip
from memaudit.ranks import base_id, storage_breakdown
from memaudit.report import CaseReport, Report, Row
from memaudit.units import fmt_bytes, fmt_delta, parse_bytes

FAIL_ON = ("increase", "change")

WORSE = "worse"
BETTER = "better"
NEUTRAL = "neutral"

# Environment keys whose difference can change saved bytes, with the words used to name them.
ENV_KEYS = (
    *((lib.key, f"{lib.name} version") for lib in libraries()),
    ("device_class", "device class"),
    ("torch", "torch version"),
)

_PCT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


# --------------------------------------------------------------------------------------------
# Tolerance


@dataclass(frozen=True)
class Tolerance:
    """An absolute byte tolerance or a fraction of the case's baseline saved bytes."""

    bytes: int = 0
    fraction: float | None = None

    @property
    def exact(self) -> bool:
        """True for the default: no growth at all is allowed."""
        return (self.fraction or 0) == 0 and self.bytes == 0

    def allowed(self, reference: int) -> int:
        """Bytes of growth allowed for a case whose baseline saved bytes are ``reference``."""
        if self.fraction is not None:
            return math.floor(self.fraction * max(reference, 0))
        return self.bytes

    def allowed_rows(self, reference: int) -> int | None:
        """Rows of growth allowed; None when row counts are not gated (non-zero byte tolerance)."""
        if self.fraction is not None:
            return math.floor(self.fraction * max(reference, 0))
        return 0 if self.bytes == 0 else None

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"{self.fraction * 100:g}%"
        return "0 (exact)" if self.bytes == 0 else fmt_bytes(self.bytes)


def parse_tolerance(value: str | int | Tolerance) -> Tolerance:
    """Parse ``0``, ``4096``, ``"1 MiB"`` or ``"0.5%"``. Raises UsageError(key="--tolerance")."""
    if isinstance(value, Tolerance):
        return value
    if isinstance(value, str):
        m = _PCT.match(value)
        if m:
            pct = float(m.group(1))
            if pct >= 100:
                raise UsageError(f"a percent tolerance must be below 100%, got {value!r}", key="--tolerance")
            return Tolerance(fraction=pct / 100)
        if value.strip().startswith("-"):
            raise UsageError(f"tolerance must be >= 0, got {value!r}", key="--tolerance")
    return Tolerance(bytes=parse_bytes(value, key="--tolerance"))


# --------------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class Finding:
    """One compared quantity of one case that differs between baseline and current.

    ``metric`` is ``saved_bytes``, ``operand``, ``kind``, ``orientation``, ``rows`` (numbers) or
    ``status``, ``path.fused``, ``case``, ``complete`` (events). ``direction`` says whether it is worse, better
    or neither; ``failing`` whether it fails the gate.
    """

    case: str
    metric: str
    key: str | None
    baseline: Any
    current: Any
    direction: str
    failing: bool
    text: str

    @property
    def numeric(self) -> bool:
        return isinstance(self.baseline, int) and isinstance(self.current, int) and not isinstance(self.baseline, bool)

    @property
    def delta(self) -> int | None:
        return self.current - self.baseline if self.numeric else None

    @property
    def pct(self) -> float | None:
        """Delta in percent of the baseline; None for events and from-zero growth."""
        if not self.numeric or self.baseline == 0:
            return None
        return 100.0 * (self.current - self.baseline) / self.baseline

    @property
    def is_bytes(self) -> bool:
        return self.metric in (
            "saved_bytes",
            "cached_bytes",
            "unread_bytes",
            "operand",
            "kind",
            "orientation",
            "worst_rank",
        )

    @property
    def verdict(self) -> str:
        """regression | changed | improvement | within tolerance | note."""
        if self.failing:
            return "regression" if self.direction == WORSE else "changed"
        if self.direction == BETTER:
            return "improvement"
        if self.direction == WORSE:
            return "within tolerance"
        return "note"

    @property
    def label(self) -> str:
        """Short name of what was compared, e.g. ``operand fc1.input``."""
        return self.metric if self.key is None else f"{self.metric} {self.key}"

    def message(self) -> str:
        return f"{self.case}: {self.text}"


@dataclass
class RowDiff:
    """One buffer that differs: matched by operand, kind, orientation and format."""

    key: str
    baseline: Row | None
    current: Row | None

    @property
    def delta(self) -> int:
        return (self.current.bytes if self.current else 0) - (self.baseline.bytes if self.baseline else 0)


@dataclass
class CaseDiff:
    """The comparison of one case id."""

    id: str
    baseline: CaseReport | None
    current: CaseReport | None
    findings: list[Finding] = field(default_factory=list)
    row_diffs: list[RowDiff] = field(default_factory=list)

    @property
    def state(self) -> str:
        """``both``, ``new`` (current only) or ``missing`` (baseline only)."""
        if self.baseline is None:
            return "new"
        return "missing" if self.current is None else "both"

    @property
    def comparable(self) -> bool:
        """Both sides measured (status ok), so byte deltas mean something."""
        return (
            self.baseline is not None
            and self.current is not None
            and self.baseline.status == "ok"
            and self.current.status == "ok"
        )

    @property
    def saved_delta(self) -> int | None:
        if not self.comparable:
            return None
        assert self.baseline is not None and self.current is not None
        return self.current.totals.saved_bytes - self.baseline.totals.saved_bytes

    @property
    def regressed(self) -> bool:
        return any(f.failing for f in self.findings)

    @property
    def changed(self) -> bool:
        return bool(self.findings)

    @property
    def target(self) -> str:
        c = self.current or self.baseline
        assert c is not None
        return c.target

    @property
    def recipe(self) -> str:
        c = self.current or self.baseline
        assert c is not None
        return c.recipe


@dataclass
class Comparison:
    """The result of :func:`compare_reports`."""

    cases: list[CaseDiff]
    env_warnings: list[str]
    tolerance: Tolerance
    fail_on: str
    strict_env: bool

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.cases for f in c.findings]

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.failing]

    @property
    def improvements(self) -> list[Finding]:
        return [f for f in self.findings if f.direction == BETTER]

    @property
    def env_failed(self) -> bool:
        return self.strict_env and bool(self.env_warnings)

    @property
    def nothing_compared(self) -> bool:
        """No case was ok in both reports: a gate that compared nothing does not pass."""
        return not self.compared

    @property
    def regressed(self) -> bool:
        return self.env_failed or bool(self.failures) or self.nothing_compared

    @property
    def compared(self) -> list[CaseDiff]:
        return [c for c in self.cases if c.comparable]

    @property
    def baseline_saved(self) -> int:
        """Baseline saved bytes over the cases ok in both reports."""
        return sum(c.baseline.totals.saved_bytes for c in self.compared if c.baseline)

    @property
    def current_saved(self) -> int:
        """Current saved bytes over the cases ok in both reports."""
        return sum(c.current.totals.saved_bytes for c in self.compared if c.current)

    @property
    def saved_delta(self) -> int:
        return self.current_saved - self.baseline_saved

    def case(self, case_id: str) -> CaseDiff | None:
        return next((c for c in self.cases if c.id == case_id), None)


# --------------------------------------------------------------------------------------------
# Environment


def env_differences(baseline_env: dict[str, Any], current_env: dict[str, Any]) -> list[str]:
    """Name each difference that can change saved bytes: TE version, device class, torch version."""
    out = []
    for key, words in ENV_KEYS:
        a, b = _env_value(baseline_env, key), _env_value(current_env, key)
        if a != b:
            out.append(f"{words} differs: baseline {_env_text(a, key)}, current {_env_text(b, key)}")
    return out


def _env_value(env: dict[str, Any], key: str) -> Any:
    if key == "device_class":
        return env.get("device_class") or env.get("device")
    return env.get(key)


def _env_text(v: Any, key: str) -> str:
    if v is None:
        return "not installed" if key in {lib.key for lib in libraries()} else "unknown"
    return str(v).upper() if key == "device_class" and str(v).lower().startswith("sm") else str(v)


# --------------------------------------------------------------------------------------------
# Comparison


def compare_reports(
    baseline: Report,
    current: Report,
    *,
    tolerance: str | int | Tolerance = 0,
    fail_on: str = "increase",
    strict_env: bool = False,
    allow_incomplete: bool = False,
    allow_emulated: bool = False,
    allow_missing: bool = False,
) -> Comparison:
    """Compare ``current`` against ``baseline`` case by case (matched by id).

    A case memaudit marked incomplete (in either report) fails unless ``allow_incomplete``: its
    saved bytes are a partial count, so "no growth" would mean nothing. An emulated case matched
    with a measured one is a UsageError unless ``allow_emulated`` (then an environment warning):
    stand-in kernels on an emulated machine are not the same evidence as a measurement. A baseline
    case missing from the current report fails unless ``allow_missing``, and a comparison in which
    no case was ok in both reports fails (``Comparison.nothing_compared``).
    """
    tol = parse_tolerance(tolerance)
    if fail_on not in FAIL_ON:
        raise UsageError(f"expected one of {', '.join(FAIL_ON)}, got {fail_on!r}", key="--fail-on")
    base_cases = _by_id(baseline, "baseline")
    cur_cases = _by_id(current, "current")
    strict = fail_on == "change"
    mixed = [cid for cid, cur in cur_cases.items() if cid in base_cases and base_cases[cid].execution != cur.execution]
    mixed_warnings = []
    if mixed:
        first = mixed[0]
        what = (
            f"{len(mixed)} case(s) are emulated in one report and measured in the other "
            f"(first: {first}, baseline {base_cases[first].execution}, current {cur_cases[first].execution})"
        )
        if not allow_emulated:
            raise UsageError(f"{what}; pass --allow-emulated to compare them anyway", key="cases")
        mixed_warnings.append(what)

    diffs: list[CaseDiff] = []
    for cid, cur in cur_cases.items():
        diffs.append(_compare_case(cid, base_cases.get(cid), cur, tol, strict))
        if not allow_incomplete:
            _flag_incomplete(diffs[-1], base_cases.get(cid), cur)
    for cid, base in base_cases.items():
        if cid not in cur_cases:
            diffs.append(_compare_case(cid, base, None, tol, strict or not allow_missing))
    _compare_worst_ranks(diffs, baseline.cases, current.cases, tol, strict)
    return Comparison(
        cases=diffs,
        env_warnings=mixed_warnings + env_differences(baseline.environment, current.environment),
        tolerance=tol,
        fail_on=fail_on,
        strict_env=strict_env,
    )


def _by_id(report: Report, which: str) -> dict[str, CaseReport]:
    out: dict[str, CaseReport] = {}
    for c in report.cases:
        if c.id in out:
            raise UsageError(f"the {which} report has case id {c.id!r} twice; ids must be unique", key="cases")
        out[c.id] = c
    return out


def _status_text(c: CaseReport) -> str:
    return f"{c.status} ({clip(c.reason)})" if c.reason and c.status != "ok" else c.status


def _compare_case(cid: str, base: CaseReport | None, cur: CaseReport | None, tol: Tolerance, strict: bool) -> CaseDiff:
    diff = CaseDiff(cid, base, cur)
    add = diff.findings.append
    if base is None:
        assert cur is not None
        worse = cur.status == "error"
        text = f"new case with status {_status_text(cur)}"
        if cur.status == "ok":
            text += f", saved {fmt_bytes(cur.totals.saved_bytes)}"
        add(Finding(cid, "case", None, None, "new", WORSE if worse else NEUTRAL, worse or strict, text))
        return diff
    if cur is None:
        text = "missing: in the baseline but not in the current report"
        add(Finding(cid, "case", None, "present", None, NEUTRAL, strict, text))
        return diff

    if base.status != cur.status:
        direction = _status_direction(base.status, cur.status)
        text = f"status {_status_text(base)} -> {_status_text(cur)}"
        add(Finding(cid, "status", None, base.status, cur.status, direction, direction == WORSE or strict, text))
    elif base.status == "error" and base.reason != cur.reason:
        add(
            Finding(
                cid,
                "status",
                "reason",
                base.reason,
                cur.reason,
                NEUTRAL,
                False,
                f"still error, reason changed: {clip(cur.reason or '')}",
            )
        )

    bf, cf = base.fused, cur.fused
    if bf is not None and cf is not None and bf != cf:
        direction = WORSE if bf and not cf else BETTER
        text = (
            "fused path no longer used (path.fused true -> false)"
            if bf
            else "fused path now used (path.fused false -> true)"
        )
        add(Finding(cid, "path.fused", None, bf, cf, direction, direction == WORSE or strict, text))
    elif (bf is None) != (cf is None) and base.status == cur.status == "ok":
        # one side records whether the fused kernel ran and the other does not: a path the gate cannot
        # compare is a finding, failing where it could hide true -> false
        which = "the current case" if cf is None else "the baseline case"
        worse = cf is None or cf is False
        text = (
            f"path.fused is recorded in one report only ({which} has none; baseline {_flag(bf)}, current {_flag(cf)}): "
            "the fused path cannot be compared"
        )
        add(Finding(cid, "path.fused", None, bf, cf, WORSE if worse else NEUTRAL, worse or strict, text))

    if base.status == "ok" and cur.status == "ok":
        _compare_bytes(diff, base, cur, tol, strict)
    return diff


def _worst_ranks(cases: Iterable[CaseReport]) -> dict[str, CaseReport]:
    """Per distributed case (its id without the rank's coordinates): the worst rank's case (most
    saved bytes, lowest rank on a tie), where every rank of its world is there and ok."""

    by: dict[str, list[CaseReport]] = defaultdict(list)
    for c in cases:
        if c.dist is not None:
            by[base_id(c.id, c.dist) or c.id].append(c)
    out = {}
    for base, cs in by.items():
        world = cs[0].dist.world_size if cs[0].dist is not None else 0
        if len({c.dist.rank for c in cs if c.dist is not None}) == world and all(c.status == "ok" for c in cs):
            out[base] = max(sorted(cs, key=lambda c: c.dist.rank if c.dist else 0), key=lambda c: c.totals.saved_bytes)
    return out


def _compare_worst_ranks(
    diffs: list[CaseDiff], base: Iterable[CaseReport], cur: Iterable[CaseReport], tol: Tolerance, strict: bool
) -> None:
    """The gate on the worst rank: per distributed case, the worst rank's saved bytes now against the
    baseline's worst rank (whichever rank that was), beyond the tolerance. The finding goes to the
    current worst rank's case."""
    bw, cw = _worst_ranks(base), _worst_ranks(cur)
    for key, c in cw.items():
        b = bw.get(key)
        if b is None or b.totals.saved_bytes == c.totals.saved_bytes:
            continue
        before, after = b.totals.saved_bytes, c.totals.saved_bytes
        d = after - before
        failing = abs(d) > tol.allowed(before) and (d > 0 or strict)
        assert b.dist is not None and c.dist is not None
        text = (
            f"worst rank {'grew' if d > 0 else 'shrank'} by {fmt_bytes(abs(d))} ({b.dist.label()} {fmt_bytes(before)} "
            "-> "
            f"{c.dist.label()} {fmt_bytes(after)}; {d:+d} B) over {c.dist.world_size} ranks"
        )
        diff = next((x for x in diffs if x.id == c.id), None)
        if diff is not None:
            diff.findings.append(
                Finding(c.id, "worst_rank", None, before, after, WORSE if d > 0 else BETTER, failing, text)
            )


def _flag(v: bool | None) -> str:
    return "none" if v is None else str(v).lower()


def _flag_incomplete(diff: CaseDiff, base: CaseReport | None, cur: CaseReport) -> None:
    for which, case in (("baseline", base), ("current", cur)):
        if case is not None and case.status == "ok" and not case.complete:
            first = case.warnings[0] if case.warnings else "see its warnings"
            text = (
                f"the {which} case is incomplete: memaudit did not see everything it keeps ({first}); "
                "--allow-incomplete compares it anyway"
            )
            diff.findings.append(Finding(diff.id, "complete", which, True, False, WORSE, True, text))


def _status_direction(before: str, after: str) -> str:
    rank = {"ok": 0, "skipped": 1, "error": 2}
    if before == "error" and after == "skipped":
        return NEUTRAL
    return WORSE if rank.get(after, 2) > rank.get(before, 2) else BETTER


def _compare_bytes(diff: CaseDiff, base: CaseReport, cur: CaseReport, tol: Tolerance, strict: bool) -> None:
    cid = diff.id
    ref = base.totals.saved_bytes
    allowed = tol.allowed(ref)

    def number(metric: str, key: str | None, b: int, c: int, limit: int | None, unit: str) -> None:
        if b == c:
            return
        d = c - b
        beyond = limit is not None and abs(d) > limit
        direction = WORSE if d > 0 else BETTER
        failing = beyond and (d > 0 or strict)
        what = metric if key is None else f"{metric} {key}"
        if unit == "bytes":
            verb = "grew" if d > 0 else "shrank"
            text = f"{what} {verb} by {fmt_bytes(abs(d))} ({fmt_bytes(b)} -> {fmt_bytes(c)}; {d:+d} B)"
        else:
            text = f"{what} {b} -> {c} ({d:+d})"
        diff.findings.append(Finding(cid, metric, key, b, c, direction, failing, text))

    number("saved_bytes", None, ref, cur.totals.saved_bytes, allowed, "bytes")
    _compare_cached(diff, base, cur, allowed, strict)
    _compare_unread(diff, base, cur, allowed, strict, number)
    rows_allowed = tol.allowed_rows(base.totals.rows or len(base.rows))
    for metric, fn in (("operand", _operand_key), ("kind", _kind_key), ("orientation", _orientation_key)):
        bm, cm = breakdown(base.rows, fn), breakdown(cur.rows, fn)
        bn, cn = _counts(base.rows, fn), _counts(cur.rows, fn)
        for key in _ordered_keys({**bm, **bn}, {**cm, **cn}):
            if bm.get(key, 0) != cm.get(key, 0):
                number(metric, key, bm.get(key, 0), cm.get(key, 0), allowed, "bytes")
            else:  # same bytes, other buffers (a container saved whole, a 0-byte view): the rows say so
                number(metric, f"{key} rows", bn.get(key, 0), cn.get(key, 0), rows_allowed, "count")
    number(
        "rows",
        None,
        base.totals.rows or len(base.rows),
        cur.totals.rows or len(cur.rows),
        tol.allowed_rows(base.totals.rows or len(base.rows)),
        "count",
    )
    diff.row_diffs = row_diffs(base.rows, cur.rows)


def _compare_cached(diff: CaseDiff, base: CaseReport, cur: CaseReport, allowed: int, strict: bool) -> None:
    """``cached_bytes`` (copies a module keeps across steps, counted apart as parameters are) is shown,
    not gated: a change is a note, failing only under ``fail_on="change"`` beyond the tolerance. Bytes
    that move between ``saved_bytes`` and it show in both."""
    b, c = base.totals.cached_bytes, cur.totals.cached_bytes
    if b == c:
        return
    d = c - b
    text = (
        f"cached_bytes {'grew' if d > 0 else 'shrank'} by {fmt_bytes(abs(d))} ({fmt_bytes(b)} -> {fmt_bytes(c)}; "
        f"{d:+d} B): copies a module keeps across steps, not in saved_bytes"
    )
    diff.findings.append(Finding(diff.id, "cached_bytes", None, b, c, NEUTRAL, strict and abs(d) > allowed, text))


def _unread_of(c: CaseReport) -> int | None:
    """A case's unread bytes: None where it was not analysed (an analysed case with no rows: 0)."""
    if c.unread is None:
        return None
    return c.totals.unread_bytes or 0


def _compare_unread(diff: CaseDiff, base: CaseReport, cur: CaseReport, allowed: int, strict: bool, number: Any) -> None:
    """Gate ``unread_bytes`` as ``saved_bytes`` is gated; one side analysed and the other not is a
    finding, never a silent pass (failing where it could hide growth)."""
    b, c = _unread_of(base), _unread_of(cur)
    if b is not None and c is not None:
        number("unread_bytes", None, b, c, allowed, "bytes")
        return
    if b is None and c is None:
        return
    if c is None:
        text = (
            f"unread_bytes not analysed in the current case (the baseline has {fmt_bytes(b or 0)} never read): "
            "run it with --unread, or the gate cannot tell whether it grew"
        )
        diff.findings.append(Finding(diff.id, "unread_bytes", None, b, None, WORSE, True, text))
        return
    worse = c > 0
    text = f"unread_bytes {fmt_bytes(c)} in the current case, but the baseline was not analysed: " + (
        "the gate cannot tell whether it grew; refresh the baseline with --unread"
        if worse
        else "nothing unread now, so nothing could have grown; refresh the baseline with --unread to gate it"
    )
    diff.findings.append(
        Finding(diff.id, "unread_bytes", None, None, c, WORSE if worse else NEUTRAL, worse or strict, text)
    )


# --------------------------------------------------------------------------------------------
# Breakdowns and row matching


def _operand_key(r: Row) -> str | None:
    return r.operand or r.slot or f"row {r.index}"


def _kind_key(r: Row) -> str | None:
    return r.kind


def _orientation_key(r: Row) -> str | None:
    return r.orientation


def counted_rows(rows: Iterable[Row]) -> list[Row]:
    """Rows that hold saved memory: not parameters, not cached copies, not duplicates of an earlier row."""
    return [r for r in rows if not r.apart and r.duplicate_of is None]


def _counts(rows: Iterable[Row], key_fn: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in counted_rows(rows):
        k = key_fn(r)
        if k is not None:
            out[k] = out.get(k, 0) + 1
    return out


def breakdown(rows: Iterable[Row], key_fn: Any) -> dict[str, int]:
    """Logical bytes of the counted rows per key (rows whose key is None are left out)."""
    out: dict[str, int] = defaultdict(int)
    for r in counted_rows(rows):
        k = key_fn(r)
        if k is not None:
            out[k] += r.bytes
    return dict(out)


def kind_breakdown(case: CaseReport) -> dict[str, int]:
    """Bytes per kind of a case, counted by storage as ``saved_bytes`` is (they add up to it),
    non-zero kinds only."""
    return {k: v for k, v in storage_breakdown(case.rows, _kind_key).items() if v}


def _ordered_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return list(a) + [k for k in b if k not in a]


def row_key(r: Row) -> str:
    """What identifies a buffer across runs, e.g. ``fc1.input data columnwise fp8``."""
    parts = [_operand_key(r) or "", r.kind]
    if r.orientation:
        parts.append(r.orientation)
    parts.append(r.format)
    if r.is_parameter:
        parts.append("(parameter)")
    return " ".join(parts)


def row_diffs(base: list[Row], cur: list[Row]) -> list[RowDiff]:
    """Buffers that were added, removed, or differ in shape, dtype, bytes or storage size."""

    def keyed(rows: list[Row]) -> dict[str, Row]:
        seen: Counter[str] = Counter()
        out = {}
        for r in rows:
            k = row_key(r)
            seen[k] += 1
            out[k if seen[k] == 1 else f"{k} #{seen[k]}"] = r
        return out

    bk, ck = keyed(base), keyed(cur)
    out = []
    for k in _ordered_keys(bk, ck):
        b, c = bk.get(k), ck.get(k)
        if b is None or c is None or _row_sig(b) != _row_sig(c):
            out.append(RowDiff(k, b, c))
    return out


def _row_sig(r: Row) -> tuple[Any, ...]:
    return (list(r.shape), r.dtype, r.bytes, r.storage_bytes, r.duplicate_of is not None)


# --------------------------------------------------------------------------------------------
# Baseline refresh


@dataclass(frozen=True)
class BaselineChange:
    """What :func:`update_baseline` did to one case: added, updated, unchanged, kept or removed."""

    case: str
    action: str
    before: int | None = None
    after: int | None = None
    note: str | None = None

    def text(self) -> str:
        if self.action == "updated" and self.before is not None and self.after is not None:
            s = (
                f"updated {self.case}: saved {fmt_bytes(self.before)} -> {fmt_bytes(self.after)} "
                f"({fmt_delta(self.after - self.before)})"
            )
        elif self.action == "added" and self.after is not None:
            s = f"added {self.case}: saved {fmt_bytes(self.after)}"
        else:
            s = f"{self.action} {self.case}"
        return f"{s}; {self.note}" if self.note else s


def _saved_or_none(c: CaseReport) -> int | None:
    return c.totals.saved_bytes if c.status == "ok" else None


def update_baseline(
    current: Report, existing: Report | None, prune: bool = False
) -> tuple[Report, list[BaselineChange]]:
    """Merge ``current`` into ``existing``: current cases replace theirs, new ones are appended.

    Cases only the existing baseline has are kept unless ``prune``. The case order of the existing
    baseline is kept, so the baseline file's diff shows only what changed. The environment is the
    current report's.
    """
    cur = _by_id(current, "current")
    changes: list[BaselineChange] = []
    cases: list[CaseReport] = []
    old = _by_id(existing, "baseline") if existing is not None else {}
    for cid, b in old.items():
        c = cur.get(cid)
        if c is None:
            if prune:
                changes.append(
                    BaselineChange(cid, "removed", _saved_or_none(b), None, "not in the current report (--prune)")
                )
            else:
                cases.append(b)
                changes.append(
                    BaselineChange(cid, "kept", _saved_or_none(b), _saved_or_none(b), "not in the current report")
                )
            continue
        cases.append(c)
        bd, cd = b.to_dict(), c.to_dict()
        if bd == cd:
            changes.append(BaselineChange(cid, "unchanged", _saved_or_none(b), _saved_or_none(c)))
            continue
        note = "changed: " + ", ".join(k for k in cd if bd.get(k) != cd[k])
        if b.status != c.status:
            note = f"status {_status_text(b)} -> {_status_text(c)}"
            if c.status != "ok":
                note += f"; the gate will now expect {c.status}"
        changes.append(BaselineChange(cid, "updated", _saved_or_none(b), _saved_or_none(c), note))
    for cid, c in cur.items():
        if cid not in old:
            cases.append(c)
            added = None if c.status == "ok" else _status_text(c)
            changes.append(BaselineChange(cid, "added", None, _saved_or_none(c), added))
    merged = Report(
        cases=cases,
        environment=dict(current.environment),
        memaudit=current.memaudit,
        created=current.created,
    )
    return merged, changes
