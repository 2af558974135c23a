"""Rich rendering of a :class:`~memaudit.judge.baseline.Comparison` for the terminal and CI logs."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.text import Text

from memaudit.judge.baseline import CaseDiff, Comparison, Finding, RowDiff
from memaudit.render.layout import Prose, Sheet, fit, text_col, value_col
from memaudit.report import Row
from memaudit.units import fmt_bytes, fmt_delta, fmt_shape

VERDICT_STYLE = {
    "regression": "bold red",
    "changed": "red",
    "improvement": "green",
    "within tolerance": "yellow",
    "note": "dim",
}


def _value(f: Finding, v: object) -> str:
    if v is None:
        return "-"
    if f.is_bytes and isinstance(v, int):
        return fmt_bytes(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _delta(f: Finding) -> str:
    d = f.delta
    if d is None:
        return ""
    return fmt_delta(d) if f.is_bytes else f"{d:+d}"


def _pct(f: Finding) -> str:
    p = f.pct
    if p is None:
        return ""
    return f"{p:+.2f}%" if abs(p) >= 0.01 or p == 0 else ("+" if p > 0 else "-") + "<0.01%"


def _comparison_sheet(cmp: Comparison, title: str | None, compact: bool) -> Sheet:
    cols = [
        value_col("case"),
        text_col("change"),
        value_col("current", "right"),
        value_col("baseline", "right"),
        value_col("delta", "right"),
        value_col("%" if compact else "delta %", "right"),
        value_col("verdict"),
    ]
    unchanged = sum(1 for d in cmp.cases if not d.findings)
    sheet = Sheet(
        cols,
        title=title,
        group=0,
        caption=f"{unchanged} case{'s' if unchanged != 1 else ''} unchanged" if unchanged else None,
    )
    for diff in cmp.cases:
        first = True
        for f in diff.findings:
            label = f.label if f.numeric else f.text
            verdict = Text(f.verdict, style=VERDICT_STYLE.get(f.verdict, ""))
            sheet.add_row(
                diff.id if first else "",
                label,
                _value(f, f.current),
                _value(f, f.baseline),
                _delta(f),
                _pct(f),
                verdict,
            )
            first = False
        if diff.findings:
            sheet.add_section()
    return sheet


def comparison_table(cmp: Comparison, *, title: str | None = None, width: int | None = None) -> RenderableType:
    """One row per finding: case, what changed, current, baseline, delta, delta %, verdict.

    Compact (``width`` below ``COMPACT_WIDTH`` or too narrow for the wide table): each case id on
    a line of its own above its findings.
    """
    return fit(width, _comparison_sheet(cmp, title, False), lambda: _comparison_sheet(cmp, title, True))


def _shape(r: Row | None) -> str:
    return "-" if r is None else fmt_shape(r.shape)


def _rows_sheet(diff: CaseDiff, compact: bool) -> Sheet:
    if compact:
        cols = [
            text_col("buffer"),
            value_col("shape now"),
            value_col("bytes now", "right"),
            value_col("baseline", "right"),
            value_col("delta", "right"),
        ]
    else:
        cols = [
            text_col("buffer"),
            value_col("shape now"),
            value_col("baseline shape"),
            value_col("dtype"),
            value_col("bytes now", "right"),
            value_col("baseline", "right"),
            value_col("delta", "right"),
        ]
    sheet = Sheet(cols, title=f"rows behind {diff.id}")
    for rd in diff.row_diffs:
        key, shape_now, shape_base, dtype, now, base, delta = _row_cells(rd)
        if compact:
            shape = Text(f"{shape_now.plain} {dtype.plain}")
            if shape_base.plain != shape_now.plain and shape_now.plain != "-" and shape_base.plain != "-":
                shape.append(f"\nwas {shape_base.plain}", style="dim")
            sheet.add_row(key, shape, now, base, delta)
        else:
            sheet.add_row(key, shape_now, shape_base, dtype, now, base, delta)
    return sheet


def rows_table(diff: CaseDiff, *, width: int | None = None) -> RenderableType:
    """The buffers behind a case's changes: added, removed, or resized rows.

    Compact: the dtype beside the current shape, the baseline shape under it where it differs.
    """
    return fit(width, _rows_sheet(diff, False), lambda: _rows_sheet(diff, True))


def _row_cells(rd: RowDiff) -> list[Text]:
    b, c = rd.baseline, rd.current
    ref = c if c is not None else b
    dtype = ref.dtype if ref is not None else "-"
    if b is not None and c is not None and b.dtype != c.dtype:
        dtype = f"{c.dtype} (was {b.dtype})"
    note = "added" if b is None else ("removed" if c is None else "")
    key = Text(rd.key)
    if note:
        key.append(f"  [{note}]", style="dim")
    d = rd.delta
    plain = [_shape(c), _shape(b), dtype, fmt_bytes(c.bytes) if c else "-", fmt_bytes(b.bytes) if b else "-"]
    return [key, *(Text(x) for x in plain), Text(fmt_delta(d), style="red" if d > 0 else ("green" if d < 0 else ""))]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def no_changes_line(cmp: Comparison) -> str:
    """``No changes in N cases`` with the same count as the verdict's ``over K compared cases``:
    the cases not ok in both reports are named by the status they kept (nothing to compare)."""
    n, k = len(cmp.cases), len(cmp.compared)
    if k == n:
        return f"No changes in {_plural(n, 'case')}."
    compared = {id(d) for d in cmp.compared}
    kept: dict[str, int] = {}
    for d in cmp.cases:
        if id(d) not in compared:
            side = d.current if d.current is not None else d.baseline
            status = side.status if side is not None else "missing"
            kept[status] = kept.get(status, 0) + 1
    same = ", ".join(f"{m} {s}" for s, m in sorted(kept.items()))
    return (
        f"No changes in {_plural(n, 'case')}: {k} ok in both reports and compared byte for byte, "
        f"{n - k} with the same status in both ({same}) and no bytes to compare."
    )


def verdict_line(cmp: Comparison) -> Text:
    """One line: OK/FAIL, counts and the total saved-bytes delta over the compared cases."""
    n = len(cmp.compared)
    total = (
        f"saved bytes {fmt_delta(cmp.saved_delta)} ({fmt_bytes(cmp.baseline_saved)} -> "
        f"{fmt_bytes(cmp.current_saved)}) over {n} compared case{'s' if n != 1 else ''}"
    )
    rules = f"tolerance {cmp.tolerance}, fail on {cmp.fail_on}"
    if cmp.regressed:
        fails = len(cmp.failures)
        cases = sum(1 for c in cmp.cases if c.regressed)
        what = (
            f"{cases} case{'s' if cases != 1 else ''} regressed ({fails} finding{'s' if fails != 1 else ''})"
            if fails
            else "no regression"
        )
        if cmp.env_failed:
            what += ", environment differs (--strict-env)"
        if cmp.nothing_compared:
            what = f"no case is ok in both reports, so nothing was compared ({len(cmp.cases)} case ids seen)"
        return Text(f"FAIL: {what}; {total}; {rules}", style="bold red")
    imp = len(cmp.improvements)
    extra = f", {imp} improvement{'s' if imp != 1 else ''}" if imp else ""
    return Text(f"OK: no regression{extra}; {total}; {rules}", style="bold green")


def _message(text: str) -> Prose:
    """A message line, indented; it wraps within the console's width, continued 4 in."""
    return Prose(text, indent=2, hang=4)


def regressions_heading(cmp: Comparison) -> str:
    """``Regressions: 1 case; buffers: 3 added (7 findings: ...)``: the buffers counted once,
    the findings (a case's total and its rollups by operand, kind and orientation count the same
    buffers again) said apart."""
    failures = cmp.failures
    ids = set(f.case for f in failures)
    diffs = [d for d in cmp.cases if d.id in ids]
    counts = {"added": 0, "removed": 0, "changed": 0}
    for d in diffs:
        for r in d.row_diffs:
            counts["added" if r.baseline is None else "removed" if r.current is None else "changed"] += 1
    buffers = ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "none differ"
    return (
        f"Regressions: {len(ids)} case{'s' if len(ids) != 1 else ''}; buffers: {buffers} "
        f"({len(failures)} finding{'s' if len(failures) != 1 else ''} below: a case's total and its rollups by "
        "operand, kind and orientation count the same buffers again):"
    )


def print_comparison(console: Console, cmp: Comparison, *, verbose: bool = False, title: str | None = None) -> None:
    """Print the table of changes, with ``verbose`` the rows behind them, then the verdict, all in
    the console's width."""
    width = console.width
    if any(d.findings for d in cmp.cases):
        console.print(comparison_table(cmp, title=title, width=width))
    else:
        console.print(Text(no_changes_line(cmp)))
    if verbose:
        for diff in cmp.cases:
            if diff.row_diffs:
                console.print(rows_table(diff, width=width))
    failures = cmp.failures
    if failures:
        console.print(Text(regressions_heading(cmp), style="bold red"))
        for f in failures:
            console.print(_message(f.message()))
    improvements = cmp.improvements
    if improvements:
        console.print(Text(f"Improvements ({len(improvements)}):", style="bold green"))
        for f in improvements:
            console.print(_message(f.message()))
    console.print(Prose(verdict_line(cmp), hang=2))
