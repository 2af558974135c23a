"""What differs between two estimates (what a variant saves), and saved bytes per kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memaudit.report import CaseReport, Row, Totals


@dataclass
class DiffEntry:
    """One buffer present in one variant and not (or with other bytes) in the other."""

    operand: str | None
    group: int | None
    container: str | None
    slot: str | None
    kind: str
    orientation: str | None
    shape: list[int]
    dtype: str
    bytes_a: int
    bytes_b: int
    note: str | None

    @property
    def delta(self) -> int:
        return self.bytes_b - self.bytes_a


def _row_key(r: Row) -> tuple[Any, ...]:
    return (r.operand, r.group, r.container, r.slot, r.kind)


def diff_cases(a: CaseReport, b: CaseReport) -> tuple[list[DiffEntry], Totals, Totals]:
    """Rows that differ between two estimates (``b`` minus ``a``), with both totals."""

    def index(rows: list[Row]) -> dict[tuple[Any, ...], Row]:
        out: dict[tuple[Any, ...], Row] = {}
        for r in rows:
            if r.duplicate_of is None:
                out.setdefault(_row_key(r), r)
        return out

    ia, ib = index(a.rows), index(b.rows)
    entries = []
    for key in list(ia) + [k for k in ib if k not in ia]:
        ra, rb = ia.get(key), ib.get(key)
        ba = ra.bytes if ra is not None else 0
        bb = rb.bytes if rb is not None else 0
        if ra is not None and rb is not None and ba == bb:
            continue
        r = ra if ra is not None else rb
        assert r is not None
        entries.append(
            DiffEntry(r.operand, r.group, r.container, r.slot, r.kind, r.orientation, r.shape, r.dtype, ba, bb, r.note)
        )
    return entries, a.totals, b.totals


def bytes_by_kind(case: CaseReport) -> dict[str, int]:
    """Saved bytes per kind: every non-parameter, non-duplicate row's bytes (views counted once)."""
    out: dict[str, int] = {}
    for r in case.rows:
        if r.is_parameter or r.duplicate_of is not None or r.kind == "container":
            continue
        out[r.kind] = out.get(r.kind, 0) + r.bytes
    return out
