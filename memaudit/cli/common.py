"""What every command shares: the usage-error exit, the flag parsers, and the exit status of a
judged scenario."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from memaudit.errors import Terminated, UsageError
from memaudit.judge import exitcodes
from memaudit.judge.shipped import shipped_scenarios
from memaudit.render.console import make_console, sane_terminal_environment
from memaudit.targets.matrix import parse_int_list as parse_int_list
from memaudit.targets.matrix import parse_range
from memaudit.targets.matrix import parse_recipes as parse_recipes

# click, as the typer installed uses it: the click package, or the copy newer typers carry
SHIPPED_NAMES = ", ".join(shipped_scenarios())
"""The shipped scenarios, as ``--help`` lists them (``run --scenario``, ``check --scenario``)."""

clickx: Any = importlib.import_module(typer.BadParameter.__module__)
get_current_context = importlib.import_module(
    typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals"
).get_current_context
Context = typer.Context
_NO_ARGS_IS_HELP = getattr(clickx, "NoArgsIsHelpError", ())


def error_line(message: str, hint: str | None = None) -> Text:
    """memaudit's one error style: ``error: WHERE: WHAT`` (a flag, or a file and key, then what is
    wrong with the value), an indented hint under it. Plain text: a value like ``[/x]`` is shown,
    never read as markup."""
    msg = Text()
    msg.append("error:", style="bold red")  # the label only: the message is plain
    msg.append(f" {message}")
    if hint:
        msg.append(f"\n  {hint}", style="dim")
    return msg


def usage_exit(err: Console, exc: UsageError, hint: str | None = None) -> typer.Exit:
    """Print a usage error in the one style (no traceback, no markup) and return the Exit(2) to raise."""
    err.print(error_line(str(exc), hint), soft_wrap=True)  # one line: paths and values stay whole for grep
    return typer.Exit(exitcodes.USAGE)


def as_click(exc: UsageError) -> clickx.ClickException:
    """A memaudit UsageError as typer's exception: ``BadParameter`` where it is about a flag."""
    if exc.key and exc.key.startswith("-") and exc.source is None:
        return typer.BadParameter(exc.message, param_hint=exc.key)
    return clickx.UsageError(str(exc))


def click_error(exc: clickx.ClickException) -> tuple[str, str | None]:
    """(message, hint) of a click/typer error in memaudit's style: ``--flag: what`` for a bad
    value, click's message otherwise; the hint names the command's ``--help``."""
    if isinstance(exc, clickx.BadParameter) and not isinstance(exc, clickx.MissingParameter):
        hint = exc.param_hint
        if hint is None and exc.param is not None:
            param = exc.param
            hint = list(getattr(param, "opts", None) or []) or (param.human_readable_name,)
        where = hint if isinstance(hint, str) else " / ".join(hint or ())
        what = exc.message.removeprefix("Value error, ")  # typer's wording for a Literal choice
        message = f"{where}: {what}" if where else what
    elif isinstance(exc, clickx.NoSuchOption) and exc.possibilities:
        message = f"{exc.message} (did you mean {' or '.join(sorted(exc.possibilities))}?)"
    else:
        message = exc.format_message()
    message = message.rstrip(".") if message.endswith(".") and not message.endswith("..") else message
    if len(message) > 1 and message[0].isupper() and message[1].islower():
        message = message[0].lower() + message[1:]
    own = getattr(exc, "ctx", None)  # set by click for what it parsed
    ctx = own or get_current_context(silent=True)
    about_flags = own is not None or isinstance(exc, clickx.BadParameter)  # not a file's key or value
    return message, f"see '{ctx.command_path} --help'" if ctx is not None and about_flags else None


def show_click_error(exc: clickx.ClickException) -> int:
    """Print a click/typer error in memaudit's one style on stderr; its exit status (2 for usage)."""
    message, hint = click_error(exc)
    make_console(stderr=True).print(error_line(message, hint), soft_wrap=True)
    return exc.exit_code


def _handled(call: Callable[[], Any], resilient: bool) -> Any:
    try:
        return call()
    except _NO_ARGS_IS_HELP:
        raise  # typer prints the help
    except clickx.ClickException as exc:
        if resilient:
            raise
        raise typer.Exit(show_click_error(exc)) from None
    except UsageError as exc:
        if resilient:
            raise
        raise typer.Exit(show_click_error(as_click(exc))) from None


class Command(TyperCommand):
    """A typer command whose bad usage (typer's and memaudit's alike) prints in memaudit's one
    style, ``error: --flag: ...``, and exits 2, instead of typer's boxed panel."""

    def make_context(  # type: ignore[override]
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        return _handled(
            lambda: super(Command, self).make_context(info_name, args, parent, **extra),
            bool(extra.get("resilient_parsing")) or bool(parent and parent.resilient_parsing),
        )

    def invoke(self, ctx: Context) -> Any:  # type: ignore[override]
        return _handled(lambda: super(Command, self).invoke(ctx), ctx.resilient_parsing)


class Group(TyperGroup):
    """The command groups' counterpart of :class:`Command` (an unknown command or group option).
    Before anything is parsed, ``COLUMNS`` and ``LINES`` that are not plain numbers are dropped:
    rich and click read them (``--help`` too) and would fail on ``²`` or 5,000 digits."""

    def make_context(  # type: ignore[override]
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        sane_terminal_environment()
        return _handled(
            lambda: super(Group, self).make_context(info_name, args, parent, **extra),
            bool(extra.get("resilient_parsing")) or bool(parent and parent.resilient_parsing),
        )

    def invoke(self, ctx: Context) -> Any:  # type: ignore[override]
        return _handled(lambda: super(Group, self).invoke(ctx), ctx.resilient_parsing)


def _raised_at(exc: BaseException) -> str:
    """`` at FILE:LINE``: the innermost frame of ``exc``'s traceback (where ``sys.exit`` was called)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""


def exits(fn: Callable[..., int | None]) -> Callable[..., None]:
    """A command body that returns its exit status (a UsageError is exit 2 with its message in
    the one style, through :class:`Command`, or here for a command typer made another way).

    Typer reads the wrapped function's signature, so a command's options are declared once.
    """

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs)
        except UsageError as exc:
            raise typer.Exit(show_click_error(as_click(exc))) from None
        except Terminated:
            raise
        except SystemExit as exc:  # a plugin's or factory's sys.exit is never memaudit's exit status
            where = _raised_at(exc)
            raise typer.Exit(
                show_click_error(
                    as_click(
                        UsageError(
                            f"code memaudit ran (a plugin, target or factory) called sys.exit({exc.code!r}){where}: "
                            "the command stopped there, and nothing was judged",
                            key="plugins",
                        )
                    )
                )
            ) from None
        raise typer.Exit(code or exitcodes.OK)

    return command


class IntList:
    """The one parser of memaudit's list and range flags (``--groups 1,4,8``; with ``ranges``,
    ``estimate --tokens 1024:131072:x2`` too), given to typer as ``parser=``: typer 0.29 parses
    through pydantic and takes no click ``ParamType``; ``parser`` is its idiom for one. The value
    becomes a list of integers; a bad one is typer's BadParameter, shown as ``error: --flag: what``.
    A list (a default, or a caller of the Python API) passes as it is."""

    def __init__(self, *, ranges: bool = False) -> None:
        self.ranges = ranges
        self.metavar = "N,...|A:B:xK|A:B:+K" if ranges else "N,..."
        """What ``--help`` shows for the value (typer would show the annotation, ``<Any>``)."""

    def __call__(self, value: Any) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return parse_range(str(value), "") if self.ranges else parse_int_list(str(value), "")
        except UsageError as exc:
            raise ValueError(exc.message) from None  # typer names the flag


INT_LIST = IntList()
"""``1,4,8``: positive integers, each once."""
INT_RANGE = IntList(ranges=True)
"""``N``, ``A,B,C``, ``A:B:xK`` (geometric) or ``A:B:+K`` (arithmetic)."""
Ints = Any
"""The annotation of a flag parsed by :class:`IntList` (typer reads the parser, not the type)."""


def read_inputs(*, report: Any = None, scenario: Any = None) -> dict[str, Any]:
    """The files a command reads, by what it calls them (for ``check_outputs``: no output may be
    one): ``REPORT``; the ``--scenario`` file (a shipped name is no file here) and
    ``pyproject.toml``, which a scenario's allowed targets are read from."""
    import os

    out: dict[str, Any] = {}
    if report is not None:
        out["REPORT"] = report
    if scenario is not None:
        if os.path.exists(scenario):
            out["--scenario"] = scenario
        out["pyproject.toml"] = "pyproject.toml"
    return out


def show_notes(err: Console, notes: Any) -> None:
    """Say an outcome's notes (:class:`memaudit.judge.outcome.Note`) on ``err``, in the one style:
    ``error: ...`` (it failed the run), ``warning: ...``, ``note: ...``; an ``info`` note as it is."""
    for n in notes:
        if n.level == "error":
            err.print(error_line(n.text), soft_wrap=True)
        elif n.level == "info":
            err.print(Text(n.text), soft_wrap=True)
        else:
            line = Text(f"{n.level}: ", style="yellow")
            line.append(n.text)
            err.print(line, soft_wrap=True)
