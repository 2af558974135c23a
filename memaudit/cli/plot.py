"""``memaudit plot REPORT``: the figures of ``estimate --plot`` from a ``run`` (or estimate) report.

Figure 1, saved bytes vs tokens (one line per recipe at one G), goes to ``--out``; figure 2, what
is saved by kind (a stacked bar per recipe at one tokens, G), to ``--kinds`` (default: ``--out``
with ``.kinds`` before the extension). A report whose cases at G have one token count gets
figure 2 only, and the command says so.

Exit codes: 0 ok; 2 bad usage or input (a bad report, flag or output path: nothing is written).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from memaudit.cli.common import exits
from memaudit.distribution import pip_install
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.render.console import consoles

if TYPE_CHECKING:
    from memaudit.render.plots import KindsFigure, TokensFigure

PLOT_HELP = (
    "Draw a report's saved bytes: vs tokens, one line per recipe at one G (--out), and by kind, a "
    "stacked bar per recipe at one (tokens, G) (--kinds). PNG or SVG by extension; needs matplotlib "
    "(the 'plot' extra).\n\nExit codes: 0 ok; 2 bad usage or input (nothing written)."
)


def check_matplotlib(key: str) -> None:
    """A UsageError naming ``key`` when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            f"drawing a plot needs matplotlib, an optional extra: {pip_install('plot')}", key=key
        ) from None


def plot_paths(
    tokens: Path | None, kinds: Path | None, tokens_key: str, kinds_key: str
) -> tuple[Path | None, Path | None]:
    """Figure 1's and figure 2's paths (figure 2 defaults to figure 1's with ``.kinds``), their
    formats checked (a UsageError naming the flag and value)."""
    from memaudit.render.plots import kinds_path, plot_format

    if tokens is not None:
        plot_format(tokens, tokens_key)
    if kinds is not None:
        plot_format(kinds, kinds_key)
    elif tokens is not None:
        kinds = kinds_path(tokens)
    return tokens, kinds


def draw_and_write(
    out: Console,
    tokens_data: TokensFigure | None,
    kinds_data: KindsFigure | None,
    tokens_path: Path | None,
    kinds_path: Path | None,
    why_no_tokens: str,
) -> None:
    """Render every figure asked for to bytes, then write them (atomically); print what was
    written and, when figure 1 was asked for but cannot be drawn, why."""
    from memaudit.render.plots import draw_kinds, draw_tokens, plot_format, render
    from memaudit.report import atomic_write_bytes

    files: list[tuple[Path, bytes]] = []
    if tokens_path is not None and tokens_data is not None:
        fig = draw_tokens(tokens_data)
        files.append((tokens_path, render(fig, plot_format(tokens_path, "--plot"))))
    if kinds_path is not None and kinds_data is not None:
        fig = draw_kinds(kinds_data)
        files.append((kinds_path, render(fig, plot_format(kinds_path, "--kinds"))))
    for path, data in files:
        atomic_write_bytes(path, data)
        out.print(Text(f"wrote {path}"), soft_wrap=True)
    if tokens_path is not None and tokens_data is None:
        out.print(Text(f"note: {tokens_path} not drawn: {why_no_tokens}; drew the kinds figure only"), soft_wrap=True)


@exits
def plot_cmd(
    report_path: Annotated[
        Path,
        typer.Argument(
            metavar="REPORT", help="A report from memaudit run --json (or estimate --json).", show_default=False
        ),
    ],
    groups: Annotated[
        int | None, typer.Option(help="The group count G to draw. Default: the largest in the report.")
    ] = None,
    tokens: Annotated[
        int | None, typer.Option(help="The token count of the kinds figure. Default: the largest at G.")
    ] = None,
    out_path: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Saved bytes vs tokens (.png or .svg). Default: REPORT's name with .png, in the current folder.",
        ),
    ] = None,
    kinds: Annotated[
        Path | None, typer.Option(help="What is saved, by kind. Default: --out with .kinds before the extension.")
    ] = None,
) -> int:
    """Draw a report's saved bytes vs tokens and by kind."""
    from memaudit.judge.integrity import read_report
    from memaudit.render.plots import kinds_from_report, report_groups, tokens_from_report
    from memaudit.report import check_outputs

    out, _ = consoles()
    if out_path is None and kinds is None:
        out_path = Path(report_path.stem + ".png")
    tokens_path, kinds_out = plot_paths(out_path, kinds, "--out", "--kinds")
    check_outputs({"--out": tokens_path, "--kinds": kinds_out}, inputs={"REPORT": report_path})
    for value, flag in ((groups, "--groups"), (tokens, "--tokens")):
        if value is not None and value < 1:
            raise UsageError(f"must be >= 1, got {value}", key=flag)
    check_matplotlib("--out" if tokens_path is not None else "--kinds")
    report = read_report(report_path)
    if not report.cases:
        raise UsageError("the report has no cases to draw", source=str(report_path))
    present = report_groups(report)
    g = groups if groups is not None else present[-1]
    if g not in present:
        raise UsageError(f"no case has G = {g}; the report has G = {', '.join(map(str, present))}", key="--groups")
    tokens_data = tokens_from_report(report, g) if tokens_path is not None else None
    kinds_data = kinds_from_report(report, g, tokens) if kinds_out is not None else None
    draw_and_write(
        out,
        tokens_data,
        kinds_data,
        tokens_path,
        kinds_out,
        f"the report's cases at G = {g} have fewer than two token counts of one shape",
    )
    return exitcodes.OK


def register(app: typer.Typer) -> None:
    """Add ``memaudit plot`` to ``app``."""
    app.command("plot", help=PLOT_HELP)(plot_cmd)
