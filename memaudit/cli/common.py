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
    """'1,4,8' -> [1, 4, 8]; every value must be a positive integer, each given once, at most
    ``MAX_INT`` (a bound on every quantity: no overflow further on)."""
    out = []
    if len(text) > 10_000:
        raise UsageError(f"{len(text)} characters is too long for a list of integers", key=flag)
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 12:
            raise UsageError(f"expected positive integers separated by commas, got {part!r} in {text!r}", key=flag)
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"expected positive integers separated by commas, got {part!r} in {text!r}", key=flag) from None
        if value < 1:
            raise UsageError(f"must be >= 1, got {value}", key=flag)
        if value in out:
            raise UsageError(f"{value} is listed twice in {text!r} (each value once: the cases would share an id)", key=flag)
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
    for i, n in enumerate(names):
        if n not in known:
            raise UsageError(f"unknown recipe {n!r}; use one of {', '.join(known)} or 'all'", key="--recipe")
        if n in names[:i]:
            raise UsageError(f"{n!r} is listed twice in {text!r} (each recipe once: the cases would share an id)", key="--recipe")
    return names
