"""What every command shares: the usage-error exit, the flag parsers, and the exit status of a
judged scenario."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from memaudit.cli import exitcodes
from memaudit.errors import UsageError
from memaudit.render.console import make_console

OUTCOME_CODES = {"ok": exitcodes.OK, "fail": exitcodes.FAIL, "case_error": exitcodes.CASE_ERROR}
"""A judged scenario's outcome (:func:`memaudit.judge.scenario.outcome`) -> exit status."""


def usage_exit(err: Console, exc: UsageError, hint: str | None = None) -> typer.Exit:
    """Print a usage error (no traceback, no markup) and return the Exit(2) to raise."""
    msg = Text("error: ", style="bold red")
    msg.append(str(exc))
    if hint:
        msg.append(f"\n  {hint}")
    err.print(msg, soft_wrap=True)
    return typer.Exit(exitcodes.USAGE)


def exits(fn: Callable[..., int | None]) -> Callable[..., None]:
    """A command body that returns its exit status; a UsageError becomes exit 2 with its message.

    Typer reads the wrapped function's signature, so a command's options are declared once.
    """

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs)
        except UsageError as exc:
            raise usage_exit(make_console(stderr=True), exc) from None
        raise typer.Exit(code or exitcodes.OK)

    return command


def parse_int_list(text: str, flag: str) -> list[int]:
    """'1,4,8' -> [1, 4, 8]; every value must be a positive integer."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"expected positive integers separated by commas, got {part!r} in {text!r}", key=flag) from None
        if value < 1:
            raise UsageError(f"must be >= 1, got {value}", key=flag)
        out.append(value)
    if not out:
        raise UsageError("no value given", key=flag)
    return out


def parse_recipes(text: str, supported: Sequence[str], known: Sequence[str]) -> list[str]:
    """'all' (the ``supported`` ones), or names from ``known`` separated by commas."""
    if text == "all":
        return list(supported)
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("no recipe given", key="--recipe")
    for n in names:
        if n not in known:
            raise UsageError(f"unknown recipe {n!r}; use one of {', '.join(known)} or 'all'", key="--recipe")
    return names
