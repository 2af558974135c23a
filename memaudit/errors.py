"""Errors that the CLI turns into exit codes."""

from __future__ import annotations


class UsageError(Exception):
    """Bad usage or input: the CLI prints it and exits 2.

    The message names where the bad value came from (a flag, or a file and key path) and the value.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        where = ""
        if source and key:
            where = f"{source}: {key}: "
        elif source or key:
            where = f"{source or key}: "
        super().__init__(where + message)
