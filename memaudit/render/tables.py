"""Rich tables for terminals: one table per case (rows grouped by operand), then a summary."""

from __future__ import annotations

from collections.abc import Iterable

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memaudit.report import CaseReport, Row
from memaudit.targets import registry
from memaudit.units import fmt_bytes, fmt_shape

_STATUS_STYLE = {"ok": "green", "skipped": "yellow", "error": "red"}


def _sort_key(row: Row) -> tuple[str, int, int]:
    return (row.operand or "~", row.group if row.group is not None else -1, row.index)


def case_table(case: CaseReport, *, show_expected: bool = False) -> Table:
    """All rows of a case, grouped by operand."""
    title = f"{escape(case.id)}  [{_STATUS_STYLE.get(case.status, '')}]{case.status}[/]"
    if not case.complete:
        title += "  [bold red]INCOMPLETE[/]"
    if case.emulation is not None:
        e = case.emulation
        title += (f"  [bold magenta]{escape(e.label())}[/] (TE's real Python, stand-in kernels: "
                  f"{escape(', '.join(e.standins) or 'none')})")
    table = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    for col, justify in (
        ("#", "right"),
        ("operand", "left"),
        ("what", "left"),
        ("shape", "left"),
        ("bytes", "right"),
        ("where", "left"),
        ("storage", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    if show_expected:
        table.add_column("expected", justify="right")
    previous = None
    for row in sorted(case.rows, key=_sort_key):
        by_module = row.module is not None and (row.operand or "").startswith(f"{row.module}:")
        family = row.module if by_module else (row.operand or "?").split("[")[0]
        if previous is not None and family != previous:
            table.add_section()
        previous = family
        notes = [row.storage or "", *row.notes()]
        where = ".".join(p for p in (row.container, row.slot) if p) if row.container else (row.slot or "")
        if by_module and not row.container:
            where = ""  # the operand names module, node and attribute
        elif row.op:
            where = f"{where} ({row.op})" if where else row.op
        if row.module is not None and not by_module:
            where = f"{where} in {row.module}" if where else f"in {row.module}"
        if row.source:
            where = f"{where} at {row.source}" if where else row.source
        operand = row.operand or "?"
        if row.group is not None and not operand.endswith("]"):
            operand += f" g{row.group}"
        cells = [
            str(row.index),
            operand,
            " ".join(p for p in (row.format, row.kind, row.orientation) if p),
            f"{fmt_shape(row.shape)} {row.dtype}",
            fmt_bytes(row.bytes),
            where,
            " ".join(n for n in notes if n),
        ]
        if show_expected:
            if row.expected_bytes is None:
                cells.append("")
            elif row.expected_bytes == row.bytes:
                cells.append(Text(fmt_bytes(row.expected_bytes), style="green"))  # type: ignore[arg-type]
            else:
                cells.append(Text(f"{fmt_bytes(row.expected_bytes)} ≠", style="bold red"))  # type: ignore[arg-type]
        table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))  # operands and notes are not markup
    table.caption = totals_line(case)
    table.caption_justify = "left"
    return table


def totals_line(case: CaseReport) -> str:
    """The caption under a case table (rich markup): the totals, then whatever is counted apart."""
    t = case.totals
    parts = [
        f"rows {t.rows}",
        f"logical {fmt_bytes(t.logical_bytes)}",
        f"physical {fmt_bytes(t.physical_bytes)}",
        f"parameters {fmt_bytes(t.parameter_bytes)}",
        f"[bold]saved {fmt_bytes(t.saved_bytes)}[/]",
    ]
    for label, n in (
        ("of it forward outputs", t.output_bytes),
        ("of it ctx attributes", t.ctx_bytes),
        ("on the host", t.host_bytes),
        ("residence unknown", t.unknown_bytes),
    ):
        if n:
            parts.append(f"{label} {fmt_bytes(n)}")
    if t.freed_rows:
        parts.append(f"freed {t.freed_rows} rows ({fmt_bytes(t.freed_bytes)}, not counted)")
    alloc = case.allocator
    if alloc and alloc.get("available"):
        parts.append(f"allocator hidden {alloc['hidden_bytes']:+d} B")
    line = " · ".join(parts)
    if not case.complete:
        line += "\n[bold red]incomplete:[/] " + escape(case.warnings[0] if case.warnings else "see warnings")
    return line


def summary_table(cases: Iterable[CaseReport]) -> Table:
    """One line per case: status, path, row count and the byte totals."""
    table = Table(title="summary", title_justify="left", header_style="bold")
    for col, justify in (
        ("case", "left"),
        ("status", "left"),
        ("path", "left"),
        ("rows", "right"),
        ("saved", "right"),
        ("parameters", "right"),
        ("logical", "right"),
        ("reason", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for c in cases:
        path = registry.path_label(c.target, c.path) or ""
        ok = c.status == "ok"
        status = f"[{_STATUS_STYLE.get(c.status, '')}]{c.status}[/]"
        if ok and not c.complete:
            status += " [bold red]incomplete[/]"
        if c.emulation is not None:
            status += f" [magenta]{escape(c.emulation.label())}[/]"
        table.add_row(
            Text(c.id),  # type: ignore[arg-type]
            status,
            path,
            str(c.totals.rows) if ok else "",
            fmt_bytes(c.totals.saved_bytes) if ok else "",
            fmt_bytes(c.totals.parameter_bytes) if ok else "",
            fmt_bytes(c.totals.logical_bytes) if ok else "",
            Text(c.reason or ""),  # type: ignore[arg-type]
        )
    return table
