"""The history document: per case, saved bytes and rows per TE version, and what changed between
neighbours, named by operand, kind and orientation (``memaudit.te-history/1``).

Built from one ``memaudit.report/3`` report per version (:func:`build`); written as JSON with sorted
keys and no timestamp, so that two runs over the same versions give the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memaudit.errors import UsageError
from memaudit.judge.baseline import row_diffs, row_key
from memaudit.report import CaseReport, Report, Row, load_report, read_input

SCHEMA = "memaudit.te-history/1"


def saved_state(case: CaseReport) -> tuple[Any, ...]:
    """What the bisect and the history compare, exactly: status, and for an ok case the saved
    bytes, the row count and every counted row (operand, kind, orientation, format, shape, dtype,
    bytes, storage bytes); for an error or skip, its reason's first line."""
    if case.status != "ok":
        return (case.status, (case.reason or "").splitlines()[0] if case.reason else "")
    rows = tuple(
        sorted(
            (row_key(r), tuple(r.shape), r.dtype, r.bytes, r.storage_bytes, r.duplicate_of is not None)
            for r in case.rows
        )
    )
    return ("ok", case.totals.saved_bytes, len(case.rows), rows)


def unread_state(case: CaseReport) -> tuple[Any, ...]:
    """What a bisect on unread bytes compares: status, and for an ok case its ``unread_bytes`` and the
    unread rows (operand, kind, orientation, format, storage bytes); for an error or skip, as
    :func:`saved_state`. A ValueError for an ok case that was not analysed (run without the read
    analysis): not analysed is not zero."""
    if case.status != "ok":
        return saved_state(case)
    if case.unread is None:
        raise ValueError(f"case {case.id} was not analysed for reads (no read verdicts): its unread bytes are unknown")
    rows = tuple(sorted((row_key(r), r.storage_bytes) for r in case.rows if r.read == "unread"))
    return ("ok", case.totals.unread_bytes or 0, rows)


def unread_of(case: CaseReport) -> int | None:
    """An ok, analysed case's unread bytes (0 for an analysed case with no rows); else None."""
    if case.status != "ok" or case.unread is None:
        return None
    return case.totals.unread_bytes or 0


@dataclass(frozen=True)
class RowChange:
    """One buffer that differs between two neighbours (matched by operand, kind, orientation, format)."""

    key: str
    operand: str | None
    kind: str | None
    orientation: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def delta(self) -> int:
        return (self.after or {}).get("bytes", 0) - (self.before or {}).get("bytes", 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "operand": self.operand,
            "kind": self.kind,
            "orientation": self.orientation,
            "before": self.before,
            "after": self.after,
            "delta": self.delta,
        }


def _row_brief(r: Row | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"shape": list(r.shape), "dtype": r.dtype, "bytes": r.bytes}


def row_changes(before: CaseReport, after: CaseReport) -> list[RowChange]:
    """The buffers that differ between two ok cases (:func:`memaudit.judge.baseline.row_diffs`)."""
    out = []
    for d in row_diffs(before.rows, after.rows):
        r = d.current or d.baseline
        assert r is not None
        out.append(
            RowChange(d.key, r.operand or r.slot, r.kind, r.orientation, _row_brief(d.baseline), _row_brief(d.current))
        )
    return out


@dataclass(frozen=True)
class Cell:
    """One case at one version."""

    version: str
    status: str
    reason: str | None
    saved_bytes: int | None
    rows: int | None
    fused: bool | None
    unread_bytes: int | None = None
    """Bytes saved for backward that backward never read, where the version's run was analysed
    (``te-history --unread``); written only then."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "version": self.version,
            "status": self.status,
            "reason": self.reason,
            "saved_bytes": self.saved_bytes,
            "rows": self.rows,
            "fused": self.fused,
        }
        if self.unread_bytes is not None:
            out["unread_bytes"] = self.unread_bytes
        return out


@dataclass(frozen=True)
class Change:
    """What changed in one case between two neighbouring versions."""

    before: str
    after: str
    what: str
    """``saved state`` (both ok), ``status`` (one is not ok), ``path`` (fused or not) or ``unread``
    (the same buffers, but unread bytes differ: analysed runs only)."""
    saved_delta: int | None
    rows_delta: int | None
    rows: list[RowChange] = field(default_factory=list)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "what": self.what,
            "saved_delta": self.saved_delta,
            "rows_delta": self.rows_delta,
            "rows": [r.to_dict() for r in self.rows],
            "text": self.text,
        }


@dataclass
class CaseHistory:
    """One case across the versions."""

    id: str
    recipe: str
    groups: int
    fused: bool
    shape: dict[str, int]
    cells: list[Cell]
    changes: list[Change]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "recipe": self.recipe,
            "groups": self.groups,
            "fused": self.fused,
            "shape": self.shape,
            "cells": [c.to_dict() for c in self.cells],
            "changes": [c.to_dict() for c in self.changes],
        }


@dataclass
class VersionInfo:
    """One audited version: where its Python came from and its report."""

    label: str
    source: dict[str, Any]
    report: str | None
    """The version's report file, relative to the history's folder."""
    error: str | None = None
    """Why the version did not load or could not be had (every case is then an error cell)."""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "source": self.source, "report": self.report, "error": self.error}


@dataclass
class History:
    """The whole history document."""

    versions: list[VersionInfo]
    cases: list[CaseHistory]
    arch: str
    memaudit: str
    bisects: list[dict[str, Any]] = field(default_factory=list)
    branch_points: list[dict[str, Any]] = field(default_factory=list)
    """Where a git checkout placed each release on main (``bench/make/te_history.py``): its branch
    point, and the cases whose state there differs from the release's."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "memaudit": self.memaudit,
            "arch": self.arch,
            "versions": [v.to_dict() for v in self.versions],
            "cases": [c.to_dict() for c in self.cases],
            "bisects": self.bisects,
            "branch_points": self.branch_points,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False) + "\n"

    def changed(self) -> list[tuple[CaseHistory, Change]]:
        return [(c, ch) for c in self.cases for ch in c.changes]


def _cell(label: str, case: CaseReport | None) -> Cell:
    if case is None:
        return Cell(label, "missing", "the version's report has no such case", None, None, None)
    if case.status != "ok":
        return Cell(label, case.status, case.reason, None, None, case.fused)
    return Cell(label, "ok", None, case.totals.saved_bytes, len(case.rows), case.fused, unread_of(case))


def _change(before: str, after: str, a: CaseReport, b: CaseReport) -> Change | None:
    if a.status == "ok" and b.status == "ok":
        ua, ub = unread_of(a), unread_of(b)
        unread = f"; unread {ub - ua:+,} B" if ua is not None and ub is not None and ua != ub else ""
        if saved_state(a) == saved_state(b) and a.fused == b.fused:
            if unread:  # the same buffers, read differently
                return Change(before, after, "unread", 0, 0, [], f"saved +0 B, rows +0{unread}")
            return None
        rows = sorted(row_changes(a, b), key=lambda r: (-abs(r.delta), r.key))
        sd, rd = b.totals.saved_bytes - a.totals.saved_bytes, len(b.rows) - len(a.rows)
        what = "saved state" if saved_state(a) != saved_state(b) else "path"
        names = ", ".join(f"{r.key} ({'+' if r.delta >= 0 else ''}{r.delta} B)" for r in rows[:6])
        more = f" and {len(rows) - 6} more" if len(rows) > 6 else ""
        path = (
            f"; path {'fused' if a.fused else 'unfused'} → {'fused' if b.fused else 'unfused'}"
            if a.fused != b.fused
            else ""
        )
        text = f"saved {sd:+,} B, rows {rd:+d}{path}{unread}" + (f": {names}{more}" if rows else "")
        return Change(before, after, what, sd, rd, rows, text)
    if saved_state(a) == saved_state(b):
        return None
    ra = (a.reason or "").splitlines()[0] if a.reason else ""
    rb = (b.reason or "").splitlines()[0] if b.reason else ""
    text = f"{a.status}{': ' + ra if a.status != 'ok' else ''} → {b.status}{': ' + rb if b.status != 'ok' else ''}"
    return Change(before, after, "status", None, None, [], text)


def build(versions: list[VersionInfo], reports: list[Report], case_ids: list[str], arch: str) -> History:
    """The history of ``case_ids`` over ``versions`` (one report per version, same order)."""
    import memaudit

    if len(versions) != len(reports):
        raise ValueError("one report per version")
    cases = []
    for cid in case_ids:
        found = [r.case(cid) for r in reports]
        ref = next((c for c in found if c is not None), None)
        if ref is None:
            raise UsageError(f"no version's report has case {cid!r}")
        cells = [_cell(v.label, c) for v, c in zip(versions, found, strict=True)]
        changes = []
        for i in range(1, len(found)):
            a, b = found[i - 1], found[i]
            if a is None or b is None:
                continue
            ch = _change(versions[i - 1].label, versions[i].label, a, b)
            if ch is not None:
                changes.append(ch)
        cases.append(
            CaseHistory(cid, ref.recipe, ref.groups, bool(ref.options.get("fused")), dict(ref.dims), cells, changes)
        )
    return History(versions, cases, arch, memaudit.__version__)


def load(path: str | Path) -> dict[str, Any]:
    """A history document's JSON (its schema checked)."""
    text = read_input(path, "history")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc}", source=str(path)) from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise UsageError(f"not a TE history (expected schema {SCHEMA!r})", source=str(path), key="schema")
    return d


def rebuild(d: dict[str, Any], folder: str | Path) -> History:
    """The history of a saved document ``d`` made again from the per-version reports beside it
    (``folder``), with its recorded bisects and branch points; ``to_json`` of the answer equals the
    document where the reports are the ones it was made from."""
    versions = [VersionInfo(v["label"], v["source"], v["report"], v.get("error")) for v in d["versions"]]
    missing = [v.label for v in versions if not v.report]
    if missing:
        raise UsageError(f"version {missing[0]!r} has no report to rebuild from", key="versions")
    reports = [load_report(Path(folder) / str(v.report)) for v in versions]
    h = build(versions, reports, [c["id"] for c in d["cases"]], d["arch"])
    h.memaudit = d["memaudit"]
    h.bisects, h.branch_points = d.get("bisects", []), d.get("branch_points", [])
    return h
