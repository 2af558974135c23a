"""Budget rules as data: row selections, the checks, and :class:`Rule`.

A :class:`Rule` is a :class:`Selection`, one check (:data:`Check`) and where it applies (recipes,
group counts, path keys, a known failure on some TE versions). Checking rules against a case lives
in :mod:`memaudit.judge.checks`, verdicts in :mod:`memaudit.judge.budgets`, and parsing rules from
TOML or marker arguments in :mod:`memaudit.judge.scenario`, byte expressions (:class:`ByteExpr`) in
:mod:`memaudit.judge.byte_expr`. Nothing here imports torch or TE.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from memaudit.errors import UsageError
from memaudit.judge.byte_expr import CASE_VARIABLES as CASE_VARIABLES
from memaudit.judge.byte_expr import ELEMENT_SIZE as ELEMENT_SIZE
from memaudit.judge.byte_expr import ByteExpr
from memaudit.judge.byte_expr import default_dims as default_dims
from memaudit.judge.rows import RowLike, bytes_text, operand_base
from memaudit.judge.versions import version_in
from memaudit.report import PathInfo

CHECKS = ("count", "forbid", "max_bytes", "exact_bytes", "max_unread_bytes", "ratio", "path")
COUNT_OPS = ("==", "<=", ">=")
COUNT_UNITS = ("rows", "storages")
PER = ("case", "operand", "group", "operand,group")
MEASURES = ("logical", "physical", "saved")

_MISSING = object()


class CaseLike(Protocol):
    """What the engine reads from a case (memaudit.report.CaseReport satisfies it)."""

    id: str
    spec: Any
    status: str
    reason: str | None
    recipe: str
    groups: int
    dims: dict[str, int]
    dtype: str
    splits: list[int]
    path: PathInfo | None
    rows: list[Any]
    totals: Any


# ---- selections ----------------------------------------------------------------------------------
def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` are wildcards; everything else (brackets too) is literal."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + r"\Z")


def operand_matches(pattern: str, operand: str | None) -> bool:
    """A pattern matches the operand or its base (``fc1.weight`` matches ``fc1.weight[2]``)."""
    name = operand or ""
    rx = _glob(pattern)
    return bool(rx.match(name) or rx.match(operand_base(name)))


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
# Each check names its ``kind``: the key it has in a budget table (one of CHECKS).
@dataclass(frozen=True)
class Count:
    """Rows (or distinct storages, ``unit="storages"``) per bucket compared with ``op n``."""

    op: str
    n: int
    per: str = "case"
    unit: str = "rows"
    kind: ClassVar[str] = "count"

    def needs_rows(self) -> bool:
        return self.op in ("==", ">=") and self.n >= 1

    def expected(self) -> str:
        unit = (" storage" if self.n == 1 else " storages") if self.unit == "storages" else ""
        return f"{self.op} {self.n}{unit}" + ("" if self.per == "case" else f" per {self.per}")

    def holds(self, k: int) -> bool:
        return {"==": k == self.n, "<=": k <= self.n, ">=": k >= self.n}[self.op]


@dataclass(frozen=True)
class Forbid:
    kind: ClassVar[str] = "forbid"

    def expected(self) -> str:
        return "no row"


class ByteCheck:
    """What ``max_bytes`` and ``exact_bytes`` share: bytes compared by ``op`` with a byte expression.

    A subclass names its kind, its operator and the field that holds its :class:`ByteExpr`:
    ``class MaxBytes(ByteCheck, kind="max_bytes", op="<=", expr_field="limit")``.
    """

    kind: ClassVar[str]
    op: ClassVar[str]
    expr_field: ClassVar[str]
    measure: str

    def __init_subclass__(cls, *, kind: str, op: str, expr_field: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind, cls.op, cls.expr_field = kind, op, expr_field

    @property
    def expr(self) -> ByteExpr:
        expr: ByteExpr = getattr(self, self.expr_field)
        return expr

    def expected(self) -> str:
        return f"{self.op} {self.expr.text} ({self.measure})"

    def holds(self, value: int, target: int) -> bool:
        return value <= target if self.op == "<=" else value == target


@dataclass(frozen=True)
class MaxBytes(ByteCheck, kind="max_bytes", op="<=", expr_field="limit"):
    limit: ByteExpr
    measure: str = "saved"


@dataclass(frozen=True)
class ExactBytes(ByteCheck, kind="exact_bytes", op="==", expr_field="value"):
    value: ByteExpr
    measure: str = "saved"


@dataclass(frozen=True)
class MaxUnreadBytes(ByteCheck, kind="max_unread_bytes", op="<=", expr_field="limit"):
    """Bytes saved for backward that backward never read (``unread_bytes``, counted by storage),
    of the case or of a selection, at most ``limit``. A case whose rows carry no read verdicts (run
    without ``--unread``) fails it: not analysed is not zero."""

    limit: ByteExpr
    measure: str = "unread"


@dataclass(frozen=True)
class Ratio:
    max: float
    against: tuple[tuple[str, Any], ...]
    measure: str = "saved"
    kind: ClassVar[str] = "ratio"

    def against_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.against)

    def expected(self) -> str:
        return f"<= {self.max:g} x the case with {self.against_text()} ({self.measure})"


@dataclass(frozen=True)
class PathCheck:
    fused: bool
    kind: ClassVar[str] = "path"

    def expected(self) -> str:
        return "fused" if self.fused else "unfused"


Check = Count | Forbid | MaxBytes | ExactBytes | MaxUnreadBytes | Ratio | PathCheck


@dataclass(frozen=True)
class KnownFailure:
    """Strict xfail: the rule is expected to fail on TE versions in ``te`` (a PEP 440 specifier)."""

    te: str
    reason: str

    def applies(self, te_version: str | None) -> bool:
        return te_version is not None and version_in(te_version, self.te)


# ---- rules ---------------------------------------------------------------------------------------
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
        return self.check.kind

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
            have = path.get(k, _MISSING) if isinstance(path, Mapping) else _MISSING
            if have is _MISSING:
                return f"rule applies when path.{k} = {v!r}; case records no path.{k}"
            if have != v:
                return f"rule applies when path.{k} = {v!r}; case has {have!r}"
        return None

    def expected(self) -> str:
        return self.check.expected()

    def byte_target(self, case: CaseLike) -> int:
        """The bytes a ``max_bytes`` or ``exact_bytes`` rule compares with, for ``case``."""
        check = self.check
        assert isinstance(check, ByteCheck)
        return check.expr.value(case, source=self.source, key=f"{self.key or self.name}.{check.kind}")

    def expected_for(self, case: CaseLike) -> str:
        """The expectation with byte expressions evaluated for ``case``."""
        check = self.check
        if isinstance(check, ByteCheck):
            return f"{check.op} {bytes_text(self.byte_target(case))} ({check.measure})"
        return check.expected()

    def selection(self) -> str:
        """What the rule looks at, for messages."""
        return self.select.describe() if self.select is not None else "the case totals"

    def error(self, message: str, *, subkey: str = "") -> UsageError:
        return UsageError(f"budget {self.name!r}: {message}", source=self.source, key=(self.key or self.name) + subkey)
