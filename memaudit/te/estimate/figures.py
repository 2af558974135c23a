"""The estimator's figures: saved bytes against tokens over a sweep, and every recipe's rows at one
shape, drawn by :mod:`memaudit.render.plots` (whose data types these are)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memaudit.errors import UsageError
from memaudit.render.plots import (
    Bar,
    KindsFigure,
    Line,
    Missing,
    TokensFigure,
    case_bar,
    fmt_tokens,
    ordered_recipes,
)
from memaudit.te.estimate import TE_VERSION, SweepPoint, estimate_config, estimate_totals, resolve


def comparison_variant(variant: str, diff: str | None) -> str:
    """The dashed line's variant: ``--diff`` when given, else ``pr3545`` (``te-2.20`` when the
    estimate is ``pr3545`` itself)."""
    if diff is not None:
        return diff
    return "pr3545" if variant != "pr3545" else "te-2.20"


def tokens_from_sweep(
    points: Sequence[SweepPoint], groups: int, variant: str, compare: str | None
) -> TokensFigure | None:
    """Figure 1 of an estimate sweep at ``groups`` (the first H, F of the sweep); None when the
    sweep has fewer than two token counts. ``compare``'s line is drawn dashed where it differs."""
    at_g = [p for p in points if p.groups == groups]
    if len({p.tokens for p in at_g}) < 2:
        return None
    shapes = list(dict.fromkeys((p.hidden, p.ffn) for p in at_g))
    h, f = shapes[0]
    notes = [
        f"not drawn: H = {oh}, F = {of} (the sweep's other shapes; narrow --hidden / --ffn to choose)"
        for oh, of in shapes[1:]
    ]
    mine = [p for p in at_g if (p.hidden, p.ffn) == (h, f)]
    lines, missing = [], []
    for recipe in ordered_recipes({p.recipe for p in mine}):
        pts = sorted((p for p in mine if p.recipe == recipe), key=lambda p: p.tokens)
        ok = [p for p in pts if p.config is not None and p.totals is not None]
        missing += [Missing(recipe, "skipped", p.reason or "", p.tokens) for p in pts if p.config is None]
        if not ok:
            continue
        paths = {p.config.path for p in ok if p.config is not None}
        path = paths.pop() if len(paths) == 1 else None
        ys = tuple(p.totals.saved_bytes for p in ok if p.totals is not None)
        xs = tuple(p.tokens for p in ok)
        lines.append(Line(recipe, xs, ys, variant=variant, path=path))
        if compare is not None and compare != variant:
            cmp = tuple(estimate_totals(p.config, compare).saved_bytes for p in ok if p.config is not None)
            if cmp != ys:
                lines.append(Line(recipe, xs, cmp, variant=compare, dashed=True, path=path))
    dashed = f"; dashed: {compare}, where it differs" if compare and compare != variant else ""
    return TokensFigure(
        title=f"Saved for backward vs tokens: TE {TE_VERSION} grouped MLP, G = {groups}, H = {h}, F = {f}",
        subtitle=(
            f"estimate (modelled, no GPU); solid: {variant}{dashed}. "
            "Saved bytes = physical minus parameter bytes (what the gate compares)."
        ),
        groups=groups,
        lines=tuple(lines),
        missing=tuple(missing),
        notes=tuple(notes),
    )


def kinds_from_estimate(
    recipes: Sequence[str],
    tokens: int,
    groups: int,
    hidden: int,
    ffn: int,
    variant: str,
    compare: str | None,
    *,
    splits: Sequence[int] | None = None,
    **options: Any,
) -> KindsFigure:
    """Figure 2 of an estimate: every recipe's rows at (T, G, H, F) under ``variant``, and a
    ``compare`` bar beside each recipe whose saved bytes it changes."""
    bars = []
    for recipe in recipes:
        try:
            c = resolve(recipe, tokens, hidden, ffn, groups, splits=splits, **options)
        except UsageError as exc:
            bars.append(Bar(recipe, recipe, variant=variant, missing=Missing(recipe, "skipped", str(exc), tokens)))
            continue
        label = f"{recipe}\n{c.path}"
        bar = case_bar(estimate_config(c, variant), label, variant=variant)
        bars.append(bar)
        if compare is not None and compare != variant:
            other = case_bar(estimate_config(c, compare), f"{recipe}\n{compare}", variant=compare, compare=True)
            if other.saved_bytes != bar.saved_bytes:
                bars.append(other)
    shown = f"; a bar marked {compare} where that variant differs" if compare and compare != variant else ""
    return KindsFigure(
        title=(
            f"What is saved for backward: TE {TE_VERSION} grouped MLP, T = {tokens:,} ({fmt_tokens(tokens)}), "
            f"G = {groups}, H = {hidden}, F = {ffn}"
        ),
        subtitle=(
            f"estimate (modelled, no GPU), {variant}{shown}. "
            "Each storage counted once, parameters left out: the bars are saved bytes."
        ),
        tokens=tokens,
        groups=groups,
        bars=tuple(bars),
    )


# ---- formatting ------------------------------------------------------------------------------------
