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


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``word``, or ``""`` when none is close.

    Meant to follow the bad value in a message: ``f"unknown key {k!r}{did_you_mean(k, allowed)}; ..."``.
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
