"""Renderers of ``memaudit estimate``: rich tables, the sweep's text lines and markdown.

One configuration: :func:`rows_table`, :func:`padding_table`, :func:`diff_table`, :func:`totals_line`
and :func:`markdown_single`. A sweep (:class:`~memaudit.te.estimate.SweepPoint` s): :func:`sweep_lines`
and :func:`markdown_sweep`. The plots are :mod:`memaudit.render.plots`.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from memaudit.report import CaseReport, Row
from memaudit.te.estimate import TE_VERSION, SweepPoint, bytes_by_kind, diff_cases
from memaudit.units import fmt_bytes, fmt_delta, fmt_shape

KIND_ORDER = ("data", "scale_inv", "amax", "scale", "metadata", "tensor")


# ---- tables --------------------------------------------------------------------------------------


def _cells(*values: str) -> list[Text]:
    """Table cells as plain Text: operands like ``fc1.weight[0]`` must not be read as rich markup."""
    return [Text(v) for v in values]


def _where(r: Row) -> str:
    return ".".join(p for p in (r.container, r.slot) if p)


def rows_table(case: CaseReport, variant: str) -> Table:
    """Every estimated row in pack-hook order."""
    t = Table(title=Text(f"{case.id}  [{variant}]"), title_justify="left", header_style="bold")
    for col, j in (("#", "right"), ("operand", "left"), ("g", "right"), ("container.slot", "left"),
                   ("format", "left"), ("kind", "left"), ("orient.", "left"), ("shape", "left"),
                   ("dtype", "left"), ("bytes", "right"), ("storage", "left"), ("source / note", "left")):
        t.add_column(col, justify=j, overflow="fold")  # type: ignore[arg-type]
    for r in case.rows:
        notes = r.notes()
        t.add_row(*_cells(str(r.index), r.operand or "", "" if r.group is None else str(r.group), _where(r),
                           r.format, r.kind, r.orientation or "", fmt_shape(r.shape), r.dtype, fmt_bytes(r.bytes),
                           r.storage or "", "; ".join(notes)))
    tt = case.totals
    t.caption = (f"rows {tt.rows} · logical {fmt_bytes(tt.logical_bytes)} · physical {fmt_bytes(tt.physical_bytes)} · "
                 f"parameters {fmt_bytes(tt.parameter_bytes)} · saved {fmt_bytes(tt.saved_bytes)}")
    t.caption_justify = "left"
    return t


def padding_table(case: CaseReport) -> Table:
    """Per buffer: padded bytes (what TE allocates) vs ideal bytes (no tile padding)."""
    pad = (case.path or {}).get("padding", {})
    t = Table(title="padding (TE's 128x4 / 4-multiple scale tiles)", title_justify="left", header_style="bold")
    for col, j in (("#", "right"), ("operand", "left"), ("g", "right"), ("container.slot", "left"),
                   ("padded", "right"), ("ideal", "right"), ("padding", "right")):
        t.add_column(col, justify=j)  # type: ignore[arg-type]
    by_index = {r.index: r for r in case.rows}
    for p in pad.get("rows", []):
        r = by_index[p["index"]]
        t.add_row(*_cells(str(r.index), r.operand or "", "" if r.group is None else str(r.group), _where(r),
                           fmt_bytes(p["padded_bytes"]), fmt_bytes(p["ideal_bytes"]),
                           fmt_bytes(p["padded_bytes"] - p["ideal_bytes"])))
    t.caption = f"all rows: padded {fmt_bytes(pad.get('padded_bytes'))} · ideal {fmt_bytes(pad.get('ideal_bytes'))}"
    t.caption_justify = "left"
    return t


def diff_table(a: CaseReport, b: CaseReport, va: str, vb: str) -> tuple[Table, str]:
    """Buffers that differ between two variants, and a one-line summary of the saved bytes."""
    entries, ta, tb = diff_cases(a, b)
    t = Table(title=Text(f"{va} -> {vb}: what the change saves"), title_justify="left", header_style="bold")
    for col, j in (("operand", "left"), ("g", "right"), ("container.slot", "left"), ("kind", "left"),
                   ("orient.", "left"), ("shape", "left"), ("dtype", "left"), (va, "right"), (vb, "right"),
                   ("delta", "right"), ("source", "left")):
        t.add_column(col, justify=j, overflow="fold")  # type: ignore[arg-type]
    for e in entries:
        t.add_row(*_cells(e.operand or "", "" if e.group is None else str(e.group),
                           ".".join(p for p in (e.container, e.slot) if p), e.kind, e.orientation or "",
                           fmt_shape(e.shape), e.dtype, fmt_bytes(e.bytes_a), fmt_bytes(e.bytes_b), fmt_delta(e.delta),
                           e.note or ""))
    d = tb.saved_bytes - ta.saved_bytes
    pct = f" ({100.0 * d / ta.saved_bytes:+.1f}%)" if ta.saved_bytes else ""
    summary = f"saved bytes: {va} {fmt_bytes(ta.saved_bytes)} -> {vb} {fmt_bytes(tb.saved_bytes)}: {fmt_delta(d)}{pct}"
    return t, summary


def totals_line(case: CaseReport, variant: str) -> str:
    """One line: the saved bytes of ``case`` and their split by kind."""
    kinds = bytes_by_kind(case)
    return (f"{variant}: saved {fmt_bytes(case.totals.saved_bytes)} ({case.totals.saved_bytes} B) · "
            + " · ".join(f"{k} {fmt_bytes(kinds[k])}" for k in KIND_ORDER if k in kinds))


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
        cells = [p.recipe, p.config.path, str(p.groups), str(p.tokens), str(p.hidden), str(p.ffn),
                 fmt_bytes(p.totals.saved_bytes)]
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
        lines += [f"### {variant} -> {vb}: {fmt_delta(d)}", "",
                  "| operand | g | container.slot | kind | orient. | shape | " + f"{variant} | {vb} | delta | source |",
                  "|---|---:|---|---|---|---|---:|---:|---:|---|"]
        for e in entries:
            lines.append(
                f"| {e.operand or ''} | {'' if e.group is None else e.group} | "
                f"{'.'.join(p for p in (e.container, e.slot) if p)} | {e.kind} | {e.orientation or ''} | "
                f"{fmt_shape(e.shape)} {e.dtype} | {fmt_bytes(e.bytes_a)} | {fmt_bytes(e.bytes_b)} | {fmt_delta(e.delta)} | "
                f"{_md_escape(e.note or '')} |")
        lines.append("")
    lines += ["<details><summary>rows</summary>", "",
              "| # | operand | g | container.slot | format | kind | orient. | shape | dtype | bytes | storage | note |",
              "|---:|---|---:|---|---|---|---|---|---|---:|---|---|"]
    for r in case.rows:
        note = "; ".join(x for x in (("param" if r.is_parameter else ""),
                                     (f"dup of #{r.duplicate_of}" if r.duplicate_of is not None else ""),
                                     r.note or "") if x)
        lines.append(f"| {r.index} | {r.operand or ''} | {'' if r.group is None else r.group} | {_where(r)} | {r.format} | "
                     f"{r.kind} | {r.orientation or ''} | {fmt_shape(r.shape)} | {r.dtype} | {fmt_bytes(r.bytes)} | "
                     f"{r.storage or ''} | {_md_escape(note)} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def markdown_sweep(points: list[SweepPoint], variant: str, diff: str | None) -> str:
    """One table row per point, skipped points with their reason."""
    head = "| recipe | path | G | T | H | F | saved |" + (f" saved {diff} | delta |" if diff else "")
    sep = "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if diff else "")
    lines = [f"## memaudit estimate sweep [{variant}]", "", head, sep]
    for p in points:
        if p.totals is None or p.config is None:
            lines.append(f"| {p.recipe} | skipped: {_md_escape(p.reason or '')} | {p.groups} | {p.tokens} | {p.hidden} | {p.ffn} | |"
                         + (" | |" if diff else ""))
            continue
        row = (f"| {p.recipe} | {p.config.path} | {p.groups} | {p.tokens} | {p.hidden} | {p.ffn} | "
               f"{fmt_bytes(p.totals.saved_bytes)} |")
        if diff and p.diff_totals is not None:
            row += f" {fmt_bytes(p.diff_totals.saved_bytes)} | {fmt_delta(p.diff_totals.saved_bytes - p.totals.saved_bytes)} |"
        lines.append(row)
    lines.append("")
    return "\n".join(lines)
