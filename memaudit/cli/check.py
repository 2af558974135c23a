"""``memaudit check REPORT --scenario FILE``: judge an existing report against a scenario's budgets.

A GPU runner produces the report (``memaudit run --json``); any machine can judge it. Exit codes:
0 every budget passes or is xfail; 1 a budget fails or XPASSes (or a case errored and the scenario
says ``on_error = "fail"``, or nothing was judged: see :func:`memaudit.judge.outcome.conclude`);
2 bad input (nothing written); 3 a case errored and no budget failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from memaudit.cli.common import SHIPPED_NAMES, Command, read_inputs, show_notes
from memaudit.render.console import consoles
from memaudit.report import check_outputs

CHECK_HELP = (
    "Evaluate a scenario's budgets against an existing JSON report, without re-running.\n\n"
    "Exit codes: 0 every budget passes or is xfail; "
    '1 a budget fails or XPASSes, a case errored and the scenario sets on_error = "fail", or the check judged '
    "nothing (every case skipped) or a budget applies to no case (both pass with --allow-na); "
    "2 bad input: report, scenario or a budget that selects nothing (nothing is written); "
    '3 a case errored (on_error = "warn") and no budget failed.'
)


def check(
    report: Annotated[Path, typer.Argument(help="A JSON report from memaudit run --json.", show_default=False)],
    scenario: Annotated[
        Path,
        typer.Option(
            "--scenario",
            help="The scenario TOML file whose budgets judge the report, or a shipped scenario by name "
            f"({SHIPPED_NAMES}).",
            show_default=False,
        ),
    ],
    allow_target: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-target",
            help="A PKG.MOD:FACTORY target the scenario may name (repeatable; also [tool.memaudit] allow-targets in "
            "pyproject.toml).",
        ),
    ] = None,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", help="Write the report with each case's budgets filled in here (atomically)."),
    ] = None,
    show_na: Annotated[bool, typer.Option("--show-na", help="Also list rules that do not apply to a case.")] = False,
    allow_incomplete: Annotated[
        bool, typer.Option("--allow-incomplete", help="Judge cases memaudit marked incomplete instead of failing them.")
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Also fail (exit 1) when a budget judged no case because its cases did not run or took another path.",
        ),
    ] = False,
    allow_na: Annotated[
        bool,
        typer.Option(
            "--allow-na",
            help="Pass a check that judged nothing (every budget n/a: every case skipped) and budgets that apply to "
            "no case (by default they fail).",
        ),
    ] = False,
) -> None:
    """Judge REPORT against the budgets of --scenario; exit 1 if a budget fails."""
    from memaudit.judge.budgets import te_version_of
    from memaudit.judge.integrity import read_report
    from memaudit.judge.outcome import conclude
    from memaudit.judge.scenario import allowed_targets, load_scenario
    from memaudit.render.verdicts import render_failures, render_verdicts
    from memaudit.report import write_report

    out, err = consoles()
    # bad input raises UsageError: exit 2 in the one error style (memaudit.cli.common.Command)
    check_outputs({"--json": json_path}, inputs=read_inputs(report=report, scenario=scenario))
    loaded = load_scenario(scenario, allowed_targets(tuple(allow_target or ())))
    rep = read_report(report)
    result = conclude(
        rep,
        loaded,
        allow_incomplete=allow_incomplete,
        allow_na=allow_na,
        strict=strict,
        must_measure=False,
        source=str(report),
    )
    verdicts = result.verdicts or []

    if te_version_of(rep.environment) is None and any(r.known_failure for r in loaded.rules):
        err.print(
            Text(
                "warning: the report records no TransformerEngine version, so known_failure entries do not apply",
                style="yellow",
            ),
            soft_wrap=True,
        )
    from memaudit.render.unread import unread_block

    if (never := unread_block(c for c in rep.cases if loaded.covers(c))) is not None:  # first
        out.print(never)
    out.print(render_failures(verdicts), soft_wrap=True)
    out.print(render_verdicts(verdicts, show_na=show_na, width=out.width))
    show_notes(err, result.notes)
    errored = [c.id for c in rep.cases if c.status == "error" and loaded.covers(c)]
    if errored:
        label = "error" if loaded.on_error == "fail" else "warning"
        err.print(
            Text(
                f"{label}: {len(errored)} case(s) errored (on_error = {loaded.on_error!r}): {', '.join(errored)}",
                style="red" if label == "error" else "yellow",
            ),
            soft_wrap=True,
        )
    if json_path is not None:
        write_report(rep, json_path)
        out.print(Text(f"wrote {json_path}"), soft_wrap=True)
    raise typer.Exit(result.code)


def register(app: typer.Typer) -> None:
    """Add ``check`` to the CLI."""
    app.command("check", help=CHECK_HELP, cls=Command)(check)
