"""Rich consoles for the CLI: ``COLUMNS`` wins; else a terminal keeps its width, and pipes and CI
logs get a wide, stable one.

What reaches the terminal through them is safe to show: control characters and bidirectional
overrides in user strings (a budget named ``"\\x1b[2J"``) are printed as escapes, never executed
(rich escapes markup, not control sequences). Standard output that goes away (``| head -c1``)
ends the output, not the command; one that cannot be written (``> /dev/full``) is a one-line
error, exit 2 (:class:`OutputError`); standard error that cannot be written is left alone.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from rich.console import Console
from rich.segment import Segment

from memaudit.errors import UsageError

LOG_WIDTH = 200
"""The width of output that goes to a pipe or a file (CI logs) when ``COLUMNS`` is not set."""

_NUMBER = re.compile(r"[0-9]{1,6}")
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters (tab and newline aside) and the bidirectional marks and overrides that can
make a terminal show other text than was printed."""


def visible(text: str) -> str:
    """``text`` with every control character and bidirectional override as an escape (``\\x1b``,
    ``\\u202e``): shown, not obeyed."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def sane_terminal_environment(environ: Any = None) -> None:
    """Drop ``COLUMNS`` and ``LINES`` where they are not plain numbers of at most 6 ASCII digits
    (``²`` passes ``str.isdigit``, a 5000-digit number fails ``int``): rich and click read them."""
    environ = os.environ if environ is None else environ
    for key in ("COLUMNS", "LINES"):
        value = environ.get(key)
        if value is not None and not _NUMBER.fullmatch(value.strip()):
            del environ[key]


def env_width() -> int | None:
    """``COLUMNS`` as a width (20 to 10,000), or None where it is unset or not a plain number."""
    value = os.environ.get("COLUMNS", "").strip()
    if not _NUMBER.fullmatch(value):
        return None
    return max(20, min(int(value), 10_000))


class OutputError(UsageError):
    """Standard output (or error) cannot be written: the disk is full, the device failed."""


class _Guarded:
    """A text stream whose reader may go away: a broken pipe ends the output quietly (later
    output is dropped, the command finishes and keeps its exit status); any other write error
    is an :class:`OutputError`. Either way, what Python still holds for the stream is sent to
    ``/dev/null``, so that the interpreter's last flush cannot fail again."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self.broken = False
        self._error: str | None = None
        """The OutputError's message, said again on every later write of text: a caller that
        caught the first one (click probes a stream with ``write("")``) must not go on as if the
        output had been written."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _call(self, fn: Any, *args: Any) -> Any:
        if self.broken:
            if self._error is not None and fn == self._stream.write and args and args[0]:
                raise OutputError(self._error)
            return None
        try:
            return fn(*args)
        except OSError as exc:
            self._drop()
            self.broken = True
            if exc.errno == errno.EPIPE or self._name == "error":  # nowhere left to say anything
                return None
            self._error = f"cannot write to standard {self._name}: {exc.strerror or exc}"
            raise OutputError(self._error) from None

    def _drop(self) -> None:
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError):
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except OSError:
            pass

    def write(self, text: str) -> int:
        out = self._call(self._stream.write, text)
        return out if isinstance(out, int) else len(text)

    def flush(self) -> None:
        self._call(self._stream.flush)


def guard(stream: Any, name: str) -> Any:
    """``stream`` (``sys.stdout`` or ``sys.stderr``) behind :class:`_Guarded`, once."""
    return stream if stream is None or isinstance(stream, _Guarded) else _Guarded(stream, name)


class SafeConsole(Console):
    """A rich Console that prints user strings' control characters as escapes (:func:`visible`);
    rich's own control segments (cursor moves of a live progress bar) pass."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control or not _UNSAFE.search(seg.text) else Segment(visible(seg.text), seg.style, seg.control)
            for seg in buffer
        )


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): ``COLUMNS`` columns where set (terminal or pipe); else the
    terminal's width, or ``LOG_WIDTH`` when not a terminal (rich would say 80)."""
    sane_terminal_environment()
    stream = guard(sys.stderr if stderr else sys.stdout, "error" if stderr else "output")
    width = env_width()
    if width is not None:
        return SafeConsole(file=stream, width=width)  # type: ignore[arg-type]
    probe = SafeConsole(file=stream)  # type: ignore[arg-type]
    return probe if probe.is_terminal else SafeConsole(file=stream, width=LOG_WIDTH)  # type: ignore[arg-type]


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles."""
    return make_console(), make_console(stderr=True)
