"""``memaudit estimate``: what TE 2.20.2 saves for the grouped MLP, from shapes alone (no GPU).

One configuration prints every saved buffer (the same rows ``memaudit run`` measures), the
padding per buffer and, with ``--diff VARIANT``, what a fix would save. Ranges (``A:B:xK``,
``A:B:+K``) and lists sweep; a sweep prints one line per point and can be plotted.

Exit codes: 0 ok; 2 bad usage or input (the flag and value are named; nothing is written).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.text import Text

from memaudit.cli.common import INT_RANGE, Command, Ints, exits, parse_recipes
from memaudit.cli.plot import check_matplotlib, draw_and_write, plot_paths
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.render.console import consoles
from memaudit.render.layout import Prose
from memaudit.report import atomic_write_text, check_outputs, write_report, write_report_streaming
from memaudit.te.estimate import (
    ARCHS,
    DEFAULT_ARCH_HELP,
    DEFAULT_PATH_HELP,
    HELP,
    PATHS,
    VARIANTS,
    Config,
    SweepPoint,
    estimate_config,
    estimate_report,
    resolve,
    skipped_case,
    sweep_point,
)
from memaudit.te.estimate.figures import comparison_variant, kinds_from_estimate, tokens_from_sweep
from memaudit.te.estimate.tables import (
    diff_table,
    markdown_single,
    markdown_sweep,
    padding_table,
    rows_table,
    sweep_lines,
    totals_line,
)
from memaudit.te.machine.recipes import RECIPES

ESTIMATE_HELP = HELP + "\n\nExit codes: 0 ok; 2 bad usage or input (nothing written)."


# typer lists these choices in --help and completion, and refuses others (exit 2)
Path_ = Literal[PATHS]  # type: ignore[valid-type]
Variant = Literal[VARIANTS]  # type: ignore[valid-type]
Arch = Literal[ARCHS]  # type: ignore[valid-type]
ProbsDtype = Literal["float32", "bfloat16"]
SplitDtype = Literal["int64", "int32"]


def _complete_recipe(incomplete: str) -> list[str]:
    """TE's recipes and ``all``; after a comma, the ones not listed yet."""
    head, comma, last = incomplete.rpartition(",")
    listed = set(head.split(",")) if comma else set()
    options = [r for r in RECIPES if r not in listed] + ([] if comma else ["all"])
    return [head + comma + r for r in options if r.startswith(last)]


def _splits(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        try:
            v = int(part.strip())
        except ValueError:
            raise UsageError(
                f"expected non-negative integers separated by commas, got {text!r}", key="--splits"
            ) from None
        if v < 0:
            raise UsageError(f"splits must be >= 0, got {v}", key="--splits")
        out.append(v)
    return out


@exits
def estimate_cmd(
    recipe: Annotated[
        str,
        typer.Option(
            autocompletion=_complete_recipe, help=f"{' | '.join(RECIPES)} | all; comma-separated for several."
        ),
    ],
    tokens: Annotated[
        Ints,
        typer.Option(
            parser=INT_RANGE,
            metavar=INT_RANGE.metavar,
            help="Tokens T: N, a list N1,N2 or a range FROM:TO:xK (multiply) / FROM:TO:+K (add).",
        ),
    ],
    hidden: Annotated[
        Ints, typer.Option(parser=INT_RANGE, metavar=INT_RANGE.metavar, help="Hidden size H (N, list or range).")
    ],
    ffn: Annotated[
        Ints | None,
        typer.Option(
            parser=INT_RANGE, metavar=INT_RANGE.metavar, help="FFN size F; FC1 has 2F outputs. Default: --hidden."
        ),
    ] = None,
    groups: Annotated[
        Ints, typer.Option(parser=INT_RANGE, metavar=INT_RANGE.metavar, help="Group (expert) counts G, e.g. 1,8,64.")
    ] = "1",
    splits: Annotated[
        str | None,
        typer.Option(
            help="Explicit token splits, e.g. 256,0,512,256 (one T and one G only). Default: the uneven splits "
            "memaudit run uses."
        ),
    ] = None,
    path: Annotated[Path_ | None, typer.Option(help=DEFAULT_PATH_HELP)] = None,
    variant: Annotated[Variant, typer.Option(help="Which saved set.")] = "te-2.20",
    diff: Annotated[
        Variant | None, typer.Option(help="Also estimate this variant and show the difference (what a fix would save).")
    ] = None,
    arch: Annotated[Arch | None, typer.Option(help=DEFAULT_ARCH_HELP)] = None,
    dense_single_group: Annotated[
        bool,
        typer.Option(
            help="Fused path, G=1: the single-group dense path (cuDNN frontend >= 1.27) saves a grouped tensor whole."
        ),
    ] = True,
    probs_dtype: Annotated[ProbsDtype, typer.Option(help="dtype of the routing probs the caller passes.")] = "float32",
    split_dtype: Annotated[
        SplitDtype, typer.Option(help="dtype of the split sizes the caller passes (int64: one tensor for FC1 and FC2).")
    ] = "int64",
    padding: Annotated[bool, typer.Option(help="Show the per-buffer padding table (one configuration).")] = True,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the --variant estimate as a memaudit report (schema memaudit.report/3) here, atomically.",
        ),
    ] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary here.")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Draw saved bytes vs tokens, one line per recipe at --plot-groups (.png or .svg; needs matplotlib, "
            "the 'plot' extra, and two or more --tokens), and what is saved by kind to --plot-kinds."
        ),
    ] = None,
    plot_kinds: Annotated[
        Path | None,
        typer.Option(
            help="Draw what is saved by kind and orientation, a stacked bar per recipe at (--plot-tokens, "
            "--plot-groups). Default with --plot: its name with .kinds before the extension."
        ),
    ] = None,
    plot_groups: Annotated[
        int | None, typer.Option(help="The G the plots show (one of --groups). Default: the largest.")
    ] = None,
    plot_tokens: Annotated[
        int | None,
        typer.Option(
            help="The T of the kinds plot (any T; estimated at the sweep's first H and F). Default: the largest "
            "--tokens."
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option(help="Only the totals (one configuration) or nothing but the files (sweep).")
    ] = False,
    max_points: Annotated[
        int, typer.Option(help="Refuse a sweep of more configurations than this (recipes x T x H x F x G).")
    ] = 100_000,
) -> int:
    """Estimate what TE 2.20.2 saves for backward, from shapes and its layout rules alone."""
    out, _ = consoles()
    plot, kinds_path = plot_paths(plot, plot_kinds, "--plot", "--plot-kinds")
    check_outputs({"--json": json_path, "--markdown": markdown, "--plot": plot, "--plot-kinds": kinds_path})
    recipes = parse_recipes(recipe, RECIPES, RECIPES)
    if plot is not None or kinds_path is not None:
        check_matplotlib("--plot" if plot is not None else "--plot-kinds")
    t_list, h_list, f_list, g_list = tokens, hidden, ffn, groups  # lists of integers (IntList)
    split_list = _splits(splits) if splits is not None else None
    if split_list is not None and (len(t_list) != 1 or len(g_list) != 1):
        raise UsageError("explicit splits need exactly one --tokens and one --groups value", key="--splits")
    n_points = len(recipes) * len(t_list) * len(h_list) * len(g_list) * (len(f_list) if f_list is not None else 1)
    if max_points < 1:
        raise UsageError(f"must be >= 1, got {max_points}", key="--max-points")
    if n_points > max_points:
        raise UsageError(
            f"the sweep has {n_points:,} configurations, more than --max-points {max_points:,}; "
            "narrow a range or raise --max-points",
            key="--max-points",
        )
    g_plot = max(g_list) if plot_groups is None else plot_groups
    if g_plot not in g_list:
        raise UsageError(f"{g_plot} is not one of --groups {','.join(map(str, g_list))}", key="--plot-groups")
    t_plot = max(t_list) if plot_tokens is None else plot_tokens
    if t_plot < 1:
        raise UsageError(f"must be >= 1, got {t_plot}", key="--plot-tokens")
    if split_list is not None and t_plot != t_list[0]:
        raise UsageError(f"with --splits the kinds plot is at --tokens {t_list[0]}, not {t_plot}", key="--plot-tokens")
    combos = [
        (r, t, h, f, g)
        for r, t, h, g in itertools.product(recipes, t_list, h_list, g_list)
        for f in (f_list if f_list is not None else [h])
    ]
    kwargs: dict[str, Any] = dict(
        path=path,
        arch=arch,
        dense_single_group=dense_single_group,
        probs_dtype=probs_dtype,
        split_sizes_dtype=split_dtype,
    )

    def plots(points: list[SweepPoint]) -> None:
        if plot is None and kinds_path is None:
            return
        compare = comparison_variant(variant, diff)
        h, f = combos[0][2], combos[0][3]
        tokens_data = tokens_from_sweep(points, g_plot, variant, compare) if plot is not None else None
        kinds_data = (
            kinds_from_estimate(recipes, t_plot, g_plot, h, f, variant, compare, splits=split_list, **kwargs)
            if kinds_path is not None
            else None
        )
        draw_and_write(out, tokens_data, kinds_data, plot, kinds_path, f"one --tokens value at G = {g_plot}")

    if len(combos) == 1:
        c = resolve(*combos[0], splits=split_list, **kwargs)
        code = _single(out, c, variant, diff, padding, json_path, markdown, quiet)
        plots([SweepPoint.from_config(c, variant)])
        return code

    points = [sweep_point(*combo, variant, diff, splits=split_list, **kwargs) for combo in combos]
    if all(p.config is None for p in points):
        raise UsageError(f"no configuration of the sweep is valid; the first: {points[0].reason}")
    if not quiet:
        typer.echo("\n".join(sweep_lines(points, variant, diff)))
    if json_path is not None:
        cases = (
            estimate_config(p.config, variant) if p.config is not None else skipped_case(p, variant, path)
            for p in points
        )  # one case in memory at a time
        write_report_streaming(estimate_report([]), cases, json_path)
        out.print(Text(f"wrote {json_path}"), soft_wrap=True)
    if markdown is not None:
        atomic_write_text(markdown, markdown_sweep(points, variant, diff))
        out.print(Text(f"wrote {markdown}"), soft_wrap=True)
    plots(points)
    return exitcodes.OK


def _single(
    out: Console,
    c: Config,
    variant: str,
    diff: str | None,
    padding: bool,
    json_path: Path | None,
    markdown: Path | None,
    quiet: bool,
) -> int:
    case = estimate_config(c, variant)
    other = estimate_config(c, diff) if diff else None
    if not quiet:
        out.print(rows_table(case, variant, width=out.width))
        if padding and dict(case.path or {}).get("padding", {}).get("rows"):
            out.print(padding_table(case, width=out.width))
    if other is not None:
        table, summary = diff_table(case, other, variant, diff or "", width=out.width)
        if not quiet:
            out.print(table)
        out.print(Prose(summary, hang=2))
    out.print(Prose(totals_line(case, variant), hang=2))
    if json_path is not None:
        write_report(estimate_report([case]), json_path)
        out.print(Text(f"wrote {json_path}"), soft_wrap=True)
    if markdown is not None:
        atomic_write_text(
            markdown, markdown_single(case, variant, (other, diff) if other is not None and diff else None)
        )
        out.print(Text(f"wrote {markdown}"), soft_wrap=True)
    return exitcodes.OK


def register(app: typer.Typer) -> None:
    """Add ``memaudit estimate`` to ``app``."""
    app.command("estimate", help=ESTIMATE_HELP, cls=Command)(estimate_cmd)
