"""Errors that the CLI turns into exit codes, and the hint their messages share."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UsageError(Exception):
    """Bad usage or input: the CLI prints it and exits 2.

    The message names where the bad value came from (a flag, or a file and key path) and the value.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.message = message
        """The message without the source and key in front."""
        where = ""
        if source and key:
            where = f"{source}: {key}: "
        elif source or key:
            where = f"{source or key}: "
        super().__init__(where + message)


class Terminated(SystemExit):
    """SIGTERM, as memaudit raises it (exit status 128 + the signal): unlike a third party's
    ``sys.exit`` inside a case or a plugin, which memaudit reports, it ends the command."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``word``, or ``""`` when none is close.

    Meant to follow the bad value in a message: ``f"unknown key {k!r}{did_you_mean(k, allowed)}; ..."``.
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


REASON_CHARS = 400
"""The most characters of a case's reason a table, a finding or a comment shows (the report keeps it whole)."""


def clip(text: str, limit: int = REASON_CHARS, whole: str = "the report has the whole reason") -> str:
    """``text`` on one line (whitespace runs made one space) and at most about ``limit``
    characters, saying how long the whole was: what a table or comment shows of a reason that
    may be huge (a traceback, a hostile report). Linear in ``len(text)``."""
    head = " ".join(text[: limit * 4].split())
    if len(head) <= limit and len(text) <= limit * 4:
        return head
    return head[:limit].rstrip() + f" … ({len(text):,} characters in all; {whole})"
