"""A merged report's ranks side by side: one table per planned case.

Rows are the case's saved bytes, then each operand and kind (largest first); columns are either
one per rank (``r0 r1 ...``, the worst rank's cell in bold) with the imbalance (max over mean), or,
where that does not fit, the worst rank and the spread (max, mean, min, imbalance). The console
takes per-rank columns where they fit its width (2 ranks fit 80 columns), else the spread (what 8
ranks get in 80 columns). The title names the worst rank and the caption the layout, the ranks'
coordinates and the data-parallel replicas' check. :func:`rank_views` is the same content for the
markdown renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.text import Text

from memaudit.ranks import AXES, RankSummary, Spread
from memaudit.render.layout import COMPACT_WIDTH, Sheet, text_col, value_col
from memaudit.report import CaseReport, Report
from memaudit.units import fmt_bytes

PER_RANK_MAX = 8
"""Markdown shows a column per rank up to this many ranks, the spread beyond."""


@dataclass(frozen=True)
class RankView:
    """One planned case over its ranks, ready to show."""

    summary: RankSummary
    keys: list[str]
    """Each rank's coordinates (``ep1-dp0``), by rank."""
    layout: str
    """``ep2 x dp2``."""
    lines: list[tuple[str, Spread]]
    """``(what, spread)``: saved bytes first, then operand and kind, largest first."""

    @property
    def ok(self) -> bool:
        return self.summary.saved is not None

    def title(self) -> str:
        s = self.summary
        n = len(s.ranks)
        head = f"{s.case} · {n} rank{'s' if n != 1 else ''} ({self.layout})"
        if s.saved is None:
            return head + " · not every rank is ok"
        return (
            f"{head} · worst rank {s.saved.worst_rank} ({self.keys[s.saved.worst_rank]}) saved {fmt_bytes(s.saved.max)}"
            f" · imbalance {imbalance(s.saved)}"
        )

    def notes(self) -> list[str]:
        """The ranks' coordinates, the ranks that are not ok, the replicas' check."""
        s = self.summary
        out = ["ranks: " + ", ".join(f"r{r} {self.keys[r]}" for r in s.ranks)]
        if s.not_ok:
            out.append("not ok: " + ", ".join(f"rank {r}" for r in s.not_ok))
        if s.missing:
            out.append("no case: " + ", ".join(f"rank {r}" for r in s.missing))
        for rep in s.replicas:
            ranks = ", ".join(map(str, rep.ranks))
            out.append(
                f"dp replicas {rep.group} (ranks {ranks}): "
                + ("identical" if rep.identical else f"DIFFER: {rep.difference}")
            )
        return out


def imbalance(s: Spread) -> str:
    """``1.31x`` (max over mean), or ``-`` where every rank has 0."""
    return "-" if s.imbalance is None else f"{s.imbalance:.2f}x"


def rank_views(report: Report) -> list[RankView]:
    """One view per planned case of a merged report (none for another report)."""
    run = report.dist
    if run is None or run.summary is None:
        return []
    views = []
    for s in run.summary:
        keys = ["?"] * len(s.ranks)
        layout = ""
        for c in report.cases:
            if c.dist is not None and c.id == f"{s.case}/{c.dist.key}":
                keys[c.dist.rank] = c.dist.key
                layout = " x ".join(f"{a}{c.dist.layout[a]}" for a in AXES if a in c.dist.layout)
        lines: list[tuple[str, Spread]] = []
        if s.saved is not None:
            lines.append(("saved (total)", s.saved))
            by = sorted(s.by, key=lambda b: (-b.spread.max, b.operand, b.kind))
            lines += [(f"{b.operand} {b.kind}", b.spread) for b in by if b.spread.max]
        views.append(RankView(s, keys, layout, lines))
    return views


def worst_cases(report: Report) -> list[CaseReport]:
    """The worst rank's case of each planned case (what a run shows in full)."""
    out = []
    for v in rank_views(report):
        if v.summary.saved is None:
            continue
        want = f"{v.summary.case}/{v.keys[v.summary.saved.worst_rank]}"
        out += [c for c in report.cases if c.id == want]
    return out


def _per_rank_sheet(v: RankView) -> Sheet:
    cols = [text_col("what"), *(value_col(f"r{r}", "right") for r in v.summary.ranks), value_col("max/mean", "right")]
    sheet = Sheet(cols, title=Text(v.title()), caption=Text("\n".join(v.notes())))
    for what, sp in v.lines:
        cells: list[str | Text] = [what]
        for r, value in zip(v.summary.ranks, sp.per_rank, strict=True):
            cells.append(
                Text(fmt_bytes(value), style="bold" if r == sp.worst_rank and sp.imbalance not in (None, 1.0) else "")
            )
        sheet.add_row(*cells, imbalance(sp))
    return sheet


def _spread_sheet(v: RankView) -> Sheet:
    cols = [
        text_col("what"),
        value_col("worst", "right"),
        value_col("max", "right"),
        value_col("mean", "right"),
        value_col("min", "right"),
        value_col("max/mean", "right"),
    ]
    sheet = Sheet(cols, title=Text(v.title()), caption=Text("\n".join(v.notes())))
    for what, sp in v.lines:
        sheet.add_row(
            what, f"r{sp.worst_rank}", fmt_bytes(sp.max), fmt_bytes(round(sp.mean)), fmt_bytes(sp.min), imbalance(sp)
        )
    return sheet


def ranks_table(v: RankView, *, width: int | None = None) -> RenderableType:
    """One planned case: a column per rank where that fits ``width`` (None: up to
    :data:`PER_RANK_MAX` ranks), else the worst rank and the spread."""
    per_rank, spread = _per_rank_sheet(v), _spread_sheet(v)
    if width is None:
        return (per_rank if len(v.summary.ranks) <= PER_RANK_MAX else spread).wide()
    for sheet in (per_rank, spread):
        if width >= COMPACT_WIDTH and sheet.wide_width() <= width:
            return sheet.wide(width)
        if sheet.compact_width() <= width:
            return sheet.compact(width)
    return spread.compact(width)


def ranks_tables(report: Report, *, width: int | None = None) -> RenderableType:
    """Every planned case of a merged report, ranks side by side (nothing for another report)."""
    return Group(*(ranks_table(v, width=width) for v in rank_views(report)))
