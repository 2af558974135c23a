"""Renderers of ``memaudit estimate`` (the estimator's own, so they live with it): rich tables, the sweep's text lines
and markdown.

One configuration: :func:`rows_table`, :func:`padding_table`, :func:`diff_table`, :func:`totals_line`
and :func:`markdown_single`. A sweep (:class:`~memaudit.te.estimate.SweepPoint` s): :func:`sweep_lines`
and :func:`markdown_sweep`. The plots are :mod:`memaudit.render.plots`.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from memaudit.render.layout import Sheet, fit, text_col, value_col
from memaudit.report import CaseReport, Row
from memaudit.te.estimate import TE_VERSION, SweepPoint, bytes_by_kind, diff_cases
from memaudit.units import fmt_bytes, fmt_delta, fmt_shape

KIND_ORDER = ("data", "scale_inv", "amax", "scale", "metadata", "tensor")


# ---- tables --------------------------------------------------------------------------------------


def _where(r: Row) -> str:
    return ".".join(p for p in (r.container, r.slot) if p)


def _operand(operand: str | None, group: int | None) -> str:
    """``fc1.input g3`` (compact tables: the group beside the operand)."""
    name = operand or ""
    return name if group is None or name.endswith("]") else f"{name} g{group}"


def _rows_sheet(case: CaseReport, variant: str, compact: bool) -> Sheet:
    tt = case.totals
    caption = (
        f"rows {tt.rows} · logical {fmt_bytes(tt.logical_bytes)} · physical {fmt_bytes(tt.physical_bytes)} · "
        f"parameters {fmt_bytes(tt.parameter_bytes)} · saved {fmt_bytes(tt.saved_bytes)}"
    )
    if compact:  # each operand on a line of its own; container.slot, format, kind and orientation in one column
        sheet = Sheet(
            [
                value_col("operand"),
                value_col("#", "right"),
                value_col("shape"),
                value_col("bytes", "right"),
                text_col("what"),
            ],
            title=f"{case.id}  [{variant}]",
            caption=caption,
            group=0,
        )
        for r in case.rows:
            flags = [n for n in r.notes() if n != r.note]
            what = " ".join(p for p in (_where(r), r.format, r.kind, r.orientation or "", *flags) if p)
            sheet.add_row(
                _operand(r.operand, r.group), str(r.index), f"{fmt_shape(r.shape)} {r.dtype}", fmt_bytes(r.bytes), what
            )
        return sheet
    cols = [
        value_col("#", "right"),
        value_col("operand"),
        value_col("g", "right"),
        text_col("container.slot"),
        value_col("format"),
        value_col("kind"),
        value_col("orient."),
        value_col("shape"),
        value_col("dtype"),
        value_col("bytes", "right"),
        value_col("storage"),
        text_col("source / note"),
    ]
    sheet = Sheet(cols, title=f"{case.id}  [{variant}]", caption=caption)
    for r in case.rows:
        sheet.add_row(
            str(r.index),
            r.operand or "",
            "" if r.group is None else str(r.group),
            _where(r),
            r.format,
            r.kind,
            r.orientation or "",
            fmt_shape(r.shape),
            r.dtype,
            fmt_bytes(r.bytes),
            r.storage or "",
            "; ".join(r.notes()),
        )
    return sheet


def rows_table(case: CaseReport, variant: str, *, width: int | None = None) -> RenderableType:
    """Every estimated row in pack-hook order, in ``width`` columns (compact: each operand on a
    line of its own above its rows, no storage id and no source note, the buffer's
    container.slot, format, kind and orientation in one column)."""
    return fit(width, _rows_sheet(case, variant, False), lambda: _rows_sheet(case, variant, True))


def _padding_sheet(case: CaseReport, compact: bool) -> Sheet:
    pad: dict[str, Any] = dict(case.path or {}).get("padding", {})
    if compact:
        cols = [
            value_col("operand"),
            value_col("#", "right"),
            text_col("container.slot"),
            value_col("padded", "right"),
            value_col("ideal", "right"),
            value_col("padding", "right"),
        ]
    else:
        cols = [
            value_col("#", "right"),
            value_col("operand"),
            value_col("g", "right"),
            text_col("container.slot"),
            value_col("padded", "right"),
            value_col("ideal", "right"),
            value_col("padding", "right"),
        ]
    sheet = Sheet(
        cols,
        title="padding (TE's 128x4 / 4-multiple scale tiles)",
        group=0 if compact else None,
        caption=f"all rows: padded {fmt_bytes(pad.get('padded_bytes'))} · ideal {fmt_bytes(pad.get('ideal_bytes'))}",
    )
    by_index = {r.index: r for r in case.rows}
    for p in pad.get("rows", []):
        r = by_index[p["index"]]
        numbers = [
            fmt_bytes(p["padded_bytes"]),
            fmt_bytes(p["ideal_bytes"]),
            fmt_bytes(p["padded_bytes"] - p["ideal_bytes"]),
        ]
        if compact:
            sheet.add_row(_operand(r.operand, r.group), str(r.index), _where(r), *numbers)
        else:
            sheet.add_row(str(r.index), r.operand or "", "" if r.group is None else str(r.group), _where(r), *numbers)
    return sheet


def padding_table(case: CaseReport, *, width: int | None = None) -> RenderableType:
    """Per buffer: padded bytes (what TE allocates) vs ideal bytes (no tile padding)."""
    return fit(width, _padding_sheet(case, False), lambda: _padding_sheet(case, True))


def _diff_sheet(entries: list, va: str, vb: str, compact: bool) -> Sheet:
    title = f"{va} -> {vb}: what the change saves"
    if compact:
        sheet = Sheet(
            [
                value_col("operand"),
                value_col("shape"),
                value_col(va, "right"),
                value_col(vb, "right"),
                value_col("delta", "right"),
                text_col("what"),
            ],
            title=title,
            group=0,
        )
        for e in entries:
            what = " ".join(
                p for p in (".".join(p for p in (e.container, e.slot) if p), e.kind, e.orientation or "") if p
            )
            sheet.add_row(
                _operand(e.operand, e.group),
                f"{fmt_shape(e.shape)} {e.dtype}",
                fmt_bytes(e.bytes_a),
                fmt_bytes(e.bytes_b),
                fmt_delta(e.delta),
                what,
            )
        return sheet
    cols = [
        value_col("operand"),
        value_col("g", "right"),
        text_col("container.slot"),
        value_col("kind"),
        value_col("orient."),
        value_col("shape"),
        value_col("dtype"),
        value_col(va, "right"),
        value_col(vb, "right"),
        value_col("delta", "right"),
        text_col("source"),
    ]
    sheet = Sheet(cols, title=title)
    for e in entries:
        sheet.add_row(
            e.operand or "",
            "" if e.group is None else str(e.group),
            ".".join(p for p in (e.container, e.slot) if p),
            e.kind,
            e.orientation or "",
            fmt_shape(e.shape),
            e.dtype,
            fmt_bytes(e.bytes_a),
            fmt_bytes(e.bytes_b),
            fmt_delta(e.delta),
            e.note or "",
        )
    return sheet


def diff_table(
    a: CaseReport, b: CaseReport, va: str, vb: str, *, width: int | None = None
) -> tuple[RenderableType, str]:
    """Buffers that differ between two variants, and a one-line summary of the saved bytes
    (compact: no source column)."""
    entries, ta, tb = diff_cases(a, b)
    table = fit(width, _diff_sheet(entries, va, vb, False), lambda: _diff_sheet(entries, va, vb, True))
    d = tb.saved_bytes - ta.saved_bytes
    pct = f" ({100.0 * d / ta.saved_bytes:+.1f}%)" if ta.saved_bytes else ""
    summary = f"saved bytes: {va} {fmt_bytes(ta.saved_bytes)} -> {vb} {fmt_bytes(tb.saved_bytes)}: {fmt_delta(d)}{pct}"
    return table, summary


def totals_line(case: CaseReport, variant: str) -> str:
    """One line: the saved bytes of ``case`` and their split by kind."""
    kinds = bytes_by_kind(case)
    return f"{variant}: saved {fmt_bytes(case.totals.saved_bytes)} ({case.totals.saved_bytes} B) · " + " · ".join(
        f"{k} {fmt_bytes(kinds[k])}" for k in KIND_ORDER if k in kinds
    )


# ---- sweep -----------------------------------------------------------------------------------------
def sweep_lines(points: list[SweepPoint], variant: str, diff: str | None) -> list[str]:
    """One aligned plain-text line per point (rich tables are too slow for thousands of lines)."""
    kinds = [k for k in KIND_ORDER if any(p.totals and p.totals.by_kind.get(k) for p in points)]
    head = ["recipe", "path", "G", "T", "H", "F", f"saved {variant}"]
    if diff:
        head += [f"saved {diff}", "delta"]
    head += kinds
    table: list[list[str]] = [head]
    notes: list[str] = [""]
    for p in points:
        if p.totals is None or p.config is None:
            cells = [p.recipe, "-", str(p.groups), str(p.tokens), str(p.hidden), str(p.ffn)]
            table.append(cells + [""] * (len(head) - len(cells)))
            notes.append(f"skipped: {p.reason}")
            continue
        cells = [
            p.recipe,
            p.config.path,
            str(p.groups),
            str(p.tokens),
            str(p.hidden),
            str(p.ffn),
            fmt_bytes(p.totals.saved_bytes),
        ]
        if diff and p.diff_totals is not None:
            cells += [fmt_bytes(p.diff_totals.saved_bytes), fmt_delta(p.diff_totals.saved_bytes - p.totals.saved_bytes)]
        cells += [fmt_bytes(p.totals.by_kind.get(k, 0)) for k in kinds]
        table.append(cells)
        notes.append("")
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    left = {0, 1}
    lines = []
    for row, note in zip(table, notes, strict=True):
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append(("  ".join(cells) + ("  " + note if note else "")).rstrip())
    return [f"estimate sweep [{variant}], TE {TE_VERSION} (modelled)"] + lines


# ---- markdown ----------------------------------------------------------------------------------------
def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_single(case: CaseReport, variant: str, diff: tuple[CaseReport, str] | None) -> str:
    """One configuration: totals, the difference to ``diff`` (another variant's case) and every row."""
    tt = case.totals
    lines = [
        f"## memaudit estimate: `{case.id}` [{variant}]",
        "",
        f"TE {TE_VERSION} (modelled) · path **{case.path['name'] if case.path else ''}** · "
        f"saved **{fmt_bytes(tt.saved_bytes)}** · physical {fmt_bytes(tt.physical_bytes)} · "
        f"parameters {fmt_bytes(tt.parameter_bytes)} · {tt.rows} rows",
        "",
    ]
    if diff is not None:
        other, vb = diff
        entries, ta, tb = diff_cases(case, other)
        d = tb.saved_bytes - ta.saved_bytes
        lines += [
            f"### {variant} -> {vb}: {fmt_delta(d)}",
            "",
            "| operand | g | container.slot | kind | orient. | shape | " + f"{variant} | {vb} | delta | source |",
            "|---|---:|---|---|---|---|---:|---:|---:|---|",
        ]
        for e in entries:
            lines.append(
                f"| {e.operand or ''} | {'' if e.group is None else e.group} | "
                f"{'.'.join(p for p in (e.container, e.slot) if p)} | {e.kind} | {e.orientation or ''} | "
                f"{fmt_shape(e.shape)} {e.dtype} | {fmt_bytes(e.bytes_a)} | {fmt_bytes(e.bytes_b)} | "
                f"{fmt_delta(e.delta)} | "
                f"{_md_escape(e.note or '')} |"
            )
        lines.append("")
    lines += [
        "<details><summary>rows</summary>",
        "",
        "| # | operand | g | container.slot | format | kind | orient. | shape | dtype | bytes | storage | note |",
        "|---:|---|---:|---|---|---|---|---|---|---:|---|---|",
    ]
    for r in case.rows:
        note = "; ".join(
            x
            for x in (
                ("param" if r.is_parameter else ""),
                (f"dup of #{r.duplicate_of}" if r.duplicate_of is not None else ""),
                r.note or "",
            )
            if x
        )
        lines.append(
            f"| {r.index} | {r.operand or ''} | {'' if r.group is None else r.group} | {_where(r)} | {r.format} | "
            f"{r.kind} | {r.orientation or ''} | {fmt_shape(r.shape)} | {r.dtype} | {fmt_bytes(r.bytes)} | "
            f"{r.storage or ''} | {_md_escape(note)} |"
        )
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def markdown_sweep(points: list[SweepPoint], variant: str, diff: str | None) -> str:
    """One table row per point, skipped points with their reason."""
    head = "| recipe | path | G | T | H | F | saved |" + (f" saved {diff} | delta |" if diff else "")
    sep = "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if diff else "")
    lines = [f"## memaudit estimate sweep [{variant}]", "", head, sep]
    for p in points:
        if p.totals is None or p.config is None:
            lines.append(
                f"| {p.recipe} | skipped: {_md_escape(p.reason or '')} | {p.groups} | {p.tokens} | {p.hidden} | "
                f"{p.ffn} | |" + (" | |" if diff else "")
            )
            continue
        row = (
            f"| {p.recipe} | {p.config.path} | {p.groups} | {p.tokens} | {p.hidden} | {p.ffn} | "
            f"{fmt_bytes(p.totals.saved_bytes)} |"
        )
        if diff and p.diff_totals is not None:
            row += (
                f" {fmt_bytes(p.diff_totals.saved_bytes)} | "
                f"{fmt_delta(p.diff_totals.saved_bytes - p.totals.saved_bytes)} |"
            )
        lines.append(row)
    lines.append("")
    return "\n".join(lines)
