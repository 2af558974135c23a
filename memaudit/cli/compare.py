"""``memaudit compare BASELINE CURRENT``: the CI regression gate.

Exit codes: 0 no regression; 1 regression (or an environment difference under ``--strict-env``);
2 bad input (a missing, unparsable, truncated or foreign file, or a bad flag). Nothing is written
on exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.text import Text

from memaudit.cli.common import Command
from memaudit.judge import exitcodes
from memaudit.render.console import consoles
from memaudit.report import check_outputs

FailOn = Literal["increase", "change"]

COMPARE_HELP = (
    "Compare a report against a baseline, case by case; exact by default.\n\n"
    "Exit codes: 0 no regression; 1 regression; 2 bad input (missing, unparsable or foreign file, bad flag)."
)


def default_comment_name(baseline: Path) -> str:
    """A marker name from the baseline file's stem, e.g. ``h200-te-grouped-mlp``."""
    from memaudit.render.markdown import marker_name

    return marker_name(baseline.stem)


def baseline_provenance(baseline: Path) -> str:
    """Where the baseline came from, in words: its content's git blob id (what ``git hash-object``
    gives: the same file gives the same id in any clone) and, where this checkout has the history,
    the commit that last changed it. Git that is missing or slow leaves those out."""
    import subprocess

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    bits = []
    if blob := git("hash-object", "--", str(baseline)):
        bits.append(f"blob {blob[:12]}")
    if git("rev-parse", "--is-shallow-repository") == "false":
        if last := git("log", "-1", "--format=%h %cs", "--", str(baseline)):
            bits.append(f"last changed in commit {last}")
    return ", ".join(bits)


def comment_notes(baseline: Path, current: Path, *, changed: bool, note: str | None) -> list[str]:
    """The comment's lines about the baseline: where it came from, and (when something changed)
    the exact command that accepts the current report as the new baseline."""
    from memaudit.render.markdown import md_code, md_escape

    where = baseline_provenance(baseline)
    lines = [
        f"Baseline: {md_code(str(baseline))}"
        + (f" ({md_escape(where)})" if where else "")
        + (f" · {md_escape(note)}" if note else "")
    ]
    if changed:
        lines += [
            "",
            "To accept these changes as the new baseline: "
            f"{md_code(f'memaudit baseline update {current} --into {baseline}')} "
            f"(the current report is in this job's artifact), then commit {md_code(str(baseline))}.",
        ]
    return lines


def compare(
    baseline: Annotated[
        Path, typer.Argument(help="The baseline report (e.g. reports/baseline/NAME.json).", show_default=False)
    ],
    current: Annotated[
        Path, typer.Argument(help="The report to check (from memaudit run --json).", show_default=False)
    ],
    tolerance: Annotated[
        str,
        typer.Option(
            help="Growth allowed per byte metric: bytes ('4096', '1 MiB') or a percent of the case's baseline saved "
            "bytes ('0.5%')."
        ),
    ] = "0",
    fail_on: Annotated[
        FailOn,
        typer.Option(
            help="increase: only growth fails; change: any change beyond the tolerance fails, missing cases too."
        ),
    ] = "increase",
    strict_env: Annotated[
        bool,
        typer.Option(
            "--strict-env", help="Fail when the environments differ (TE version, device class, torch version)."
        ),
    ] = False,
    allow_incomplete: Annotated[
        bool,
        typer.Option("--allow-incomplete", help="Compare cases memaudit marked incomplete instead of failing them."),
    ] = False,
    allow_missing: Annotated[
        bool,
        typer.Option(
            "--allow-missing",
            help="Let baseline cases be missing from the current report (they fail the gate by default).",
        ),
    ] = False,
    allow_emulated: Annotated[
        bool,
        typer.Option(
            "--allow-emulated",
            help="Compare emulated cases (--kernels emulated) with measured ones instead of refusing (exit 2).",
        ),
    ] = False,
    markdown: Annotated[
        Path | None, typer.Option(help="Write a PR comment (GitHub markdown) here, atomically.")
    ] = None,
    benchmark_json: Annotated[
        Path | None,
        typer.Option(
            "--benchmark-json",
            help="Write saved bytes per case for github-action-benchmark (tool: customSmallerIsBetter) here, "
            "atomically.",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="Name in the comment's hidden marker <!-- memaudit:NAME -->. Default: the baseline file's stem."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also show the rows (buffers) behind each change.")
    ] = False,
    baseline_note: Annotated[
        str | None,
        typer.Option(
            "--baseline-note",
            help="More about where the baseline came from, for the comment (the gate says whether the pull request "
            "changed it).",
        ),
    ] = None,
) -> None:
    """Compare CURRENT against BASELINE; exit 1 on a regression."""
    from memaudit.judge.baseline import compare_reports, parse_tolerance
    from memaudit.judge.integrity import read_report
    from memaudit.render.compare_table import print_comparison
    from memaudit.render.markdown import marker, render_markdown
    from memaudit.report import atomic_write_text

    out, err = consoles()
    # bad input raises UsageError: exit 2 in the one error style (memaudit.cli.common.Command)
    check_outputs(
        {"--markdown": markdown, "--benchmark-json": benchmark_json}, inputs={"BASELINE": baseline, "CURRENT": current}
    )
    tol = parse_tolerance(tolerance)
    comment_name = name if name is not None else default_comment_name(baseline)
    marker(comment_name)
    base_report = read_report(baseline)
    cur_report = read_report(current)
    cmp = compare_reports(
        base_report,
        cur_report,
        tolerance=tol,
        fail_on=fail_on,
        strict_env=strict_env,
        allow_incomplete=allow_incomplete,
        allow_emulated=allow_emulated,
        allow_missing=allow_missing,
    )

    for w in cmp.env_warnings:
        label = Text("error: " if strict_env else "warning: ", style="bold red" if strict_env else "bold yellow")
        label.append(f"environment differs from the baseline: {w}")
        err.print(label, soft_wrap=True)
    if cmp.env_warnings and not strict_env:
        err.print(Text("  the reports are compared anyway; --strict-env makes this a failure"), soft_wrap=True)

    from memaudit.render.unread import unread_block

    if (never := unread_block(cur_report.cases)) is not None:  # the current report's, first
        out.print(never)
    print_comparison(out, cmp, verbose=verbose, title=f"memaudit compare: {baseline} -> {current}")
    if markdown is not None:
        notes = comment_notes(baseline, current, changed=any(d.findings for d in cmp.cases), note=baseline_note)
        atomic_write_text(markdown, render_markdown(cur_report, cmp, name=comment_name, notes=notes))
        out.print(Text(f"wrote {markdown}"), soft_wrap=True)
    if benchmark_json is not None:
        from memaudit.render.benchmark import render_benchmark_json

        atomic_write_text(benchmark_json, render_benchmark_json(cur_report, cmp))
        out.print(Text(f"wrote {benchmark_json}"), soft_wrap=True)
    raise typer.Exit(exitcodes.FAIL if cmp.regressed else exitcodes.OK)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the CLI."""
    app.command("compare", help=COMPARE_HELP, cls=Command)(compare)
