"""The "by kind" column of a case (the markdown tables, per rank too under torchrun) counts bytes
as the report's ``saved_bytes`` does: each saved device storage once, at its full size, under the
first row that names it. A view of a storage that an earlier row already counted (a metadata row
over a tensor's storage) adds nothing, so the kinds add up to the case's saved bytes."""

from __future__ import annotations

import dataclasses

from _reports import TE_BF16, RowBuilder, make_case, make_report

from memaudit.judge.baseline import compare_reports, kind_breakdown
from memaudit.render.markdown import _kinds_cell, render_markdown
from memaudit.units import fmt_bytes

MIB = 1 << 20


def _case_with_a_view():
    """A 4.7 MiB tensor, a 4.0 MiB metadata view of its storage, a 1 MiB scale and a parameter."""
    b = RowBuilder()
    b.add("fc1.input", "tensor", nbytes=4_928_307)  # 4.7 MiB
    b.add("fc1.input", "metadata", nbytes=4 * MIB)  # 4.0 MiB: a view of the tensor's storage
    b.rows[1] = dataclasses.replace(b.rows[1], storage=b.rows[0].storage, storage_bytes=b.rows[0].storage_bytes)
    b.add("fc1.input", "scale_inv", nbytes=MIB)
    b.add("fc1.weight", "tensor", nbytes=8 * MIB, is_parameter=True)
    return make_case(TE_BF16, b.rows)


def test_kinds_add_up_to_saved_bytes() -> None:
    case = _case_with_a_view()
    kinds = kind_breakdown(case)
    assert sum(kinds.values()) == case.totals.saved_bytes
    assert kinds == {"tensor": 4_928_307, "scale_inv": MIB}


def test_the_by_kind_cell_shows_storage_bytes() -> None:
    case = _case_with_a_view()
    md = render_markdown(make_report([case]))
    assert f"tensor {fmt_bytes(4_928_307)}" in md
    assert "metadata" not in md  # its bytes are the tensor's storage, counted there


def test_the_by_kind_deltas_use_the_same_measure() -> None:
    base = _case_with_a_view()
    b = RowBuilder()
    b.add("fc1.input", "tensor", nbytes=4_928_307)
    b.add("fc1.input", "metadata", nbytes=4 * MIB)
    b.rows[1] = dataclasses.replace(b.rows[1], storage=b.rows[0].storage, storage_bytes=b.rows[0].storage_bytes)
    b.add("fc1.input", "scale_inv", nbytes=2 * MIB)  # +1 MiB
    b.add("fc1.weight", "tensor", nbytes=8 * MIB, is_parameter=True)
    cur = make_case(TE_BF16, b.rows)
    (diff,) = compare_reports(make_report([base]), make_report([cur])).cases
    cell = _kinds_cell(cur, diff)
    assert cell == f"tensor {fmt_bytes(4_928_307)}, scale\\_inv 2.0 MiB (+1.0 MiB)", cell
