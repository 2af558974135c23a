"""``memaudit baseline update CURRENT [--into PATH] [--prune]``: write or refresh a baseline.

The baseline is written atomically (temp file, then rename), in the case order it already had, so
that its diff in the PR shows exactly what the change accepts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from memaudit.cli.common import Command, Group
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.render.console import consoles
from memaudit.report import check_outputs

BASELINE_DIR = Path("reports") / "baseline"


def update(
    current: Annotated[
        Path, typer.Argument(help="The report to accept (from memaudit run --json).", show_default=False)
    ],
    into: Annotated[
        Path | None,
        typer.Option(help="Baseline file to write or refresh. Default: reports/baseline/<CURRENT's name>.json."),
    ] = None,
    prune: Annotated[
        bool, typer.Option(help="Drop baseline cases that the current report lacks (default: keep them).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Merge a report from another environment (device class, TE or torch version) into the baseline.",
        ),
    ] = False,
) -> None:
    """Write or refresh a baseline from CURRENT and print what changed.

    Runs under a lock on the file the baseline really is (symlinks resolved, :func:`baseline_lock`),
    so concurrent updates of one file, however named, merge in turn.
    """
    out, err = consoles()
    target = into if into is not None else BASELINE_DIR / f"{current.stem}.json"
    # bad input raises UsageError: exit 2 in the one error style (memaudit.cli.common.Command)
    check_outputs({"--into": target}, inputs={"CURRENT": current})
    target.resolve().parent.mkdir(parents=True, exist_ok=True)
    with baseline_lock(target):
        _update(current, target, prune, force, out, err)
    raise typer.Exit(exitcodes.OK)


def baseline_lock(target: Path) -> Any:
    """filelock's exclusive lock for the file ``target`` really is (symlinks resolved). Its lock
    file lives in the temp folder, named by a hash of that path, so that nothing is left beside a
    committed baseline; every ``baseline update`` of the file, through any link, takes the same one."""
    import hashlib
    import tempfile

    from filelock import FileLock

    key = hashlib.sha256(str(target.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return FileLock(os.path.join(tempfile.gettempdir(), f"memaudit-baseline-{key}.lock"))


def _update(current: Path, target: Path, prune: bool, force: bool, out: Any, err: Any) -> None:
    from memaudit.judge.baseline import env_differences, update_baseline
    from memaudit.judge.integrity import read_report
    from memaudit.report import write_report

    cur = read_report(current)
    existing = None
    if target.exists():
        try:
            existing = read_report(target)
        except UsageError as exc:
            raise UsageError(
                f"{exc}; the existing baseline was left as it is: fix or remove it, then run again"
            ) from None
    env_diff = env_differences(existing.environment, cur.environment) if existing is not None else []
    if env_diff and existing is not None and existing.cases and not force:
        raise UsageError(
            f"the current report comes from another environment than {target}: {'; '.join(env_diff)}; "
            "--force merges it anyway (or write another baseline with --into)",
            source=str(current),
        )
    merged, changes = update_baseline(cur, existing, prune=prune)

    kept = [c for c in changes if c.action == "kept"]
    for w in env_diff:
        err.print(
            Text(f"warning: the current report comes from another environment: {w}", style="yellow"), soft_wrap=True
        )
    if env_diff and kept:
        err.print(
            Text(f"  {len(kept)} kept case(s) were measured in the old environment; --prune drops them"),
            soft_wrap=True,
        )

    unchanged = 0
    for ch in changes:
        if ch.action == "unchanged":
            unchanged += 1
            continue
        style = {"added": "green", "updated": "yellow", "removed": "red", "kept": "dim"}.get(ch.action, "")
        out.print(Text(ch.text(), style=style), soft_wrap=True)
    if unchanged:
        out.print(Text(f"{unchanged} case{'s' if unchanged != 1 else ''} unchanged"), soft_wrap=True)

    up_to_date = (
        existing is not None
        and all(ch.action in ("unchanged", "kept") for ch in changes)
        and not env_diff
        and existing.environment == cur.environment
    )
    if up_to_date:
        out.print(Text(f"{target} is up to date; not rewritten"), soft_wrap=True)
        return
    write_report(merged, target)
    verb = "refreshed" if existing is not None else "wrote"
    out.print(
        Text(f"{verb} {target} ({len(merged.cases)} case{'s' if len(merged.cases) != 1 else ''})"), soft_wrap=True
    )


def register(app: typer.Typer) -> None:
    """Add the ``baseline`` command group (``baseline update``) to the CLI."""
    sub = typer.Typer(
        name="baseline",
        help="Baselines that `memaudit compare` gates against (reports/baseline/).",
        no_args_is_help=True,
        add_completion=False,
        cls=Group,
    )
    sub.command("update", cls=Command)(update)
    app.add_typer(sub, name="baseline")
