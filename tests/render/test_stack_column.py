"""``--stack``'s source line (file:line) stays in the case table at every console width: the
compact layout, below the width the wide table needs, carries it in its ``what`` column."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.console import Console

from memaudit.render.tables import case_table
from memaudit.report import load_report

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("width", [60, 80, 100, 120, 142, 143, 200])
def test_the_source_column_survives_every_width(width: int) -> None:
    case = load_report(ROOT / "reports/cpu/reference.json").cases[0]
    rows = [dataclasses.replace(r, source=f"models/my_block.py:{100 + r.index}") for r in case.rows]
    case = dataclasses.replace(case, rows=rows)
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(case_table(case, width=width))
    text = console.export_text()
    for r in rows:
        assert r.source in text, (width, r.source)
    assert all(len(line) <= width for line in text.splitlines()), width
