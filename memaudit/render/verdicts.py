"""Rich rendering of budget verdicts: the failure details, then one verdict table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from memaudit.judge.budgets import Verdict, summary_line
from memaudit.render.layout import Sheet, fit, text_col, value_col

STYLE = {"pass": "green", "fail": "bold red", "xfail": "yellow", "XPASS": "bold red", "n/a": "dim"}


def _case_na(verdicts: Sequence[Verdict]) -> bool:
    return bool(verdicts) and all(v.verdict == "n/a" and v.message.startswith("case ") for v in verdicts)


MAX_ROWS = 500
"""A verdict table shows at most this many rows, failures first; the caption says how many more."""


def _verdict_sheet(verdicts: list[Verdict], show_na: bool, max_rows: int) -> Sheet:
    cols = [value_col("case"), value_col("rule"), value_col("verdict"), text_col("expected"), text_col("actual")]
    caption = summary_line(verdicts)
    by_case: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_case.setdefault(v.case_id, []).append(v)
    rows: list[tuple[str, str, Text, str, str]] = []
    for case_id, mine in by_case.items():
        if len(rows) >= max_rows:
            break
        if _case_na(mine):
            rows.append((case_id, "(all)", Text("n/a", style=STYLE["n/a"]), "", mine[0].message))
            continue
        for v in mine:
            if v.verdict == "n/a" and not show_na:
                continue
            if len(rows) >= max_rows:
                break
            actual = v.actual if v.verdict != "n/a" else v.message
            rows.append((case_id, v.rule, Text(v.verdict, style=STYLE[v.verdict]), v.expected, actual))
    if len(rows) >= max_rows:
        caption = f"{caption} · only the first {max_rows} rows are shown (failures first); the JSON report has them all"
    sheet = Sheet(cols, title="budgets", caption=caption, group=0)
    for row in rows:
        sheet.add_row(*row)
    return sheet


def render_verdicts(
    verdicts: Iterable[Verdict], *, show_na: bool = False, max_rows: int = MAX_ROWS, width: int | None = None
) -> RenderableType:
    """One row per (case, rule) verdict; a skipped or errored case is one n/a row; in ``width``
    columns (compact: each case id on a line of its own above its rules).

    Rules that do not apply to a case (another recipe, group count or path) are left out unless
    ``show_na``. The caption counts every verdict. Past ``max_rows`` rows the passing ones are
    left out first, and the caption says how many rows are not shown (the JSON has them all).
    """
    verdicts = list(verdicts)
    if len(verdicts) > max_rows:
        verdicts = sorted(verdicts, key=lambda v: v.verdict in ("pass", "n/a"))  # stable: failures first
    sheet = _verdict_sheet(verdicts, show_na, max_rows)
    return fit(width, sheet)


def render_failures(verdicts: Iterable[Verdict]) -> Group:
    """The full text of every fail, XPASS and xfail: rule, numbers, offending rows."""
    parts: list[Text] = []
    for v in verdicts:
        if v.verdict not in ("fail", "XPASS", "xfail"):
            continue
        head = Text()
        head.append({"fail": "FAIL", "XPASS": "XPASS", "xfail": "xfail"}[v.verdict] + " ", style=STYLE[v.verdict])
        head.append(f"{v.case_id}  {v.rule}", style="bold")
        parts.append(head)
        body = v.message if v.verdict != "xfail" else f"{v.message}\n  found {v.actual}"
        parts.append(Text("  " + body.replace("\n", "\n  ")))
    return Group(*parts)
