"""Rich consoles for the CLI: terminals keep their width; pipes and CI logs get a wide, stable one."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.text import Text

from memaudit import exitcodes
from memaudit.errors import UsageError

LOG_WIDTH = 200


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr); not a terminal -> ``LOG_WIDTH`` columns, not rich's 80."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=LOG_WIDTH)


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles."""
    return make_console(), make_console(stderr=True)


def usage_exit(err: Console, exc: UsageError, hint: str | None = None) -> typer.Exit:
    """Print a usage error (no traceback, no markup) and return the Exit(2) to raise."""
    msg = Text("error: ", style="bold red")
    msg.append(str(exc))
    if hint:
        msg.append(f"\n  {hint}")
    err.print(msg, soft_wrap=True)
    return typer.Exit(exitcodes.USAGE)
