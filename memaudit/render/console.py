"""Rich consoles for the CLI: ``COLUMNS`` wins; else a terminal keeps its width, and pipes and CI
logs get a wide, stable one."""

from __future__ import annotations

import os

from rich.console import Console

LOG_WIDTH = 200
"""The width of output that goes to a pipe or a file (CI logs) when ``COLUMNS`` is not set."""


def env_width() -> int | None:
    """``COLUMNS`` as a width (at least 20), or None where it is unset or not a number."""
    value = os.environ.get("COLUMNS", "").strip()
    if not value.isdigit():
        return None
    return max(20, min(int(value), 10_000))


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): ``COLUMNS`` columns where set (terminal or pipe); else the
    terminal's width, or ``LOG_WIDTH`` when not a terminal (rich would say 80)."""
    width = env_width()
    if width is not None:
        return Console(stderr=stderr, width=width)
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=LOG_WIDTH)


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles."""
    return make_console(), make_console(stderr=True)
