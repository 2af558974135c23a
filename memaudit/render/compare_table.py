"""Rich rendering of a :class:`~memaudit.judge.baseline.Comparison` for the terminal and CI logs."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memaudit.judge.baseline import CaseDiff, Comparison, Finding, RowDiff
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


def comparison_table(cmp: Comparison, *, title: str | None = None) -> Table:
    """One row per finding: case, what changed, current, baseline, delta, delta %, verdict."""
    table = Table(title=Text(title) if title else None, show_lines=False, title_justify="left")
    table.add_column("case", overflow="fold", no_wrap=True)
    table.add_column("change", overflow="fold")
    table.add_column("current", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("delta", justify="right")
    table.add_column("delta %", justify="right")
    table.add_column("verdict")
    for diff in cmp.cases:
        first = True
        for f in diff.findings:
            label = f.label if f.numeric else f.text
            verdict = Text(f.verdict, style=VERDICT_STYLE.get(f.verdict, ""))
            cells = [diff.id if first else "", label, _value(f, f.current), _value(f, f.baseline), _delta(f), _pct(f)]
            table.add_row(*(Text(c) for c in cells), verdict)  # Text: ids and reasons are not markup
            first = False
        if diff.findings:
            table.add_section()
    unchanged = sum(1 for d in cmp.cases if not d.findings)
    table.caption = f"{unchanged} case{'s' if unchanged != 1 else ''} unchanged" if unchanged else None
    return table


def _shape(r: Row | None) -> str:
    return "-" if r is None else fmt_shape(r.shape)


def rows_table(diff: CaseDiff) -> Table:
    """The buffers behind a case's changes: added, removed, or resized rows."""
    table = Table(title=Text(f"rows behind {diff.id}"), title_justify="left")
    table.add_column("buffer", overflow="fold")
    table.add_column("shape now")
    table.add_column("baseline shape")
    table.add_column("dtype")
    table.add_column("bytes now", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("delta", justify="right")
    for rd in diff.row_diffs:
        table.add_row(*_row_cells(rd))
    return table


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


def print_comparison(console: Console, cmp: Comparison, *, verbose: bool = False, title: str | None = None) -> None:
    """Print the table of changes, with ``verbose`` the rows behind them, then the verdict."""
    if any(d.findings for d in cmp.cases):
        console.print(comparison_table(cmp, title=title))
    else:
        console.print(Text(f"No changes in {len(cmp.cases)} case{'s' if len(cmp.cases) != 1 else ''}."))
    if verbose:
        for diff in cmp.cases:
            if diff.row_diffs:
                console.print(rows_table(diff))
    failures = cmp.failures
    if failures:
        console.print(Text(f"Regressions ({len(failures)}):", style="bold red"))
        for f in failures:
            console.print(Text(f"  {f.message()}"), soft_wrap=True)
    improvements = cmp.improvements
    if improvements:
        console.print(Text(f"Improvements ({len(improvements)}):", style="bold green"))
        for f in improvements:
            console.print(Text(f"  {f.message()}"), soft_wrap=True)
    console.print(verdict_line(cmp), soft_wrap=True)
