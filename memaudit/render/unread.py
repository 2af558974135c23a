"""Buffers saved for backward that backward never read, shown before everything else.

:func:`unread_buffers` lists them per case (one per storage, as ``unread_bytes`` counts them);
:func:`unread_block` is the console's view (rich), :func:`unread_markdown` the markdown one (PR
comments). Every user string is escaped by the renderer that shows it (rich ``Text`` is never
markup; markdown through :func:`memaudit.render.markdown.md_escape`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.text import Text

from memaudit.judge.rows import read_text, row_name
from memaudit.report import CaseReport, Row, unread_storages

HEADLINE = "saved for backward, never read"
MAX_LINES = 50
"""At most this many unread buffers are listed per report (then a line says how many more)."""


@dataclass(frozen=True)
class UnreadBuffer:
    """One storage of a case that backward never read: the row that names it and its full size."""

    case: str
    row: Row
    bytes: int

    def what(self) -> str:
        """``fc1.input data rowwise``: operand, kind and orientation (format where the row has no
        orientation and the format says more than the dtype)."""
        r = self.row
        parts = [row_name(r), r.kind]  # type: ignore[arg-type]  # frozen rows: read only
        if r.orientation:
            parts.append(r.orientation)
        return " ".join(parts)

    def text(self) -> str:
        """``fc1.input data rowwise 127,401,984 B``."""
        return f"{self.what()} {self.bytes:,} B"


def unread_buffers(case: CaseReport) -> list[UnreadBuffer]:
    """The device storages of ``case`` (parameters aside) whose every row is ``unread``, largest
    first; each named by its first row. Empty for a case with no verdicts or nothing unread."""
    if case.status != "ok" or case.unread is None:
        return []
    unread = set(unread_storages(case.rows))
    params = {r.storage for r in case.rows if r.apart and r.storage is not None}  # parameters, cached copies
    first: dict[str, Row] = {}
    for r in case.rows:
        if r.storage in unread and r.storage not in params and r.resides == "device" and r.storage not in first:
            first[r.storage] = r
    out = [UnreadBuffer(case.id, r, r.storage_bytes) for r in first.values()]
    return sorted(out, key=lambda b: (-b.bytes, b.row.index))


def all_unread(cases: Iterable[CaseReport]) -> list[UnreadBuffer]:
    """:func:`unread_buffers` of every case, in case order."""
    return [b for c in cases for b in unread_buffers(c)]


def _lines(buffers: list[UnreadBuffer], with_case: bool) -> list[tuple[str, UnreadBuffer]]:
    return [((f"{b.case}: " if with_case else ""), b) for b in buffers[:MAX_LINES]]


def unread_block(cases: Iterable[CaseReport]) -> RenderableType | None:
    """``saved for backward, never read: fc1.input data rowwise 127,401,984 B``, one line per
    unread storage of ``cases`` (the case id first where there are several); None when none."""
    cases = list(cases)
    buffers = all_unread(cases)
    if not buffers:
        return None
    with_case = len({b.case for b in buffers}) > 1 or len(cases) > 1
    lines = []
    for prefix, b in _lines(buffers, with_case):
        line = Text(f"{HEADLINE}: ", style="bold red")
        line.append(prefix + b.what())
        line.append(f" {b.bytes:,} B", style="bold")
        lines.append(line)
    if len(buffers) > MAX_LINES:
        lines.append(
            Text(f"... and {len(buffers) - MAX_LINES} more unread buffers (the JSON report lists every row's verdict)")
        )
    return Group(*lines)


def unread_markdown(cases: Iterable[CaseReport], escape: object) -> list[str]:
    """Markdown lines (a heading and a list; ``escape`` is the markdown escaper) for the unread
    buffers of ``cases``, or ``[]`` when there are none."""
    buffers = all_unread(cases)
    if not buffers:
        return []
    esc = escape if callable(escape) else str
    total = sum(b.bytes for b in buffers)
    lines = [f"**🗑️ {HEADLINE}:** {len(buffers)} buffer{'s' if len(buffers) != 1 else ''}, {total:,} B", ""]
    lines += [f"- {esc(b.case)}: {esc(b.what())} {b.bytes:,} B" for b in buffers[:MAX_LINES]]
    if len(buffers) > MAX_LINES:
        lines.append(f"- … and {len(buffers) - MAX_LINES} more (the JSON report lists every row's verdict)")
    return [*lines, ""]


def verdict_cell(row: Row) -> str:
    """A row's verdict for a table cell: ``read (aten.mm)``, ``unread``, ``unknown: why``, or ""."""
    if row.read is None:
        return ""
    if row.read == "read":
        return f"read ({row.read_by})" if row.read_by else "read"
    return "unread" if row.read == "unread" else read_text(row)
