"""``memaudit estimate``: what TE 2.20.2 saves for the grouped MLP, from shapes alone (no GPU).

One configuration prints every saved buffer (the same rows ``memaudit run`` measures), the
padding per buffer and, with ``--diff VARIANT``, what a fix would save. Ranges (``A:B:xK``,
``A:B:+K``) and lists sweep; a sweep prints one line per point and can be plotted.

Exit codes: 0 ok; 2 bad usage or input (the flag and value are named; nothing is written).
"""

from __future__ import annotations

import itertools
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memaudit import exitcodes
from memaudit.errors import UsageError
from memaudit.render.console import consoles, usage_exit
from memaudit.report import CaseReport, Report, Row, atomic_write_text, write_report
from memaudit.spec import RECIPES
from memaudit.te.estimate import (
    ARCHS,
    PATHS,
    TARGET,
    TE_VERSION,
    VARIANTS,
    Config,
    FastTotals,
    bytes_by_kind,
    diff_cases,
    estimate_config,
    estimate_totals,
    parse_range,
    resolve,
)
from memaudit.units import fmt_bytes, fmt_delta

KIND_ORDER = ("data", "scale_inv", "amax", "scale", "metadata", "tensor")

ESTIMATE_HELP = (
    "Estimate what TE 2.20.2 saves for backward in the grouped MLP "
    "(GroupedLinear(G, H, 2F), ScaledSwiGLU, GroupedLinear(G, F, H)) from shapes and TE's layout rules alone.\n\n"
    "Paths: fused (CuTeDSL fused op, sm100, MXFP8/NVFP4), unfused-grouped (graph-safe grouped tensors), "
    "unfused-split (tex.split_quantize; what an H200 with cuBLASLt < 13.4 runs). Default: fused for mxfp8/nvfp4 "
    "when hidden and ffn are multiples of 64 (else unfused-grouped); unfused-split for bf16 and FP8.\n\n"
    "Variants: te-2.20 (what 2.20.2 saves), pr3545 (NVFP4 fused-path rowwise input data and scales pruned), "
    "ideal (only what the backward GEMMs read).\n\n"
    "Exit codes: 0 ok; 2 bad usage or input (nothing written)."
)


def _recipes(text: str) -> list[str]:
    if text == "all":
        return list(RECIPES)
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("no recipe given", key="--recipe")
    for n in names:
        if n not in RECIPES:
            raise UsageError(f"unknown recipe {n!r}; use one of {', '.join(RECIPES)} or 'all'", key="--recipe")
    return names


def _choice(value: str | None, allowed: tuple[str, ...], flag: str) -> None:
    if value is not None and value not in allowed:
        raise UsageError(f"unknown value {value!r}; use one of {', '.join(allowed)}", key=flag)


def _splits(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        try:
            v = int(part.strip())
        except ValueError:
            raise UsageError(f"expected non-negative integers separated by commas, got {text!r}", key="--splits") from None
        if v < 0:
            raise UsageError(f"splits must be >= 0, got {v}", key="--splits")
        out.append(v)
    return out


def _check_plot(plot: Path | None) -> None:
    if plot is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "drawing a plot needs matplotlib, an optional extra: pip install 'memaudit[plot]'", key="--plot"
        ) from None


# ---- tables --------------------------------------------------------------------------------------
def _shape(shape: list[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


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
                           r.format, r.kind, r.orientation or "", _shape(r.shape), r.dtype, fmt_bytes(r.bytes),
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
    t.caption = (f"all rows: padded {fmt_bytes(pad.get('padded_bytes'))} · ideal {fmt_bytes(pad.get('ideal_bytes'))} · "
                 f"bulk-allocation slack {fmt_bytes(pad.get('bulk_slack_bytes'))}")
    t.caption_justify = "left"
    return t


def diff_table(a: CaseReport, b: CaseReport, va: str, vb: str) -> tuple[Table, str]:
    """Buffers that differ between two variants, and a one-line summary of the saved bytes."""
    entries, ta, tb = diff_cases(a, b)
    t = Table(title=f"{va} -> {vb}: what the change saves", title_justify="left", header_style="bold")
    for col, j in (("operand", "left"), ("g", "right"), ("container.slot", "left"), ("kind", "left"),
                   ("orient.", "left"), ("shape", "left"), ("dtype", "left"), (va, "right"), (vb, "right"),
                   ("delta", "right"), ("source", "left")):
        t.add_column(col, justify=j, overflow="fold")  # type: ignore[arg-type]
    for e in entries:
        t.add_row(*_cells(e.operand or "", "" if e.group is None else str(e.group),
                           ".".join(p for p in (e.container, e.slot) if p), e.kind, e.orientation or "",
                           _shape(e.shape), e.dtype, fmt_bytes(e.bytes_a), fmt_bytes(e.bytes_b), fmt_delta(e.delta),
                           e.note or ""))
    d = tb.saved_bytes - ta.saved_bytes
    pct = f" ({100.0 * d / ta.saved_bytes:+.1f}%)" if ta.saved_bytes else ""
    summary = f"saved bytes: {va} {fmt_bytes(ta.saved_bytes)} -> {vb} {fmt_bytes(tb.saved_bytes)}: {fmt_delta(d)}{pct}"
    return t, summary


# ---- sweep -----------------------------------------------------------------------------------------
class _Point:
    __slots__ = ("recipe", "tokens", "hidden", "ffn", "groups", "config", "reason", "totals", "diff_totals")

    def __init__(self, recipe: str, tokens: int, hidden: int, ffn: int, groups: int) -> None:
        self.recipe, self.tokens, self.hidden, self.ffn, self.groups = recipe, tokens, hidden, ffn, groups
        self.config: Config | None = None
        self.reason: str | None = None
        self.totals: FastTotals | None = None
        self.diff_totals: FastTotals | None = None


def sweep_lines(points: list[_Point], variant: str, diff: str | None) -> list[str]:
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


def plot_sweep(points: list[_Point], path: Path, variant: str) -> None:
    """Saved bytes by kind vs tokens, one panel per recipe; colour = kind, line style = (G, H, F)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ok = [p for p in points if p.totals is not None]
    recipes = list(dict.fromkeys(p.recipe for p in ok))
    kinds = [k for k in KIND_ORDER if any(p.totals and p.totals.by_kind.get(k) for p in ok)]
    shapes = list(dict.fromkeys((p.groups, p.hidden, p.ffn) for p in ok))
    one_hf = len({(h, f) for _, h, f in shapes}) == 1
    ncols = min(3, max(1, len(recipes)))
    nrows = -(-max(1, len(recipes)) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.6 * nrows + 0.9), squeeze=False)
    styles = ["-", "--", ":", "-."]
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {k: palette[i % len(palette)] for i, k in enumerate(kinds)}
    colors["saved"] = "black"
    for i, ax in enumerate(axes.flat):
        if i >= len(recipes):
            ax.set_visible(False)
            continue
        recipe = recipes[i]
        mine = [p for p in ok if p.recipe == recipe]
        for j, shape in enumerate(shapes):
            line = sorted((p for p in mine if (p.groups, p.hidden, p.ffn) == shape), key=lambda p: p.tokens)
            if not line:
                continue
            xs = [p.tokens for p in line]
            ls = styles[j % len(styles)]
            for k in kinds:
                ax.plot(xs, [p.totals.by_kind.get(k, 0) for p in line], ls, color=colors[k], marker=".", ms=3)  # type: ignore[union-attr]
            ax.plot(xs, [p.totals.saved_bytes for p in line], ls, color="black", lw=1.6)  # type: ignore[union-attr]
        paths = ", ".join(sorted({p.config.path for p in mine if p.config}))
        ax.set_title(f"{recipe} ({paths})", fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("tokens T")
        ax.set_ylabel("bytes")
        ax.grid(True, which="major", alpha=0.3)
    handles = [Line2D([], [], color=colors[k], label=k) for k in [*kinds, "saved"]]
    handles += [Line2D([], [], color="grey", ls=styles[j % len(styles)],
                       label=f"G={g}" if one_hf else f"G={g} H={h} F={f}") for j, (g, h, f) in enumerate(shapes)]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=8, frameon=False)
    fig.suptitle(f"memaudit estimate: TE {TE_VERSION} saved bytes by kind [{variant}]")
    fig.tight_layout(rect=(0, 0.9 / (3.6 * nrows + 0.9), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ---- markdown ----------------------------------------------------------------------------------------
def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_single(case: CaseReport, variant: str, diff: tuple[CaseReport, str] | None) -> str:
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
                f"{_shape(e.shape)} {e.dtype} | {fmt_bytes(e.bytes_a)} | {fmt_bytes(e.bytes_b)} | {fmt_delta(e.delta)} | "
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
                     f"{r.kind} | {r.orientation or ''} | {_shape(r.shape)} | {r.dtype} | {fmt_bytes(r.bytes)} | "
                     f"{r.storage or ''} | {_md_escape(note)} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def markdown_sweep(points: list[_Point], variant: str, diff: str | None) -> str:
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


# ---- the command ---------------------------------------------------------------------------------------
def _report(cases: list[CaseReport]) -> Report:
    import memaudit

    return Report(
        cases=cases,
        environment={
            "memaudit": memaudit.__version__,
            "python": platform.python_version(),
            "estimate": True,
            "transformer_engine": TE_VERSION,
            "device": "estimate",
        },
        memaudit=memaudit.__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def estimate_cmd(
    recipe: Annotated[str, typer.Option(help=f"{' | '.join(RECIPES)} | all; comma-separated for several.")],
    tokens: Annotated[str, typer.Option(help="Tokens T: N, a list N1,N2 or a range FROM:TO:xK (multiply) / FROM:TO:+K (add).")],
    hidden: Annotated[str, typer.Option(help="Hidden size H (N, list or range).")],
    ffn: Annotated[str | None, typer.Option(help="FFN size F; FC1 has 2F outputs. Default: --hidden.")] = None,
    groups: Annotated[str, typer.Option(help="Group (expert) counts G, e.g. 1,8,64.")] = "1",
    splits: Annotated[str | None, typer.Option(help="Explicit token splits, e.g. 256,0,512,256 (one T and one G only). Default: the uneven splits memaudit run uses.")] = None,
    path: Annotated[str | None, typer.Option(help=f"{' | '.join(PATHS)}. Default: fused for mxfp8/nvfp4 when H and F are multiples of 64, else unfused-grouped; unfused-split for bf16/fp8 (the H200's path).")] = None,
    variant: Annotated[str, typer.Option(help=f"{' | '.join(VARIANTS)}: which saved set.")] = "te-2.20",
    diff: Annotated[str | None, typer.Option(help="Also estimate this variant and show the difference (what a fix would save).")] = None,
    arch: Annotated[str | None, typer.Option(help=f"{' | '.join(ARCHS)}. Default: sm100 for fused/mxfp8/nvfp4, else sm90. Decides FP8 transpose vs single data copy.")] = None,
    dense_single_group: Annotated[bool, typer.Option(help="Fused path, G=1: the single-group dense path (cuDNN frontend >= 1.27) saves a GroupedTensor whole.")] = True,
    probs_dtype: Annotated[str, typer.Option(help="dtype of the routing probs the caller passes: float32 | bfloat16.")] = "float32",
    split_dtype: Annotated[str, typer.Option(help="dtype of the split sizes the caller passes: int64 (one tensor for FC1 and FC2) | int32.")] = "int64",
    padding: Annotated[bool, typer.Option(help="Show the per-buffer padding table (one configuration).")] = True,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the --variant estimate as a memaudit report (schema memaudit.report/1) here, atomically.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Draw saved bytes by kind vs tokens per recipe (needs matplotlib, the 'plot' extra).")] = None,
    quiet: Annotated[bool, typer.Option(help="Only the totals (one configuration) or nothing but the files (sweep).")] = False,
) -> None:
    out, err = consoles()
    try:
        code = _estimate(out, recipe=recipe, tokens=tokens, hidden=hidden, ffn=ffn, groups=groups, splits=splits,
                         path=path, variant=variant, diff=diff, arch=arch, dense_single_group=dense_single_group,
                         probs_dtype=probs_dtype, split_dtype=split_dtype, padding=padding, json_path=json_path,
                         markdown=markdown, plot=plot, quiet=quiet)
    except UsageError as exc:
        raise usage_exit(err, exc) from None
    raise typer.Exit(code)


def _estimate(out: Console, *, recipe: str, tokens: str, hidden: str, ffn: str | None, groups: str,
              splits: str | None, path: str | None, variant: str, diff: str | None, arch: str | None,
              dense_single_group: bool, probs_dtype: str, split_dtype: str, padding: bool,
              json_path: Path | None, markdown: Path | None, plot: Path | None, quiet: bool) -> int:
    recipes = _recipes(recipe)
    _choice(path, PATHS, "--path")
    _choice(variant, VARIANTS, "--variant")
    _choice(diff, VARIANTS, "--diff")
    _choice(arch, ARCHS, "--arch")
    _check_plot(plot)
    t_list = parse_range(tokens, "--tokens")
    h_list = parse_range(hidden, "--hidden")
    f_list = parse_range(ffn, "--ffn") if ffn is not None else None
    g_list = parse_range(groups, "--groups")
    split_list = _splits(splits) if splits is not None else None
    if split_list is not None and (len(t_list) != 1 or len(g_list) != 1):
        raise UsageError("explicit splits need exactly one --tokens and one --groups value", key="--splits")
    points = []
    for r, t, h, g in itertools.product(recipes, t_list, h_list, g_list):
        for f in f_list if f_list is not None else [h]:
            points.append(_Point(r, t, h, f, g))
    kwargs: dict[str, Any] = dict(path=path, arch=arch, dense_single_group=dense_single_group,
                                  probs_dtype=probs_dtype, split_sizes_dtype=split_dtype)

    if len(points) == 1:
        p = points[0]
        c = resolve(p.recipe, p.tokens, p.hidden, p.ffn, p.groups, splits=split_list, **kwargs)
        return _single(out, c, variant, diff, padding, json_path, markdown, plot, quiet)

    first_error: UsageError | None = None
    for p in points:
        try:
            p.config = resolve(p.recipe, p.tokens, p.hidden, p.ffn, p.groups, splits=split_list, **kwargs)
        except UsageError as exc:
            p.reason = str(exc)
            first_error = first_error or exc
            continue
        p.totals = estimate_totals(p.config, variant)
        if diff:
            p.diff_totals = estimate_totals(p.config, diff)
    if all(p.config is None for p in points):
        assert first_error is not None
        raise UsageError(f"no configuration of the sweep is valid; the first: {first_error}")
    if not quiet:
        typer.echo("\n".join(sweep_lines(points, variant, diff)))
    if json_path is not None:
        cases = []
        for p in points:
            if p.config is not None:
                cases.append(estimate_config(p.config, variant))
            else:
                cases.append(CaseReport(id=f"{TARGET}/{p.recipe}/g{p.groups}/t{p.tokens}-h{p.hidden}-f{p.ffn}/bf16/estimate",
                                        target=TARGET, recipe=p.recipe, groups=p.groups, tokens=p.tokens, hidden=p.hidden,
                                        ffn=p.ffn, dtype="bf16", status="skipped", reason=p.reason,
                                        options={"estimate": True, "variant": variant, "path": path}))
        write_report(_report(cases), json_path)
        out.print(f"wrote {json_path}", highlight=False)
    if markdown is not None:
        atomic_write_text(markdown, markdown_sweep(points, variant, diff))
        out.print(f"wrote {markdown}", highlight=False)
    if plot is not None:
        plot_sweep(points, plot, variant)
        out.print(f"wrote {plot}", highlight=False)
    return exitcodes.OK


def _single(out: Console, c: Config, variant: str, diff: str | None, padding: bool, json_path: Path | None,
            markdown: Path | None, plot: Path | None, quiet: bool) -> int:
    case = estimate_config(c, variant)
    other = estimate_config(c, diff) if diff else None
    if not quiet:
        out.print(rows_table(case, variant))
        if padding and (case.path or {}).get("padding", {}).get("rows"):
            out.print(padding_table(case))
    if other is not None:
        table, summary = diff_table(case, other, variant, diff or "")
        if not quiet:
            out.print(table)
        out.print(summary, highlight=False)
    kinds = bytes_by_kind(case)
    out.print(f"{variant}: saved {fmt_bytes(case.totals.saved_bytes)} ({case.totals.saved_bytes} B) · "
              + " · ".join(f"{k} {fmt_bytes(kinds[k])}" for k in KIND_ORDER if k in kinds), highlight=False)
    if json_path is not None:
        write_report(_report([case]), json_path)
        out.print(f"wrote {json_path}", highlight=False)
    if markdown is not None:
        atomic_write_text(markdown, markdown_single(case, variant, (other, diff) if other is not None and diff else None))
        out.print(f"wrote {markdown}", highlight=False)
    if plot is not None:
        p = _Point(c.recipe, c.tokens, c.hidden, c.ffn, c.groups)
        p.config, p.totals = c, estimate_totals(c, variant)
        plot_sweep([p], plot, variant)
        out.print(f"wrote {plot}", highlight=False)
    return exitcodes.OK


def register(app: typer.Typer) -> None:
    """Add ``memaudit estimate`` to ``app``."""
    app.command("estimate", help=ESTIMATE_HELP)(estimate_cmd)
