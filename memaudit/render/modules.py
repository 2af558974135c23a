"""What should I checkpoint? The case's rows grouped by module call, largest first (rich)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from memaudit.report import CaseReport
from memaudit.units import fmt_bytes


def _indices(rows: list[int], limit: int = 8) -> str:
    text = ", ".join(f"#{i}" for i in rows[:limit])
    return text + (f", … ({len(rows)} in all)" if len(rows) > limit else "")


def module_table(case: CaseReport, *, limit: int = 12) -> RenderableType | None:
    """The largest module groups (``case.modules``): rows and saved bytes of each call with the calls
    inside it, and what a checkpoint of it would free (bytes and rows). None when rows name no module."""
    if not case.modules:
        return None
    table = Table(
        title="what to checkpoint: saved bytes by module call (with the calls inside it)", title_justify="left"
    )
    table.add_column("module")
    table.add_column("rows", justify="right")
    table.add_column("saved", justify="right")
    table.add_column("checkpoint frees", justify="right")
    table.add_column("rows it frees")
    for g in case.modules[:limit]:
        table.add_row(
            escape(g.module),
            str(len(g.rows)),
            fmt_bytes(g.saved_bytes),
            fmt_bytes(g.frees_bytes),
            _indices(g.frees) or "-",
        )
    if len(case.modules) > limit:
        table.caption = f"{len(case.modules) - limit} smaller module calls not shown (all in the JSON: modules)"
    return table
