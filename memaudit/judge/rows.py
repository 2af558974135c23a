"""Rows in failure messages: one line per saved buffer, operand names, and byte amounts.

:func:`format_row` writes a row JAX ``print_saved_residuals`` style plus its role;
:func:`format_rows` caps a list of them at :data:`MAX_ROW_LINES`. Nothing here imports torch or TE.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from memaudit.units import fmt_bytes, fmt_shape

MAX_ROW_LINES = 12

_INDEXED = re.compile(r"\[(\d+)\]$")


class RowLike(Protocol):
    """What the engine reads from a row (memaudit.report.Row satisfies it)."""

    index: int
    operand: str | None
    group: int | None
    kind: str
    format: str
    orientation: str | None
    container: str | None
    container_index: int | None
    slot: str | None
    shape: list[int]
    dtype: str
    bytes: int
    storage: str | None
    storage_bytes: int
    is_parameter: bool
    duplicate_of: int | None

    def notes(self) -> list[str]: ...


# ---- operand names -------------------------------------------------------------------------------
def is_indexed(operand: str) -> bool:
    """Whether the operand carries its own index (``fc1.weight[2]``), as grouped weights do."""
    return bool(_INDEXED.search(operand))


def operand_base(operand: str) -> str:
    """The operand without a trailing index: ``fc1.weight[2]`` -> ``fc1.weight``."""
    return _INDEXED.sub("", operand)


def row_name(row: RowLike) -> str:
    """``fc1.input[3]`` for a grouped row; weights already carry their index in the operand."""
    name = row.operand or "?"
    if row.group is not None and not is_indexed(name):
        name += f"[{row.group}]"
    return name


# ---- lines ---------------------------------------------------------------------------------------


def bytes_text(n: int) -> str:
    """``512 B``, or ``1.5 KiB (1536 B)`` from 1 KiB up: the exact count stays visible."""
    return f"{fmt_bytes(n)} ({n} B)" if n >= 1024 else f"{n} B"


def format_row(row: RowLike) -> str:
    """One line per saved buffer, JAX ``print_saved_residuals`` style plus the role.

    ``#7  fc1.input[2]  fp8  data  columnwise  (1024, 512)  uint8  512.0 KiB  [CONTAINER.SLOT]``
    """
    parts = [
        f"#{row.index}",
        row_name(row),
        row.format,
        row.kind,
        row.orientation or "-",
        fmt_shape(row.shape),
        str(row.dtype).removeprefix("torch."),
        fmt_bytes(row.bytes),
    ]
    extras = []
    where = ".".join(p for p in (row.container, row.slot) if p)
    op = getattr(row, "op", None)
    module = getattr(row, "module", None)
    named_by_module = module is not None and (row.operand or "").startswith(f"{module}:")
    if named_by_module and not row.container:
        where = ""  # the operand already says module, node and attribute
    if op and named_by_module:
        op = None
    if where or op:
        extras.append(" ".join(p for p in (where, f"by {op}" if op else "") if p))
    if module is not None and not named_by_module:
        extras.append(f"in {module}")
    source = getattr(row, "source", None)
    if source:
        extras.append(f"at {source}")
    verdict = read_text(row)
    if verdict:
        extras.append(verdict)
    extras += row.notes()
    return "  ".join(parts) + (f"  [{', '.join(extras)}]" if extras else "")


def read_text(row: object) -> str:
    """A row's read verdict in words: ``read by aten.mm``, ``never read``, ``unknown: why``, or ""
    where no analysis ran."""
    verdict, by = getattr(row, "read", None), getattr(row, "read_by", None)
    if verdict is None:
        return ""
    if verdict == "unread":
        return "never read"
    if verdict == "read":
        return f"read by {by}" if by else "read"
    return f"{verdict}: {by}" if by else verdict


def format_rows(rows: Sequence[RowLike], limit: int = MAX_ROW_LINES) -> list[str]:
    """Formatted lines for up to ``limit`` rows, then a '... and N more' line."""
    lines = [format_row(r) for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more")
    return lines
