"""Rich tables for terminals: one table per case (rows grouped by operand), then a summary."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import RenderableType
from rich.markup import escape
from rich.text import Text

from memaudit.render.layout import Sheet, fit, text_col, value_col
from memaudit.render.unread import verdict_cell
from memaudit.report import CaseReport, Row
from memaudit.targets import registry
from memaudit.units import fmt_bytes, fmt_shape

_STATUS_STYLE = {"ok": "green", "skipped": "yellow", "error": "red"}


def _sort_key(row: Row) -> tuple[str, int, int]:
    return (row.operand or "~", row.group if row.group is not None else -1, row.index)


def _title(case: CaseReport) -> Text:
    title = Text(case.id)
    title.append(f"  {case.status}", style=_STATUS_STYLE.get(case.status, ""))
    if not case.complete:
        title.append("  INCOMPLETE", style="bold red")
    if case.emulation is not None:
        e = case.emulation
        title.append(f"  {e.label()}", style="bold magenta")
        title.append(f" (TE's real Python, stand-in kernels: {', '.join(e.standins) or 'none'})")
        if e.host():
            title.append(f" on {e.host()}")
    elif case.execution == "estimated":
        title.append(f"  {registry.execution_label(case) or 'estimated'}", style="bold cyan")
        title.append(" (TE's layout rules; no kernel or TE code ran)")
    return title


def _expected_cell(row: Row) -> Text:
    if row.expected_bytes is None:
        return Text("")
    if row.expected_bytes == row.bytes:
        return Text(fmt_bytes(row.expected_bytes), style="green")
    return Text(f"{fmt_bytes(row.expected_bytes)} ≠", style="bold red")


_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}
"""dtype names the compact layout shortens."""


def _case_sheet(case: CaseReport, show_expected: bool, compact: bool) -> Sheet:
    """Wide: # operand what shape bytes where storage [expected]. Compact: # operand shape bytes
    [expected] what, the notes and the source line (``--stack``) in ``what``, no ``where`` and no
    storage id, short dtype names. An analysed case (``--unread``) adds ``read``: each row's
    verdict (its reader, or why it is unknown); compact, it goes in ``what``."""
    analysed = case.unread is not None
    if compact:
        cols = [value_col("#", "right"), value_col("operand"), value_col("shape"), value_col("bytes", "right")]
        cols += [value_col("expected", "right")] if show_expected else []
        cols.append(text_col("what"))
    else:
        cols = [
            value_col("#", "right"),
            value_col("operand"),
            text_col("what"),
            value_col("shape"),
            value_col("bytes", "right"),
            text_col("where"),
            text_col("storage"),
        ]
        cols += [text_col("read")] if analysed else []
        cols += [value_col("expected", "right")] if show_expected else []
    sheet = Sheet(cols, title=_title(case), caption=Text.from_markup(totals_line(case)), keep={"expected"})
    previous = None
    for row in sorted(case.rows, key=_sort_key):
        by_module = row.module is not None and (row.operand or "").startswith(f"{row.module}:")
        family = row.module if by_module else (row.operand or "?").split("[")[0]
        if previous is not None and family != previous:
            sheet.add_section()
        previous = family
        operand = row.operand or "?"
        if row.group is not None and not operand.endswith("]"):
            operand += f" g{row.group}"
        what = " ".join(p for p in (row.format, row.kind, row.orientation) if p)
        expected = [_expected_cell(row)] if show_expected else []
        if compact:
            dtype = _SHORT_DTYPE.get(row.dtype, row.dtype)
            what = " ".join(
                [
                    what,
                    *row.notes(),
                    *([f"at {row.source}"] if row.source else []),  # --stack's source line
                    *([verdict_cell(row)] if analysed else []),
                ]
            )
            sheet.add_row(
                str(row.index), operand, f"{fmt_shape(row.shape)} {dtype}", fmt_bytes(row.bytes), *expected, what
            )
            continue
        where = ".".join(p for p in (row.container, row.slot) if p) if row.container else (row.slot or "")
        if by_module and not row.container:
            where = ""  # the operand names module, node and attribute
        elif row.op:
            where = f"{where} ({row.op})" if where else row.op
        if row.module is not None and not by_module:
            where = f"{where} in {row.module}" if where else f"in {row.module}"
        if row.source:
            where = f"{where} at {row.source}" if where else row.source
        storage = " ".join(n for n in (row.storage or "", *row.notes()) if n)
        verdict = [_verdict_text(row)] if analysed else []
        sheet.add_row(
            str(row.index),
            operand,
            what,
            f"{fmt_shape(row.shape)} {row.dtype}",
            fmt_bytes(row.bytes),
            where,
            storage,
            *verdict,
            *expected,
        )
    return sheet


_VERDICT_STYLE = {"read": "green", "unread": "bold red", "unknown": "yellow"}


def _verdict_text(row: Row) -> Text:
    """The ``read`` cell: plain text (an op name or a reason is not markup), styled by verdict."""
    return Text(verdict_cell(row), style=_VERDICT_STYLE.get(row.read or "", ""))


def case_table(case: CaseReport, *, show_expected: bool = False, width: int | None = None) -> RenderableType:
    """All rows of a case, grouped by operand; in ``width`` columns (None: as wide as it needs)."""
    return fit(width, _case_sheet(case, show_expected, False), lambda: _case_sheet(case, show_expected, True))


def totals_line(case: CaseReport) -> str:
    """The caption under a case table (rich markup): the totals, then whatever is counted apart."""
    t = case.totals
    parts = [
        f"rows {t.rows}",
        f"logical {fmt_bytes(t.logical_bytes)}",
        f"physical {fmt_bytes(t.physical_bytes)}",
        f"parameters {fmt_bytes(t.parameter_bytes)}",
    ]
    if t.cached_bytes:  # copies a module keeps across steps, counted apart as parameters are
        parts.append(f"cached {fmt_bytes(t.cached_bytes)}")
    parts.append(f"[bold]saved {fmt_bytes(t.saved_bytes)}[/]")
    for label, n in (
        ("of it forward outputs", t.output_bytes),
        ("of it ctx attributes", t.ctx_bytes),
        ("on the host", t.host_bytes),
        ("residence unknown", t.unknown_bytes),
    ):
        if n:
            parts.append(f"{label} {fmt_bytes(n)}")
    if case.unread is not None:
        unread = t.unread_bytes or 0
        parts.append(f"verdicts by {escape(' + '.join(case.unread.methods))}")
        parts.append(f"[bold red]never read {fmt_bytes(unread)}[/]" if unread else "never read 0 B")
    if t.freed_rows:
        parts.append(f"freed {t.freed_rows} rows ({fmt_bytes(t.freed_bytes)}, not counted)")
    alloc = case.allocator
    if alloc and alloc.get("available"):
        parts.append(f"allocator hidden {alloc['hidden_bytes']:+d} B")
    line = " · ".join(parts)
    if not case.complete:
        line += "\n[bold red]incomplete:[/] " + escape(case.warnings[0] if case.warnings else "see warnings")
    return line


def _summary_sheet(cases: Iterable[CaseReport], compact: bool) -> Sheet:
    cases = list(cases)
    analysed = any(c.unread is not None for c in cases)
    cols = [
        value_col("case"),
        text_col("status"),
        value_col("path"),
        value_col("rows", "right"),
        value_col("saved", "right"),
    ]
    cols += [value_col("never read", "right")] if analysed else []
    cached = any(c.status == "ok" and c.totals.cached_bytes for c in cases)
    if not compact:
        cols += [value_col("parameters", "right")]
        cols += [value_col("cached", "right")] if cached else []
        cols += [value_col("logical", "right")]
    cols.append(text_col("reason"))
    sheet = Sheet(cols, title="summary", group=0)
    for c in cases:
        path = registry.path_label(c) or ""
        ok = c.status == "ok"
        status = Text(c.status, style=_STATUS_STYLE.get(c.status, ""))
        if ok and not c.complete:
            status.append(" incomplete", style="bold red")
        label = registry.execution_label(c)
        if label is not None:
            status.append(f" {label}", style="magenta" if c.emulation is not None else "cyan")
        cells: list[str | Text] = [
            c.id,
            status,
            path,
            str(c.totals.rows) if ok else "",
            fmt_bytes(c.totals.saved_bytes) if ok else "",
        ]
        if analysed:
            cells.append(_unread_cell(c))
        if not compact:
            cells.append(fmt_bytes(c.totals.parameter_bytes) if ok else "")
            if cached:
                cells.append(fmt_bytes(c.totals.cached_bytes) if ok else "")
            cells.append(fmt_bytes(c.totals.logical_bytes) if ok else "")
        cells.append(c.reason or "")
        sheet.add_row(*cells)
    return sheet


def _unread_cell(case: CaseReport) -> Text:
    """Unread bytes of an analysed case; ``not analysed`` for one run without ``--unread``."""
    if case.status != "ok":
        return Text("")
    if case.unread is None:
        return Text("not analysed", style="dim")
    n = case.totals.unread_bytes or 0
    return Text(fmt_bytes(n), style="bold red" if n else "green")


def summary_table(cases: Iterable[CaseReport], *, width: int | None = None) -> RenderableType:
    """One line per case: status, path, row count and the byte totals, in ``width`` columns.

    Compact: each case id on a line of its own, above its status, rows, saved bytes and reason.
    """
    cases = list(cases)
    return fit(width, _summary_sheet(cases, False), lambda: _summary_sheet(cases, True))
