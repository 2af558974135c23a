"""Budgets: declarative rules over a case's saved rows, and the verdicts they yield.

Each check is a small function that returns ``None`` or a :class:`Violation` that carries its own
human-readable text (the pytest-memray pattern); :func:`evaluate_rule` wraps that into a
:class:`Verdict` (``pass``, ``fail``, ``xfail``, ``XPASS`` or ``n/a``). Parsing rules from TOML
or marker arguments lives in :mod:`memaudit.judge.scenario`; nothing here imports torch or TE.

A rule that points at nothing (its operand pattern matches no row of an ok case, a ratio whose
other case is missing, a path rule on a case without path info) raises :class:`UsageError`:
that is bad input (exit 2), not a failed budget.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memaudit.errors import UsageError
from memaudit.units import fmt_bytes, parse_bytes

VERDICTS = ("pass", "fail", "xfail", "XPASS", "n/a")
CHECKS = ("count", "forbid", "max_bytes", "exact_bytes", "ratio", "path")
COUNT_OPS = ("==", "<=", ">=")
COUNT_UNITS = ("rows", "storages")
PER = ("case", "operand", "group", "operand,group")
MEASURES = ("logical", "physical", "saved")
VARIABLES = ("tokens", "hidden", "ffn", "groups", "elt")
ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_ROW_LINES = 12

_INDEXED = re.compile(r"\[(\d+)\]$")
_MISSING = object()


# ---- rows ------------------------------------------------------------------------------------------
class RowLike(Protocol):
    """What the engine reads from a row (memaudit.report.Row satisfies it)."""

    index: int
    operand: str | None
    group: int | None
    kind: str
    format: str
    orientation: str | None
    container: str | None
    container_index: int | None
    slot: str | None
    shape: list[int]
    dtype: str
    bytes: int
    storage: str | None
    storage_bytes: int
    is_parameter: bool
    duplicate_of: int | None

    def notes(self) -> list[str]: ...


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def row_name(row: RowLike) -> str:
    """``fc1.input[3]`` for a grouped row; weights already carry their index in the operand."""
    name = row.operand or "?"
    if row.group is not None and not _INDEXED.search(name):
        name += f"[{row.group}]"
    return name


def format_row(row: RowLike) -> str:
    """One line per saved buffer, JAX ``print_saved_residuals`` style plus the role.

    ``#7  fc1.input[2]  fp8  data  columnwise  (1024, 512)  uint8  512.0 KiB  [Float8TensorStorage._transpose]``
    """
    parts = [
        f"#{row.index}",
        row_name(row),
        row.format,
        row.kind,
        row.orientation or "-",
        _shape(row.shape),
        str(row.dtype).removeprefix("torch."),
        fmt_bytes(row.bytes),
    ]
    extras = []
    where = ".".join(p for p in (row.container, row.slot) if p)
    op = getattr(row, "op", None)
    if where or op:
        extras.append(" ".join(p for p in (where, f"by {op}" if op else "") if p))
    extras += row.notes()
    return "  ".join(parts) + (f"  [{', '.join(extras)}]" if extras else "")


def format_rows(rows: Sequence[RowLike], limit: int = MAX_ROW_LINES) -> list[str]:
    """Formatted lines for up to ``limit`` rows, then a '... and N more' line."""
    lines = [format_row(r) for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return lines


# ---- case protocol -----------------------------------------------------------------------------
class CaseLike(Protocol):
    """What the engine reads from a case (memaudit.report.CaseReport satisfies it)."""

    id: str
    status: str
    reason: str | None
    recipe: str
    groups: int
    tokens: int
    hidden: int
    ffn: int
    dtype: str
    splits: list[int]
    path: dict[str, Any] | None
    rows: list[Any]
    totals: Any


# ---- byte expressions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ByteExpr:
    """A byte quantity: ``"136 MiB"``, ``4096``, or a sum of products of quantities and case
    variables (``tokens``, ``hidden``, ``ffn``, ``groups``, ``elt``): ``"tokens * hidden * elt"``."""

    text: str
    terms: tuple[tuple[int | str, ...], ...]

    @classmethod
    def parse(cls, value: Any, *, source: str | None = None, key: str | None = None) -> ByteExpr:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UsageError(f"expected a byte quantity such as '136 MiB' or 4096, got {value!r}", source=source, key=key)
        if isinstance(value, int):
            if value < 0:
                raise UsageError(f"byte quantity must be >= 0, got {value}", source=source, key=key)
            return cls(str(value), ((value,),))
        terms = []
        for product in value.split("+"):
            factors: list[int | str] = []
            for part in product.split("*"):
                part = part.strip()
                if re.fullmatch(r"[A-Za-z_]\w*", part):
                    if part not in VARIABLES:
                        raise UsageError(
                            f"unknown variable {part!r} in {value!r}{_did_you_mean(part, VARIABLES)}; "
                            f"variables are {', '.join(VARIABLES)}",
                            source=source,
                            key=key,
                        )
                    factors.append(part)
                elif not part:
                    raise UsageError(f"malformed byte expression {value!r} (empty term)", source=source, key=key)
                else:
                    factors.append(parse_bytes(part, source=source, key=key))
            terms.append(tuple(factors))
        return cls(value, tuple(terms))

    @property
    def constant(self) -> bool:
        return all(isinstance(f, int) for t in self.terms for f in t)

    def value(self, case: CaseLike, *, source: str | None = None, key: str | None = None) -> int:
        """The quantity for ``case``; a variable the case cannot supply is a UsageError."""
        total = 0
        for term in self.terms:
            v = 1
            for f in term:
                v *= f if isinstance(f, int) else _variable(case, f, self.text, source, key)
            total += v
        return total


def _variable(case: CaseLike, name: str, text: str, source: str | None, key: str | None) -> int:
    if name == "elt":
        size = ELEMENT_SIZE.get(getattr(case, "dtype", ""))
        if size is None:
            raise UsageError(f"{text!r}: case {case.id} has dtype {case.dtype!r}, so 'elt' is unknown", source=source, key=key)
        return size
    value = getattr(case, name, None)
    if not isinstance(value, int) or value < 1:
        raise UsageError(f"{text!r}: case {case.id} has no {name} (got {value!r})", source=source, key=key)
    return value


# ---- selections ----------------------------------------------------------------------------------
def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` are wildcards; everything else (brackets too) is literal."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + r"\Z")


def operand_matches(pattern: str, operand: str | None) -> bool:
    """A pattern matches the operand or its base (``fc1.weight`` matches ``fc1.weight[2]``)."""
    name = operand or ""
    rx = _glob(pattern)
    return bool(rx.match(name) or rx.match(_INDEXED.sub("", name)))


@dataclass(frozen=True)
class Selection:
    """Which rows a rule looks at. Every given field must match; a tuple means any of its values.

    ``group`` is a tuple of group indices or ``"nonempty"`` (groups whose split has tokens).
    ``orientation`` may contain ``"none"`` for rows without one.
    """

    operand: tuple[str, ...] | None = None
    kind: tuple[str, ...] | None = None
    orientation: tuple[str, ...] | None = None
    format: tuple[str, ...] | None = None
    container: tuple[str, ...] | None = None
    slot: tuple[str, ...] | None = None
    group: tuple[int, ...] | str | None = None
    is_parameter: bool | None = None
    duplicate: bool | None = None

    def matches_operand(self, row: RowLike) -> bool:
        return self.operand is None or any(operand_matches(p, row.operand) for p in self.operand)

    def matches(self, row: RowLike, nonempty: frozenset[int] | None = None) -> bool:
        if not self.matches_operand(row):
            return False
        if self.kind is not None and row.kind not in self.kind:
            return False
        if self.orientation is not None and (row.orientation or "none") not in self.orientation:
            return False
        if self.format is not None and not any(_glob(p).match(row.format or "") for p in self.format):
            return False
        if self.container is not None and not any(_glob(p).match(row.container or "") for p in self.container):
            return False
        if self.slot is not None and not any(_glob(p).match(row.slot or "") for p in self.slot):
            return False
        if self.is_parameter is not None and bool(row.is_parameter) != self.is_parameter:
            return False
        if self.duplicate is not None and (row.duplicate_of is not None) != self.duplicate:
            return False
        if self.group == "nonempty":
            if row.group is None or (nonempty is not None and row.group not in nonempty):
                return False
        elif self.group is not None and row.group not in self.group:
            return False
        return True

    def describe(self) -> str:
        parts = []
        for name in ("operand", "kind", "orientation", "format", "container", "slot", "group"):
            v = getattr(self, name)
            if v is None:
                continue
            parts.append(f"{name}={v if isinstance(v, str) else '|'.join(map(str, v))}")
        if self.is_parameter is not None:
            parts.append(f"is_parameter={str(self.is_parameter).lower()}")
        if self.duplicate is not None:
            parts.append(f"duplicate={str(self.duplicate).lower()}")
        return ", ".join(parts) or "all rows"


def nonempty_groups(case: CaseLike) -> frozenset[int] | None:
    """Groups whose split has tokens, or None when the case records no splits."""
    splits = getattr(case, "splits", None) or []
    return frozenset(i for i, n in enumerate(splits) if n > 0) if splits else None


# ---- checks --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Count:
    """Rows (or distinct storages, ``unit="storages"``) per bucket compared with ``op n``."""

    op: str
    n: int
    per: str = "case"
    unit: str = "rows"

    def needs_rows(self) -> bool:
        return self.op in ("==", ">=") and self.n >= 1

    def expected(self) -> str:
        unit = (" storage" if self.n == 1 else " storages") if self.unit == "storages" else ""
        return f"{self.op} {self.n}{unit}" + ("" if self.per == "case" else f" per {self.per}")

    def holds(self, k: int) -> bool:
        return {"==": k == self.n, "<=": k <= self.n, ">=": k >= self.n}[self.op]


@dataclass(frozen=True)
class Forbid:
    def expected(self) -> str:
        return "no row"


@dataclass(frozen=True)
class MaxBytes:
    limit: ByteExpr
    measure: str = "saved"

    def expected(self) -> str:
        return f"<= {self.limit.text} ({self.measure})"


@dataclass(frozen=True)
class ExactBytes:
    value: ByteExpr
    measure: str = "saved"

    def expected(self) -> str:
        return f"== {self.value.text} ({self.measure})"


@dataclass(frozen=True)
class Ratio:
    max: float
    against: tuple[tuple[str, Any], ...]
    measure: str = "saved"

    def against_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.against)

    def expected(self) -> str:
        return f"<= {self.max:g} x the case with {self.against_text()} ({self.measure})"


@dataclass(frozen=True)
class PathCheck:
    fused: bool

    def expected(self) -> str:
        return "fused" if self.fused else "unfused"


Check = Count | Forbid | MaxBytes | ExactBytes | Ratio | PathCheck


@dataclass(frozen=True)
class KnownFailure:
    """Strict xfail: the rule is expected to fail on TE versions in ``te`` (a PEP 440 specifier)."""

    te: str
    reason: str

    def applies(self, te_version: str | None) -> bool:
        return te_version is not None and version_in(te_version, self.te)


@dataclass(frozen=True)
class Rule:
    """One budget: a selection, one check, and where it applies."""

    name: str
    check: Check
    select: Selection | None = None
    recipes: frozenset[str] | None = None
    groups: frozenset[int] | None = None
    known_failure: KnownFailure | None = None
    why: str | None = None
    when: tuple[tuple[str, Any], ...] = ()
    source: str | None = None
    key: str | None = None

    @property
    def kind(self) -> str:
        return {
            Count: "count",
            Forbid: "forbid",
            MaxBytes: "max_bytes",
            ExactBytes: "exact_bytes",
            Ratio: "ratio",
            PathCheck: "path",
        }[type(self.check)]

    def not_applicable(self, case: CaseLike) -> str | None:
        """Why this rule does not apply to ``case`` (recipe or group count), or None."""
        if self.recipes is not None and case.recipe not in self.recipes:
            return f"rule applies to recipes {', '.join(sorted(self.recipes))}"
        if self.groups is not None and case.groups not in self.groups:
            return f"rule applies to group counts {', '.join(map(str, sorted(self.groups)))}"
        return None

    def path_mismatch(self, case: CaseLike) -> str | None:
        """Why ``when`` excludes ``case`` (its path lacks or differs in a key), or None."""
        path = getattr(case, "path", None)
        for k, v in self.when:
            have = path.get(k, _MISSING) if isinstance(path, dict) else _MISSING
            if have is _MISSING:
                return f"rule applies when path.{k} = {v!r}; case records no path.{k}"
            if have != v:
                return f"rule applies when path.{k} = {v!r}; case has {have!r}"
        return None

    def expected(self) -> str:
        return self.check.expected()

    def expected_for(self, case: CaseLike) -> str:
        """The expectation with byte expressions evaluated for ``case``."""
        check = self.check
        if isinstance(check, MaxBytes | ExactBytes):
            expr = check.limit if isinstance(check, MaxBytes) else check.value
            sub = ".max_bytes" if isinstance(check, MaxBytes) else ".exact_bytes"
            n = expr.value(case, source=self.source, key=(self.key or self.name) + sub)
            return f"{'<=' if isinstance(check, MaxBytes) else '=='} {_bytes_text(n)} ({check.measure})"
        return check.expected()

    def selection(self) -> str:
        """What the rule looks at, for messages."""
        return self.select.describe() if self.select is not None else "the case totals"

    def error(self, message: str, *, subkey: str = "") -> UsageError:
        return UsageError(f"budget {self.name!r}: {message}", source=self.source, key=(self.key or self.name) + subkey)


# ---- violations -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    """A failed check: what was expected, what was found, and the rows to look at."""

    rule: str
    expected: str
    actual: str
    rows: tuple[int, ...] = ()
    row_lines: tuple[str, ...] = ()
    detail: str = ""
    selection: str = ""

    def headline(self) -> str:
        return f"{self.rule}: expected {self.expected}, found {self.actual}"

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


@dataclass(frozen=True)
class CountViolation(Violation):
    def headline(self) -> str:
        return f"{self.rule}: expected count {self.expected}; {self.actual}"


@dataclass(frozen=True)
class ForbidViolation(Violation):
    def headline(self) -> str:
        return f"{self.rule}: forbidden rows were saved ({self.actual}); expected {self.expected}"


@dataclass(frozen=True)
class BytesViolation(Violation):
    def headline(self) -> str:
        return f"{self.rule}: {self.actual} saved, expected {self.expected}"


@dataclass(frozen=True)
class RatioViolation(Violation):
    def headline(self) -> str:
        return f"{self.rule}: ratio {self.actual}, expected {self.expected}"


@dataclass(frozen=True)
class PathViolation(Violation):
    def headline(self) -> str:
        return f"{self.rule}: path was {self.actual}, expected {self.expected}"


# ---- evaluation ---------------------------------------------------------------------------------
FindCase = Callable[[CaseLike, Ratio], "CaseLike | None"]


@dataclass
class Context:
    """What a rule may need beyond its own case."""

    te_version: str | None = None
    find_case: FindCase | None = None
    allow_incomplete: bool = False
    """Judge cases memaudit marked incomplete (some saved memory it could not see) anyway."""


INCOMPLETE = (
    "case incomplete: memaudit did not see everything this case keeps for backward ({first}); "
    "a budget cannot pass on a partial count (allow it with --allow-incomplete, or "
    "allow_incomplete = true in the scenario)"
)


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
            bases = sorted({_INDEXED.sub("", p) for p in present})
            raise rule.error(
                f"operand pattern {pattern!r} matches no row of case {case.id}"
                f"{_did_you_mean(pattern, bases + present)}; operands present: {', '.join(bases) or 'none'}",
                subkey=".select.operand",
            )


def measure_bytes(rows: Iterable[Any], measure: str) -> int:
    """logical: sum of row bytes; physical: each storage once at full size; saved: physical minus parameter storages."""
    rows = list(rows)
    if measure == "logical":
        return sum(r.bytes for r in rows)
    storages: dict[str, int] = {}
    params: set[str] = set()
    loose = 0
    for r in rows:
        if r.storage is None:
            loose += 0 if (measure == "saved" and r.is_parameter) else r.bytes
            continue
        storages[r.storage] = r.storage_bytes
        if r.is_parameter:
            params.add(r.storage)
    if measure == "saved":  # as compute_totals: a storage a parameter lives in is not saved memory
        return sum(n for s, n in storages.items() if s not in params) + loose
    return sum(storages.values()) + loose


def _case_bytes(rule: Rule, case: CaseLike, measure: str) -> tuple[int, list[Any]]:
    """Bytes of the rule's selection (or the case totals when it has none) and the rows behind them."""
    if rule.select is None:
        totals = case.totals
        value = {"logical": totals.logical_bytes, "physical": totals.physical_bytes, "saved": totals.saved_bytes}[measure]
        rows = [r for r in case.rows if not (measure == "saved" and r.is_parameter)]
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
    rows = [r for r in case.rows if sel.matches(r, ne)]
    if per == "case":
        return [("all", rows, [])]
    universe = [r for r in case.rows if sel.matches_operand(r)]
    operands = sorted({r.operand for r in universe}, key=lambda o: (o is None, o or ""))

    def groups_of(candidates: list[Any]) -> list[int | None]:
        if isinstance(sel.group, tuple):
            return list(sel.group)
        if sel.group == "nonempty" and ne is not None:
            return sorted(ne)
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
            indexed = op is not None and _INDEXED.search(op)
            groups = sorted({r.group for r in op_rows}, key=lambda g: (g is None, g or 0)) if indexed else groups_of(op_rows)
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
    return actual, CountViolation(
        rule.name,
        rule.expected(),
        actual if check.per == "case" else failing,
        tuple(r.index for r in offending),
        tuple(lines),
        detail,
        rule.selection(),
    )


def check_forbid(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """No row may match."""
    rows = _selected(rule, case)
    actual = f"{len(rows)} row" + ("" if len(rows) == 1 else "s")
    if not rows:
        return actual, None
    return actual, ForbidViolation(
        rule.name, rule.expected(), actual, tuple(r.index for r in rows), tuple(format_rows(rows)), selection=rule.selection()
    )


def _bytes_text(n: int) -> str:
    return f"{fmt_bytes(n)} ({n} B)" if n >= 1024 else f"{n} B"


def check_bytes(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """``max_bytes`` (<=) or ``exact_bytes`` (==) of the totals or of a selection."""
    check = rule.check
    assert isinstance(check, MaxBytes | ExactBytes)
    expr = check.limit if isinstance(check, MaxBytes) else check.value
    subkey = ".max_bytes" if isinstance(check, MaxBytes) else ".exact_bytes"
    target = expr.value(case, source=rule.source, key=(rule.key or rule.name) + subkey)
    value, rows = _case_bytes(rule, case, check.measure)
    actual = _bytes_text(value)
    ok = value <= target if isinstance(check, MaxBytes) else value == target
    if ok:
        return actual, None
    op = "<=" if isinstance(check, MaxBytes) else "=="
    expected = f"{op} {_bytes_text(target)}" + (f" [{expr.text}]" if not expr.constant else "") + f" ({check.measure})"
    top = _largest(rows)
    detail = f"over by {_bytes_text(value - target)}" if value > target else f"under by {_bytes_text(target - value)}"
    detail += f"; largest rows ({len(rows)} in all):" if rows else ""
    return actual, BytesViolation(
        rule.name, expected, actual, tuple(r.index for r in top[:MAX_ROW_LINES]), tuple(format_rows(top)), detail, rule.selection()
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
        raise _NotApplicable(f"the case it is compared with ({other.id}) is {other.status}")
    num, rows = _case_bytes(rule, case, check.measure)
    den, _ = _case_bytes(rule, other, check.measure)
    if den == 0:
        raise rule.error(f"ratio against {other.id}: that case's selection has 0 bytes", subkey=".against")
    ratio = num / den
    actual = f"{ratio:.3f} ({fmt_bytes(num)} / {fmt_bytes(den)} in {other.id})"
    if ratio <= check.max:
        return actual, None
    top = _largest(rows)
    return actual, RatioViolation(
        rule.name, rule.expected(), actual, tuple(r.index for r in top[:MAX_ROW_LINES]), tuple(format_rows(top)),
        "largest rows here:", rule.selection(),
    )


def check_path(rule: Rule, case: CaseLike, ctx: Context) -> tuple[str, Violation | None]:
    """The fused op ran (``fused``) or did not (``unfused``)."""
    check = rule.check
    assert isinstance(check, PathCheck)
    path = case.path
    if not isinstance(path, dict) or not isinstance(path.get("fused"), bool):
        raise rule.error(
            f"path = {check.expected()!r} cannot apply: case {case.id} records no path (no 'fused' flag; the target reports none)",
            subkey=".path",
        )
    fused = path["fused"]
    actual = "fused" if fused else "unfused"
    if fused == check.fused:
        return actual, None
    ops = path.get("forward_ops")
    detail = f"forward ops: {', '.join(map(str, ops))}" if isinstance(ops, list) and ops else ""
    return actual, PathViolation(rule.name, check.expected(), actual, (), (), detail)


CHECK_FUNCTIONS: dict[type, Callable[[Rule, CaseLike, Context], tuple[str, Violation | None]]] = {
    Count: check_count,
    Forbid: check_forbid,
    MaxBytes: check_bytes,
    ExactBytes: check_bytes,
    Ratio: check_ratio,
    PathCheck: check_path,
}


class _NotApplicable(Exception):
    pass


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
    base = {
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
    except _NotApplicable as exc:
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
    """'3 pass, 1 fail, 0 xfail, 0 XPASS, 2 n/a'."""
    return ", ".join(f"{n} {k}" for k, n in summarize(verdicts).items())


# ---- TE version specifiers ------------------------------------------------------------------------
_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+*!-]*)\s*$")


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in m.group(1).split("."))


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def fallback_version_in(version: str, spec: str) -> bool:
    """A small PEP 440 subset for when ``packaging`` is missing: release segments only."""
    v = _release(version)
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"invalid specifier clause {clause.strip()!r}")
        op, target = m.groups()
        if target.endswith(".*"):
            if op not in ("==", "!="):
                raise ValueError(f"a wildcard needs == or !=: {clause.strip()!r}")
            prefix = _release(target[:-2])
            padded = v + (0,) * max(0, len(prefix) - len(v))
            if (padded[: len(prefix)] == prefix) != (op == "=="):
                return False
            continue
        t = _release(target)
        c = _cmp(v, t)
        ok = {
            "==": c == 0,
            "===": c == 0,
            "!=": c != 0,
            "<": c < 0,
            "<=": c <= 0,
            ">": c > 0,
            ">=": c >= 0,
            "~=": c >= 0 and len(t) >= 2 and v[: len(t) - 1] == t[: len(t) - 1],
        }[op]
        if not ok:
            return False
    return True


def validate_specifier(spec: str) -> None:
    """Raise ValueError if ``spec`` is not a version specifier."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # pragma: no cover - packaging ships with pip/TE
        fallback_version_in("0", spec)
        return
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(str(exc)) from None
    if not spec.strip():
        raise ValueError("empty specifier")


def version_in(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies ``spec`` (pre-releases included); uses packaging if present."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover
        return fallback_version_in(version, spec)
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return fallback_version_in(version, spec)


def te_version_of(environment: dict[str, Any] | None) -> str | None:
    """``report.environment["transformer_engine"]``: a version string, a dict with one, or None."""
    te = (environment or {}).get("transformer_engine")
    if isinstance(te, dict):
        te = te.get("version")
    return te if isinstance(te, str) and te else None


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
