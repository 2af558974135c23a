"""Rich rendering of budget verdicts: the failure details, then one verdict table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memaudit.judge.budgets import Verdict, summary_line

STYLE = {"pass": "green", "fail": "bold red", "xfail": "yellow", "XPASS": "bold red", "n/a": "dim"}


def _case_na(verdicts: Sequence[Verdict]) -> bool:
    return bool(verdicts) and all(v.verdict == "n/a" and v.message.startswith("case ") for v in verdicts)


MAX_ROWS = 500
"""A verdict table shows at most this many rows, failures first; the caption says how many more."""


def render_verdicts(verdicts: Iterable[Verdict], *, show_na: bool = False, max_rows: int = MAX_ROWS) -> Table:
    """One row per (case, rule) verdict; a skipped or errored case is one n/a row.

    Rules that do not apply to a case (another recipe, group count or path) are left out unless
    ``show_na``. The caption counts every verdict. Past ``max_rows`` rows the passing ones are
    left out first, and the caption says how many rows are not shown (the JSON has them all).
    """
    verdicts = list(verdicts)
    if len(verdicts) > max_rows:
        verdicts = sorted(verdicts, key=lambda v: v.verdict in ("pass", "n/a"))  # stable: failures first
    table = Table(
        title="budgets",
        title_justify="left",
        caption=summary_line(verdicts),
        caption_justify="left",
        header_style="bold",
    )
    for col in ("case", "rule", "verdict", "expected", "actual"):
        table.add_column(col, overflow="fold")
    by_case: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_case.setdefault(v.case_id, []).append(v)
    shown = 0
    for case_id, mine in by_case.items():
        if shown >= max_rows:
            break
        if _case_na(mine):
            shown += 1
            table.add_row(Text(case_id), "(all)", Text("n/a", style=STYLE["n/a"]), "", Text(mine[0].message))
            continue
        for v in mine:
            if v.verdict == "n/a" and not show_na:
                continue
            if shown >= max_rows:
                break
            shown += 1
            actual = v.actual if v.verdict != "n/a" else v.message
            table.add_row(Text(case_id), Text(v.rule), Text(v.verdict, style=STYLE[v.verdict]), Text(v.expected), Text(actual))
    if shown >= max_rows:
        table.caption = f"{table.caption} · only the first {max_rows} rows are shown (failures first); the JSON report has them all"
    return table


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
