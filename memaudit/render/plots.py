"""The two figures of ``memaudit estimate --plot`` and ``memaudit plot REPORT``.

* **saved bytes vs tokens** (:class:`TokensFigure`, :func:`draw_tokens`): one line per recipe at one
  group count G and one shape; x is tokens on a log2 axis, y the saved bytes (what the gate
  compares: physical minus parameter bytes) on a log axis labelled in KiB / MiB / GiB. A second
  estimate variant (PR #3545 by default) is a dashed line of the recipe's colour where it differs.
* **what is saved** (:class:`KindsFigure`, :func:`draw_kinds`): one stacked bar per recipe at one
  (tokens, G); segments by kind (data / scale / amax / metadata / tensor) and orientation (hatch).

The figures are drawn from plain data (:class:`Line`, :class:`Bar`, ...) that the ``*_from_*``
builders make from a :class:`~memaudit.report.Report` or from estimate sweep points, so tests read
the data and the drawn artists, not pixels. Skipped and failed cases are data too: a footnote on
the figure lists each one with its reason, a cross marks its tokens on the x axis, a bar is left
empty with the reason written in it. Nothing drawn here imports pyplot: each figure is a
``matplotlib.figure.Figure`` rendered by the Agg (PNG) or SVG backend to bytes (:func:`render`).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memaudit.environment import libraries
from memaudit.errors import UsageError
from memaudit.report import CaseReport, Report, Row
from memaudit.targets.registry import builtin_targets, path_label, union_recipes
from memaudit.units import fmt_bytes

if TYPE_CHECKING:  # matplotlib is an optional extra, imported only to draw
    from matplotlib.figure import Figure


FORMATS = ("png", "svg")
"""Output formats, chosen by the file's extension."""

KIND_GROUPS = ("data", "scale", "amax", "metadata", "tensor", "other")
"""Segments of a bar, bottom to top. ``scale`` is ``scale_inv`` plus ``scale``; ``other`` any kind
memaudit could not classify (``unknown``)."""
KIND_OF = {
    "data": "data",
    "scale_inv": "scale",
    "scale": "scale",
    "amax": "amax",
    "metadata": "metadata",
    "tensor": "tensor",
}
KIND_LABEL = {
    "data": "data",
    "scale": "scale_inv / scale",
    "amax": "amax",
    "metadata": "metadata",
    "tensor": "tensor (activations, BF16 inputs)",
    "other": "other (unclassified)",
}
KIND_COLOR = {
    "data": "#4C72B0",
    "scale": "#DD8452",
    "amax": "#C44E52",
    "metadata": "#8C8C8C",
    "tensor": "#55A868",
    "other": "#8172B3",
}
ORIENTS = ("rowwise", "columnwise", "both", "none")
ORIENT_HATCH = {"rowwise": "///", "columnwise": "\\\\\\", "both": "xxx", "none": ""}
ORIENT_LABEL = {"rowwise": "rowwise", "columnwise": "columnwise", "both": "both (one copy)", "none": "no orientation"}


@functools.cache
def recipe_order() -> tuple[str, ...]:
    """The order recipes are drawn in: as memaudit's own targets declare them (a recipe none
    declares comes after, by name)."""

    return union_recipes(builtin_targets())


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
MAX_NOTES = 8
"""Footnote lines at most; the rest are counted in one more line."""

KiB, MiB, GiB = 1024, 1024**2, 1024**3
LEFT_IN = 1.05
"""The axes' left margin, inches: room for ``1.25 GiB`` tick labels and the y label."""


# ---- data ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of figure 1: a recipe's saved bytes at each token count (sorted by tokens)."""

    recipe: str
    tokens: tuple[int, ...]
    saved_bytes: tuple[int, ...]
    variant: str | None = None
    """The estimate variant (None for measured cases)."""
    dashed: bool = False
    """The comparison variant (PR #3545): drawn dashed in the recipe's colour."""
    path: str | None = None
    """The code path, where the cases say (``fused``, ``unfused-split``)."""


@dataclass(frozen=True)
class Missing:
    """A case that has no bytes to draw: skipped or failed, with why."""

    recipe: str
    status: str
    reason: str
    tokens: int | None = None


@dataclass(frozen=True)
class TokensFigure:
    """Figure 1: saved bytes vs tokens at one G and one shape."""

    title: str
    subtitle: str
    groups: int
    lines: tuple[Line, ...]
    missing: tuple[Missing, ...] = ()
    notes: tuple[str, ...] = ()
    """Anything about the data a reader must know (cases not drawn, incomplete cases)."""

    def recipes(self) -> list[str]:
        """Every recipe of the figure, drawn or not, in legend order."""
        return ordered_recipes({ln.recipe for ln in self.lines} | {m.recipe for m in self.missing})


@dataclass(frozen=True)
class Segment:
    """A part of a bar: the saved bytes of one kind group and orientation."""

    kind: str
    orientation: str
    bytes: int


@dataclass(frozen=True)
class Bar:
    """Figure 2: one recipe's saved bytes split by kind and orientation, or why it has none."""

    recipe: str
    label: str
    segments: tuple[Segment, ...] = ()
    saved_bytes: int = 0
    """``totals.saved_bytes`` of the case; the segments sum to it (see :func:`saved_segments`)."""
    variant: str | None = None
    compare: bool = False
    """The comparison variant's bar (PR #3545), drawn beside the recipe's own."""
    missing: Missing | None = None


@dataclass(frozen=True)
class KindsFigure:
    """Figure 2: what is saved, one stacked bar per recipe at one (tokens, G)."""

    title: str
    subtitle: str
    tokens: int | None
    groups: int
    bars: tuple[Bar, ...]
    notes: tuple[str, ...] = ()


# ---- saved bytes by storage ------------------------------------------------------------------------


def saved_segments(rows: Iterable[Row]) -> tuple[list[Segment], int]:
    """The saved bytes of ``rows`` by (kind group, orientation), and their sum.

    Counted as :func:`~memaudit.report.compute_totals` counts ``saved_bytes``: each device-resident
    storage once at its full size (the last row's ``storage_bytes``, as there), none that holds a
    parameter or a cached copy. A storage's bytes go to the first row that names it (its kind and orientation):
    a BF16 input's ``torch.split`` views are one storage, drawn once. Rows without a storage (a
    ``container``, a loose host copy), host copies and recomputed buffers are not saved bytes.
    """
    first: dict[str, Row] = {}
    size: dict[str, int] = {}
    params: set[str] = set()
    for r in rows:
        if r.storage is None or r.resides != "device":
            continue
        first.setdefault(r.storage, r)
        size[r.storage] = r.storage_bytes
        if r.apart:  # a parameter's or a cached copy's storage, as the totals
            params.add(r.storage)
    acc: dict[tuple[str, str], int] = {}
    for s, r in first.items():
        if s in params:
            continue
        key = (KIND_OF.get(r.kind, "other"), r.orientation if r.orientation in ORIENTS else "none")
        acc[key] = acc.get(key, 0) + size[s]
    segs = [Segment(k, o, acc[(k, o)]) for k in KIND_GROUPS for o in ORIENTS if acc.get((k, o))]
    return segs, sum(s.bytes for s in segs)


def case_bar(case: CaseReport, label: str | None = None, *, variant: str | None = None, compare: bool = False) -> Bar:
    """The bar of one case (an empty one, with the reason, when it did not run); labelled with
    the recipe and the path the case took unless ``label`` is given."""
    if label is None:
        path = _case_path(case)
        label = case.recipe + (f"\n{path}" if path else "")
    if case.status != "ok":
        return Bar(
            case.recipe,
            label,
            variant=variant,
            compare=compare,
            missing=Missing(case.recipe, case.status, case.reason or "", _tokens(case)),
        )
    segs, _ = saved_segments(case.rows)
    return Bar(case.recipe, label, tuple(segs), case.totals.saved_bytes, variant=variant, compare=compare)


# ---- from a report ---------------------------------------------------------------------------------


def _tokens(case: CaseReport) -> int | None:
    t = case.dims.get("tokens")
    return t if isinstance(t, int) else None


def _family(case: CaseReport) -> tuple[Any, ...]:
    """What must match for cases to sit on one line: target, dtype and the dims other than tokens."""
    return (case.target, case.dtype, tuple(sorted((k, v) for k, v in case.dims.items() if k != "tokens")))


DIM_ORDER = ("tokens", "hidden", "ffn")
"""Shape dimensions in the order titles show them (reports store them sorted by name)."""


def _family_text(fam: tuple[Any, ...]) -> str:
    target, dtype, dims = fam
    ordered = sorted(dims, key=lambda kv: (DIM_ORDER.index(kv[0]) if kv[0] in DIM_ORDER else len(DIM_ORDER), kv[0]))
    return ", ".join([f"{k} = {v}" for k, v in ordered] + [dtype])


_ABS_PATH = re.compile(r"(?<![\w.+-])/(?:[\w.+-]+/)+([\w.+-]+)")


def short_reason(reason: str) -> str:
    """A case's reason on one line, absolute file paths cut to their last part
    (``/src/common/gemm/x.cu:778`` -> ``x.cu:778``)."""
    return _ABS_PATH.sub(r"\1", " ".join(reason.split()))


def _case_path(case: CaseReport) -> str | None:
    """The path the case took in its target's words (``split-quantize``, ``fused``), or None."""
    name = path_label(case)
    return name if isinstance(name, str) else None


def report_groups(report: Report) -> list[int]:
    """The group counts of a report's cases, ascending."""
    return sorted({c.groups for c in report.cases})


def _source(report: Report) -> str:
    env = report.environment or {}
    libs = libraries()
    if env.get("estimate"):
        modelled = ", ".join(f"{lib.short} {env.get(lib.key) or '?'}" for lib in libs if lib.key in env) or "?"
        return f"estimate, {modelled} modelled"
    parts = [str(env.get("device", "?"))]
    parts += [f"{lib.short} {env[lib.key]}" for lib in libs if env.get(lib.key)]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    emulated = sorted({c.emulation.label() for c in report.cases if c.emulation is not None})
    kind = "emulated: " + ", ".join(emulated) if emulated else "measured"
    return f"{kind} on {', '.join(parts)}"


def _pick_family(
    cases: list[CaseReport], score: Callable[[list[CaseReport]], tuple[int, ...]]
) -> tuple[tuple[Any, ...] | None, list[CaseReport], list[str]]:
    """The family of ``cases`` with the best ``score`` (the first seen on a tie), its cases, and a
    note per family left out."""
    fams: dict[tuple[Any, ...], list[CaseReport]] = {}
    for c in cases:
        fams.setdefault(_family(c), []).append(c)
    if not fams:
        return None, [], []
    best = max(fams, key=lambda f: score(fams[f]))  # max keeps the first of equal scores
    notes = [
        f"not drawn: {len(cs)} case(s) at {_family_text(f)} (another shape than the one drawn)"
        for f, cs in fams.items()
        if f != best
    ]
    return best, fams[best], notes


def _dedupe(cases: list[CaseReport], key: Callable[[CaseReport], Any]) -> tuple[list[CaseReport], list[str]]:
    """The first case per ``key``; a note for each case left out (same recipe and point, other options)."""
    seen: dict[Any, CaseReport] = {}
    notes = []
    for c in cases:
        k = key(c)
        if k in seen:
            notes.append(f"not drawn: {c.id} (same recipe, G and shape as {seen[k].id})")
        else:
            seen[k] = c
    return list(seen.values()), notes


def _case_notes(cases: Iterable[CaseReport]) -> list[str]:
    out = []
    for c in cases:
        if c.status == "ok" and not c.complete:
            out.append(f"incomplete: {c.id}: memaudit did not see everything kept ({'; '.join(c.warnings)[:120]})")
    return out


def tokens_from_report(report: Report, groups: int) -> TokensFigure | None:
    """Figure 1 of a report at ``groups``; None when its cases at G span fewer than two token counts."""
    at_g = [c for c in report.cases if c.groups == groups and _tokens(c) is not None]
    fam, cases, notes = _pick_family(at_g, lambda cs: (len({_tokens(c) for c in cs}), len(cs)))
    if fam is None or len({_tokens(c) for c in cases}) < 2:
        return None
    cases, dup_notes = _dedupe(cases, lambda c: (c.recipe, _tokens(c)))
    lines, missing = [], []
    for recipe in ordered_recipes({c.recipe for c in cases}):
        mine = sorted((c for c in cases if c.recipe == recipe), key=lambda c: _tokens(c) or 0)
        ok = [c for c in mine if c.status == "ok"]
        missing += [Missing(recipe, c.status, c.reason or "", _tokens(c)) for c in mine if c.status != "ok"]
        if ok:
            paths = {_case_path(c) for c in ok}
            lines.append(
                Line(
                    recipe,
                    tuple(_tokens(c) or 0 for c in ok),
                    tuple(c.totals.saved_bytes for c in ok),
                    path=paths.pop() if len(paths) == 1 else None,
                )
            )
    return TokensFigure(
        title=f"Saved for backward vs tokens: {fam[0]}, G = {groups}, {_family_text(fam)}",
        subtitle=f"{_source(report)}. Saved bytes = physical minus parameter bytes (what the gate compares).",
        groups=groups,
        lines=tuple(lines),
        missing=tuple(missing),
        notes=tuple(notes + dup_notes + _case_notes(cases)),
    )


def kinds_from_report(report: Report, groups: int, tokens: int | None = None) -> KindsFigure:
    """Figure 2 of a report at ``groups`` and ``tokens`` (default: the largest token count at G)."""
    at_g = [c for c in report.cases if c.groups == groups]
    if not at_g:
        raise UsageError(
            f"no case has G = {groups}; the report has G = {', '.join(map(str, report_groups(report)))}", key="--groups"
        )
    counts = sorted({t for c in at_g if (t := _tokens(c)) is not None})
    if tokens is None and counts:
        tokens = counts[-1]
    if tokens is not None:
        if tokens not in counts:
            raise UsageError(
                f"no case at G = {groups} has {tokens} tokens; they have "
                f"{', '.join(map(str, counts)) or 'no tokens dimension'}",
                key="--tokens",
            )
        at_g = [c for c in at_g if _tokens(c) == tokens]
    fam, cases, notes = _pick_family(at_g, lambda cs: (len(cs),))
    assert fam is not None
    cases, dup_notes = _dedupe(cases, lambda c: c.recipe)
    bars = [case_bar(c) for c in sorted(cases, key=lambda c: _recipe_key(c.recipe))]
    for b, c in zip(bars, sorted(cases, key=lambda c: _recipe_key(c.recipe)), strict=True):
        if b.missing is None and sum(s.bytes for s in b.segments) != b.saved_bytes:
            notes.append(
                f"{c.id}: its rows count {fmt_bytes(sum(s.bytes for s in b.segments))}, "
                f"its totals say {fmt_bytes(b.saved_bytes)} (the bar shows the rows)"
            )
    where = f"T = {tokens:,} ({fmt_tokens(tokens)}), " if tokens is not None else ""
    return KindsFigure(
        title=f"What is saved for backward: {fam[0]}, {where}G = {groups}, {_family_text(fam)}",
        subtitle=f"{_source(report)}. Each storage counted once, parameters left out: the bars are saved bytes.",
        tokens=tokens,
        groups=groups,
        bars=tuple(bars),
        notes=tuple(notes + dup_notes + _case_notes(cases)),
    )


# ---- from an estimate ------------------------------------------------------------------------------


def _recipe_key(recipe: str) -> tuple[int, str]:
    order = recipe_order()
    return (order.index(recipe) if recipe in order else len(order), recipe)


def ordered_recipes(recipes: Iterable[str]) -> list[str]:
    return sorted(set(recipes), key=_recipe_key)


def recipe_style(recipes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) per recipe: TE's recipes keep theirs in every figure, others follow."""
    out = {}
    extra = 0
    for r in recipes:
        if r in recipe_order():
            i = recipe_order().index(r)
        else:
            i = len(recipe_order()) + extra
            extra += 1
        out[r] = (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)])
    return out


def fmt_tokens(n: int) -> str:
    """Tick label of a token count: ``1K`` for 1024, ``81K`` for 82944, ``1000`` for 1000."""
    if n >= 1024 and n % 1024 == 0:
        k = n // 1024
        return f"{k // 1024}M" if k >= 1024 and k % 1024 == 0 else f"{k}K"
    return str(n)


def fmt_axis_bytes(v: float) -> str:
    """Tick label of a byte quantity: ``0``, ``512 B``, ``16 MiB``, ``1.25 GiB``."""
    if v == 0:
        return "0"
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if v >= size:
            return f"{round(v / size, 2):g} {unit}"
    return f"{v:g} B"


def log_byte_locator() -> Any:
    """matplotlib's locator of a log2 byte axis: powers of two, at most 9 (a stride where there are more)."""
    from matplotlib.ticker import LogLocator

    return LogLocator(base=2, subs=(1.0,), numticks=9)


def linear_byte_locator(hi: float) -> Any:
    """matplotlib's locator of a linear byte axis up to ``hi``: multiples of a power of two (1 KiB
    or more; matplotlib's own steps are decimal, which binary units would show as ``95.37 MiB``),
    at most 8 steps."""
    from matplotlib.ticker import MultipleLocator

    return MultipleLocator(2 ** max(10, math.ceil(math.log2(max(hi, 1) / 8))))


def token_locator(values: Sequence[int]) -> Any:
    """The token counts themselves when there are few (matplotlib's FixedLocator), else powers of
    two across their range (LogLocator, at most 12)."""
    from matplotlib.ticker import FixedLocator, LogLocator

    vs = sorted(set(values))
    return FixedLocator(vs) if len(vs) <= 12 else LogLocator(base=2, subs=(1.0,), numticks=12)


def formatter(fmt: Callable[[Any], str], *, integer: bool = False) -> Any:
    """matplotlib's FuncFormatter of ``fmt`` (a tick value -> its label)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt(round(v)) if integer else fmt(v))


def missing_notes(missing: Sequence[Missing]) -> list[str]:
    """One footnote line per (recipe, status, reason): the token counts it affects."""
    groups: dict[tuple[str, str, str], list[int | None]] = {}
    for m in missing:
        groups.setdefault((m.recipe, m.status, m.reason), []).append(m.tokens)
    out = []
    for (recipe, status, reason), ts in groups.items():
        at = ", ".join(fmt_tokens(t) for t in ts if t is not None)
        one = short_reason(reason)
        out.append(f"{recipe} {status}{f' at T = {at}' if at else ''}: {one[:240]}{'...' if len(one) > 240 else ''}")
    return out


def _footnote(lines: Sequence[str], width: int) -> str:
    if len(lines) > MAX_NOTES:
        lines = [*lines[: MAX_NOTES - 1], f"... and {len(lines) - MAX_NOTES + 1} more"]
    return "\n".join(textwrap.fill(ln, width, subsequent_indent="    ") for ln in lines)


# ---- drawing ---------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110)


def _finish(
    fig: Figure, title: str, subtitle: str, notes: Sequence[str], width: float, axes_height: float, legend_width: float
) -> None:
    """Title, subtitle and the footnote; size the figure so that none overlaps the axes."""
    chars = int((width - LEFT_IN - 0.2) * 15.5)  # 8-pt DejaVu Sans: about 15 characters an inch
    foot = _footnote(notes, chars) if notes else ""
    n_foot = foot.count("\n") + 1 if foot else 0
    top_in, bottom_in = 0.85, 0.75 + 0.16 * n_foot + (0.1 if foot else 0)
    height = top_in + axes_height + bottom_in
    fig.set_size_inches(width, height)
    fig.subplots_adjust(
        left=LEFT_IN / width, right=1 - legend_width / width, top=1 - top_in / height, bottom=bottom_in / height
    )
    fig.text(LEFT_IN / width, 1 - 0.22 / height, title, fontsize=11, weight="bold", va="top", ha="left")
    fig.text(LEFT_IN / width, 1 - 0.5 / height, subtitle, fontsize=8.5, color="#444444", va="top", ha="left")
    if foot:
        fig.text(
            LEFT_IN / width,
            0.1 / height,
            foot,
            fontsize=8,
            va="bottom",
            ha="left",
            color="#333333",
            linespacing=1.35,
            gid="footnote",
        )


def draw_tokens(data: TokensFigure) -> Figure:
    """Figure 1: one axes, one line per recipe (dashed: the comparison variant), a legend with every
    recipe (those without data say why), skipped points crossed on the x axis and footnoted."""
    width, axes_h, legend_w = 11.0, 5.2, 2.9
    fig = _figure(width, axes_h + 2)
    ax = fig.add_subplot(1, 1, 1)
    recipes = data.recipes()
    style = recipe_style(recipes)
    solid = {ln.recipe: ln for ln in data.lines if not ln.dashed}
    drawn: list[Line] = []
    for ln in sorted(data.lines, key=lambda ln: (_recipe_key(ln.recipe), ln.dashed)):
        color, marker = style[ln.recipe]
        rank = recipes.index(ln.recipe)
        same = close = None
        if not ln.dashed:
            for d in drawn:
                if d.dashed or d.tokens != ln.tokens:
                    continue
                if d.saved_bytes == ln.saved_bytes:
                    same = d.recipe
                    break
                rel = _max_rel_diff(d.saved_bytes, ln.saved_bytes)
                if close is None and rel <= CLOSE:
                    close = (d.recipe, rel)
        label = ln.recipe + (f" · {ln.path}" if ln.path and not ln.dashed else "")
        if ln.dashed:
            label = f"{ln.recipe} · {ln.variant} (dashed)"
            base = solid.get(ln.recipe)
            if base is not None and base.tokens and base.tokens[-1] == ln.tokens[-1] and base.saved_bytes[-1]:
                delta = ln.saved_bytes[-1] - base.saved_bytes[-1]
                label += (
                    f"\n{'+' if delta > 0 else '-'}{fmt_bytes(abs(delta))} ({100 * delta / base.saved_bytes[-1]:+.0f}%)"
                    f" at {fmt_tokens(ln.tokens[-1])}"
                )
        elif same:
            label += f"\n(the same bytes as {same})"
        elif close:
            label += f"\n(within {100 * close[1]:.1f}% of {close[0]})"
        # Earlier recipes are drawn on top; a line (nearly) equal to one drawn before gets a
        # hollow, larger marker on top of it, so that both stay visible.
        hollow = bool(same or close)
        ax.plot(
            ln.tokens,
            ln.saved_bytes,
            ls="--" if ln.dashed else "-",
            color=color,
            lw=1.5 if ln.dashed else 1.8,
            marker=None if ln.dashed else marker,
            ms=(9 if same else 11) if hollow else 5.5,
            mfc="none" if hollow else color,
            mew=1.5,
            label=label,
            zorder=3.0 if (ln.dashed or hollow) else 2.0 + (len(recipes) - rank) / (10 * len(recipes)),
            gid=f"{ln.recipe}:{ln.variant or 'measured'}{':dashed' if ln.dashed else ''}",
        )
        drawn.append(ln)
    for recipe in recipes:  # a recipe without any drawn point still has its legend entry
        if recipe not in solid:
            color, marker = style[recipe]
            ax.plot([], [], ls="none", marker="x", color=color, label=f"{recipe}: no data (see below)")
    xs_missing = [(m.tokens, style[m.recipe][0]) for m in data.missing if m.tokens is not None]
    if xs_missing:  # a cross at the x axis where a case was skipped or failed, stacked when several
        trans = ax.get_xaxis_transform()
        stacked: dict[int, int] = {}
        for t, color in xs_missing:
            k = stacked[t] = stacked.get(t, -1) + 1
            ax.plot(
                [t],
                [0.03 + 0.035 * k],
                ls="none",
                marker="x",
                ms=7,
                mew=1.6,
                color=color,
                transform=trans,
                clip_on=False,
                gid="missing",
                zorder=4,
            )
        ax.plot([], [], ls="none", marker="x", ms=7, mew=1.6, color="#555555", label="skipped or failed (listed below)")
    all_x = [t for ln in data.lines for t in ln.tokens] + [t for t, _ in xs_missing]
    all_y = [y for ln in data.lines for y in ln.saved_bytes if y > 0]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    if all_x:
        ax.xaxis.set_major_locator(token_locator(all_x))
        ax.xaxis.set_major_formatter(formatter(fmt_tokens, integer=True))
        ax.set_xlim(min(all_x) / 2**0.25, max(all_x) * 2**0.25)
    ax.xaxis.set_minor_locator(_null_locator())
    if all_y:
        lo, hi = min(all_y) / 1.35, max(all_y) * 1.35
        if xs_missing:  # room under the lowest line for the crosses
            lo /= (hi / lo) ** 0.12
        locator = log_byte_locator()
        if not any(lo <= v <= hi for v in locator.tick_values(lo, hi)):  # no power of two inside: reach the one below
            lo = 2.0 ** math.floor(math.log2(lo))
        ax.set_ylim(lo, hi)
        ax.yaxis.set_major_locator(locator)
        ax.yaxis.set_major_formatter(formatter(fmt_axis_bytes))
    ax.yaxis.set_minor_locator(_null_locator())
    ax.set_xlabel("tokens T (log scale)")
    ax.set_ylabel("saved bytes (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=8.5,
        frameon=False,
        borderaxespad=0.0,
        title=f"recipe (G = {data.groups})",
        title_fontsize=9,
        alignment="left",
    )
    _finish(fig, data.title, data.subtitle, missing_notes(data.missing) + list(data.notes), width, axes_h, legend_w)
    return fig


CLOSE = 0.03
"""Lines within 3% of each other at every point are told apart in the legend and by hollow markers."""


def _max_rel_diff(a: Sequence[int], b: Sequence[int]) -> float:
    return max((abs(x - y) / max(x, y) for x, y in zip(a, b, strict=True) if max(x, y)), default=0.0)


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


def draw_kinds(data: KindsFigure) -> Figure:
    """Figure 2: a stacked bar per recipe (colour: kind, hatch: orientation), the total on top, a
    bar left empty with its reason written in it for a case that did not run."""
    from matplotlib.patches import Patch

    n = max(1, len(data.bars))
    width, axes_h, legend_w = max(9.0, 1.25 * n + 4.2), 5.2, 2.8
    fig = _figure(width, axes_h + 2)
    ax = fig.add_subplot(1, 1, 1)
    xs, x = [], 0.0
    for i, b in enumerate(data.bars):
        if i and not b.compare:
            x += 1.25
        elif i:
            x += 0.9
        xs.append(x)
    top = max(
        [b.saved_bytes for b in data.bars if b.missing is None]
        + [sum(s.bytes for s in b.segments) for b in data.bars]
        + [1]
    )
    ymax = top * 1.12
    used: set[tuple[str, str]] = set()
    for b, x in zip(data.bars, xs, strict=True):
        bottom = 0
        for s in b.segments:
            ax.bar(
                x,
                s.bytes,
                bottom=bottom,
                width=0.8,
                color=KIND_COLOR[s.kind],
                hatch=ORIENT_HATCH[s.orientation],
                edgecolor="white",
                linewidth=0.6,
                alpha=0.75 if b.compare else 1.0,
                gid=f"bar:{b.label}:{s.kind}:{s.orientation}",
            )
            if s.bytes >= 0.07 * ymax:
                ax.text(
                    x,
                    bottom + s.bytes / 2,
                    fmt_bytes(s.bytes),
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="black",
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
                )
            bottom += s.bytes
            used.add((s.kind, s.orientation))
        if b.missing is not None:
            ax.bar(x, ymax * 0.9, width=0.8, fill=False, edgecolor="#999999", ls="--", lw=1.0, gid=f"empty:{b.label}")
            reason = short_reason(b.missing.reason)
            text = textwrap.fill(f"{b.missing.status}: {reason[:100]}{'...' if len(reason) > 100 else ''}", 34)
            ax.text(
                x,
                ymax * 0.45,
                text,
                rotation=90,
                ha="center",
                va="center",
                fontsize=7.5,
                color="#555555",
                gid=f"reason:{b.label}",
            )
        else:
            ax.text(
                x, bottom + ymax * 0.01, fmt_bytes(b.saved_bytes), ha="center", va="bottom", fontsize=8.5, weight="bold"
            )
    ax.set_xticks(xs, [b.label for b in data.bars], fontsize=8.5)
    ax.set_xlim(-0.7, (xs[-1] if xs else 0) + 0.7)
    ax.yaxis.set_major_locator(linear_byte_locator(ymax))
    ax.yaxis.set_major_formatter(formatter(fmt_axis_bytes))
    ax.set_ylim(0, ymax)
    ax.set_ylabel("saved bytes")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    kinds = [k for k in KIND_GROUPS if any(k == u[0] for u in used)]
    orients = [o for o in ORIENTS if any(o == u[1] for u in used)]
    handles = [Patch(facecolor=KIND_COLOR[k], label=KIND_LABEL[k]) for k in kinds]
    handles += [
        Patch(facecolor="#dddddd", edgecolor="#555555", hatch=ORIENT_HATCH[o], label=ORIENT_LABEL[o]) for o in orients
    ]
    if handles:
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=8.5,
            frameon=False,
            borderaxespad=0.0,
            title="kind (colour), orientation (hatch)",
            title_fontsize=9,
            alignment="left",
        )
    notes = missing_notes(
        [
            dataclasses.replace(b.missing, recipe=b.label.replace("\n", " "), tokens=None)
            for b in data.bars
            if b.missing is not None
        ]
    )
    small = _small_parts(data.bars, ymax)
    _finish(fig, data.title, data.subtitle, notes + small + list(data.notes), width, axes_h, legend_w)
    return fig


def _small_parts(bars: Sequence[Bar], ymax: float) -> list[str]:
    """One footnote of the parts too thin to see (under 1% of the axis), bar by bar: nothing is hidden."""
    parts = []
    for b in bars:
        thin: dict[str, int] = {}
        for s in b.segments:
            if s.bytes < 0.01 * ymax:
                thin[s.kind] = thin.get(s.kind, 0) + s.bytes
        if thin:
            parts.append(
                f"{b.label.replace(chr(10), ' ')}: " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in thin.items())
            )
    return ["too thin to see (under 1% of the axis): " + "; ".join(parts)] if parts else []


# ---- output ----------------------------------------------------------------------------------------


def plot_format(path: Path, key: str) -> str:
    """``png`` or ``svg`` from the file's extension; anything else is a UsageError naming ``key``."""
    ext = path.suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise UsageError(
            f"cannot tell the format of {str(path)!r} from its extension; name a .png or .svg file", key=key
        )
    return ext


def kinds_path(path: Path) -> Path:
    """Where figure 2 goes when only figure 1's path is given: ``saved.png`` -> ``saved.kinds.png``."""
    return path.with_name(f"{path.stem}.kinds{path.suffix}")


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes (no date or software version in it: the same data, the same file)."""
    import matplotlib

    buf = io.BytesIO()
    meta: dict[str, Any] = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    with matplotlib.rc_context({"svg.hashsalt": "memaudit", "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, metadata=meta, dpi=fig.dpi)
    return buf.getvalue()
