"""``run --expected``: put the estimator's bytes beside each measured row and flag mismatches."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from memaudit.report import CaseReport, Row
from memaudit.spec import CaseSpec
from memaudit.te.estimate import expected_rows


def _key(row: Row) -> tuple[object, ...]:
    slot = row.slot if row.container else None
    return (row.operand, row.group, row.container, slot, row.kind, row.orientation)


def spec_of(case: CaseReport) -> CaseSpec:
    """The CaseSpec a case report was run from (without ``fused_env``, an environment setting)."""
    return dataclasses.replace(
        case.spec,
        options={k: v for k, v in case.options.items() if k != "fused_env"},
        splits=case.spec.splits or None,
    )


def attach_expected(case: CaseReport) -> int | None:
    """Put ``expected_bytes`` on matching rows (the case gets new rows); return the number of mismatches (None: not
    covered).

    A row the estimator does not predict, or a predicted row that was not measured, is a mismatch
    and named in the case's warnings.
    """
    if case.status != "ok":
        return None

    expected = expected_rows(spec_of(case))
    if expected is None:
        return None
    queue: dict[tuple[object, ...], list[Row]] = defaultdict(list)
    for row in expected:
        queue[_key(row)].append(row)
    mismatches = 0
    rows = []
    for row in case.rows:
        todo = queue.get(_key(row))
        if not todo:
            mismatches += 1
            case.warnings.append(f"expected: row #{row.index} ({row.operand} {row.slot}) not predicted")
            rows.append(row)
            continue
        exp = todo.pop(0)
        rows.append(dataclasses.replace(row, expected_bytes=exp.bytes))
        if exp.bytes != row.bytes or exp.shape != row.shape:
            mismatches += 1
            case.warnings.append(
                f"expected: row #{row.index} ({row.operand} {row.slot}) measured {row.shape} {row.bytes} B, "
                f"estimated {exp.shape} {exp.bytes} B"
            )
    case.rows = rows
    for left in queue.values():
        for exp in left:
            mismatches += 1
            case.warnings.append(f"expected: predicted {exp.operand} {exp.slot} {exp.shape} was not measured")
    return mismatches
