"""The committed H200 emulated reports, replayed with fake CUDA (no GPU), and how cases compare.

Shared by ``tests/test_te_fake_cuda.py`` and ``bench/fake_cuda_speed.py``. Each committed file was
made by one ``memaudit run`` process (``h200.json`` by two: one per shape), and TE keeps global
state across the cases of a process (after an fp8-delayed case every later forward calls
``fused_amax_and_scale_update_after_reduction``, which the committed ``standins`` lists show), so
each is replayed the same way: its cases in order, in one child process
(:func:`memaudit.te.emulate.host.run_in_child`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memaudit.report import CaseReport, load_report
from memaudit.spec import CaseSpec
from memaudit.te.targets.grouped_mlp import EMULATED_WARNING, EMULATED_WARNING_BEFORE

ROOT = Path(__file__).resolve().parent.parent
EMULATED = ROOT / "reports" / "emulated"
MEASURED = {"standins-sm90-default": "measured-default.json", "standins-sm90-small": "measured-small.json"}
"""The all-stand-in sm90 files and the H200 real-kernel reports of the same cases."""

ADDED_ROW_KEYS = frozenset({"module"})
"""Row keys memaudit writes now that the committed reports predate (the module that saved the row)."""

ADDED_CASE_KEYS = frozenset({"modules"})
"""Case keys today's memaudit records that the committed reports predate (the rows grouped by
module call): allowed where the committed case has none."""


@dataclass(frozen=True)
class Group:
    """The cases one committed ``memaudit run`` process made, in its order."""

    file: str
    shape: str
    cases: tuple[CaseReport, ...]

    @property
    def name(self) -> str:
        return f"{self.file}:{self.shape}"


def committed_groups() -> list[Group]:
    """Every committed emulated case under ``reports/emulated``, grouped by the process that made it."""
    out: list[Group] = []
    for path in sorted(EMULATED.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("memaudit.report/"):
            continue  # standin-diff.json
        cases = [c for c in load_report(path).cases if c.emulation is not None]
        for case in cases:
            shape = "t{tokens}-h{hidden}-f{ffn}".format(**case.dims)
            if not out or (out[-1].file, out[-1].shape) != (path.stem, shape):
                out.append(Group(path.stem, shape, ()))
            last = out[-1]
            out[-1] = Group(last.file, last.shape, (*last.cases, case))
    return out


def replay_case(case: CaseReport) -> CaseReport:
    """``case`` run again here with memaudit's runner, as its ``memaudit run`` flags asked (from
    its ``emulation.machine`` and options)."""
    from memaudit.runner import run_case_here
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    assert case.emulation is not None
    m = case.emulation.machine
    flags: dict[str, Any] = {
        "kernels": m["kernels"],
        "arch": m["arch"],
        "fused": case.options.get("fused_env") == "1",
        "cublaslt": m["cublaslt"],
        "cudnn_frontend": m["cudnn_frontend"],
    }
    if case.options.get("single_grouped_weight"):
        flags["single_grouped_weight"] = True
    target = TEGroupedMLPTarget().configure(flags)
    spec = CaseSpec.make(
        target,
        case.recipe,
        case.groups,
        dtype=case.dtype,
        device=case.device,
        options=dict(target.options),
        **case.dims,
    )
    return run_case_here(target, spec, backward=False)


def replay(group: Group) -> list[CaseReport]:
    """``group``'s cases in one child process on fake CUDA, in order (as the committed process ran them)."""
    from memaudit.te.emulate.host import run_in_child

    arch = group.cases[0].emulation.machine["arch"]  # type: ignore[union-attr]
    return run_in_child(arch, lambda: [replay_case(c) for c in group.cases])


def case_json(case: CaseReport, *, keys_of: CaseReport | None = None) -> dict[str, Any]:
    """``case`` as its JSON dict; with ``keys_of``, each row keeps only the keys that case's rows have."""
    d = case.to_dict()
    if keys_of is not None:
        ref = keys_of.to_dict()
        for part in ("rows", "freed"):
            d[part] = [
                {k: v for k, v in row.items() if k in ref_row} for row, ref_row in zip(d[part], ref[part], strict=False)
            ]
    return d


def differences(committed: CaseReport, fresh: CaseReport, *, host: str) -> list[str]:
    """Where ``fresh`` differs from ``committed``, byte for byte on the JSON each holds.

    Allowed, and checked: the rows' :data:`ADDED_ROW_KEYS` (recorded only by today's memaudit);
    ``emulation.machine["host"]`` (``host``; the committed reports predate it); the emulated-kernels
    warning in its words from before backward could run emulated; and an error
    reason that today's memaudit annotates as a suspected TE bug (the committed reason, then the
    note)."""
    out: list[str] = []
    a, b = committed.to_dict(), fresh.to_dict()
    for part in ("rows", "freed"):
        if len(a[part]) != len(b[part]):
            out.append(f"{part}: {len(a[part])} committed, {len(b[part])} now")
        for i, (ra, rb) in enumerate(zip(a[part], b[part], strict=False)):
            extra = set(rb) - set(ra)
            if extra - ADDED_ROW_KEYS:
                out.append(f"{part}[{i}]: new keys {sorted(extra - ADDED_ROW_KEYS)}")
            rb = {k: v for k, v in rb.items() if k in ra}
            if json.dumps(ra, sort_keys=True) != json.dumps(rb, sort_keys=True):
                out.append(f"{part}[{i}]: {json.dumps(ra, sort_keys=True)} -> {json.dumps(rb, sort_keys=True)}")
        a.pop(part)
        b.pop(part)
    machine = dict(b["emulation"]["machine"])
    if machine.pop("host", None) != host:
        out.append(f"emulation.machine.host: {b['emulation']['machine'].get('host')!r}, expected {host!r}")
    b["emulation"] = {**b["emulation"], "machine": machine}
    b["warnings"] = [EMULATED_WARNING_BEFORE if w == EMULATED_WARNING else w for w in b.get("warnings", [])]
    if a["status"] == b["status"] == "error" and a["reason"] != b["reason"]:
        if b["reason"].startswith(a["reason"] + " (suspected TE bug: "):
            b["reason"] = a["reason"]
    for key in sorted(a.keys() | b.keys()):
        if key in ADDED_CASE_KEYS and key not in a:
            continue
        if json.dumps(a.get(key), sort_keys=True) != json.dumps(b.get(key), sort_keys=True):
            out.append(
                f"{key}: {json.dumps(a.get(key), sort_keys=True)[:300]} -> "
                f"{json.dumps(b.get(key), sort_keys=True)[:300]}"
            )
    return out


def _grouping(case: CaseReport) -> list[tuple[int, int, int]]:
    first: dict[str, int] = {}
    return [
        (-1, 0, 0)
        if r.storage is None
        else (first.setdefault(r.storage, i), r.storage_bytes or 0, r.storage_offset or 0)
        for i, r in enumerate(case.rows)
    ]


def row_for_row(measured: CaseReport, emulated: CaseReport) -> list[str]:
    """Rows in order as ``bench/verify/equivalence.py`` compares a measured and an emulated case: operand,
    kind, orientation, shape, dtype, bytes and storage grouping (the first row of each storage,
    its bytes and the offset), then the totals."""

    def fields(case: CaseReport) -> list[tuple[Any, ...]]:
        return [
            (r.operand, r.kind, r.orientation, tuple(r.shape), r.dtype, r.bytes, *g)
            for r, g in zip(case.rows, _grouping(case), strict=True)
        ]

    a, b = fields(measured), fields(emulated)
    out = [f"row {i}: {x} -> {y}" for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    if len(a) != len(b):
        out.append(f"{len(a)} rows measured, {len(b)} emulated")
    if measured.totals != emulated.totals:
        out.append(f"totals {measured.totals} -> {emulated.totals}")
    return out


EMULATED_ONLY = frozenset({"execution", "emulation", "warnings"})
"""Case keys a measured case does not have, or has otherwise: an emulated case says it is emulated
(``execution``, ``emulation``) and warns that its kernels were stand-ins."""


def against_measured(measured: CaseReport, emulated: CaseReport) -> list[str]:
    """Where ``emulated`` differs from the real-kernel ``measured`` case: every row byte for byte in
    its JSON (the keys the measured rows have), and every case key but :data:`EMULATED_ONLY`."""
    a, b = measured.to_dict(), emulated.to_dict()
    out = row_for_row(measured, emulated)
    for i, (ra, rb) in enumerate(zip(a["rows"], b["rows"], strict=False)):
        rb = {k: v for k, v in rb.items() if k in ra}
        if json.dumps(ra, sort_keys=True) != json.dumps(rb, sort_keys=True):
            out.append(f"rows[{i}]: {json.dumps(ra, sort_keys=True)} -> {json.dumps(rb, sort_keys=True)}")
    for key in sorted((a.keys() | b.keys()) - EMULATED_ONLY - {"rows"}):
        if key in ADDED_CASE_KEYS and key not in a:
            continue
        if json.dumps(a.get(key), sort_keys=True) != json.dumps(b.get(key), sort_keys=True):
            out.append(
                f"{key}: {json.dumps(a.get(key), sort_keys=True)[:200]} -> "
                f"{json.dumps(b.get(key), sort_keys=True)[:200]}"
            )
    return out
