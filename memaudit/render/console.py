"""Rich consoles for the CLI: terminals keep their width; pipes and CI logs get a wide, stable one."""

from __future__ import annotations

from rich.console import Console

LOG_WIDTH = 200


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr); not a terminal -> ``LOG_WIDTH`` columns, not rich's 80."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=LOG_WIDTH)


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles."""
    return make_console(), make_console(stderr=True)
