"""Tables that fit the console: a wide layout where it fits, a compact one where it does not.

Every table of the CLI is a :class:`Sheet`: columns, rows of plain cells, optional sections. A
sheet drops the columns that are empty in every row, and renders

* **wide**: a boxed rich table, every column at its natural width (what a CI log of
  ``LOG_WIDTH`` columns gets, and a wide terminal);
* **compact**: fewer columns (the caller builds a second, smaller sheet) and no vertical rules,
  below ``COMPACT_WIDTH`` columns or wherever the wide one would not fit. A sheet with a
  ``group`` column (a case id) prints that column as a line of its own above its rows, so that
  a long id never squeezes the numbers beside it.

Numbers, ids and shapes never wrap (a column is ``wrap=True`` only for free text, which wraps at
spaces), so a value is never cut in the middle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

COMPACT_WIDTH = 100
"""Below this many columns every table uses its compact layout."""

INDENT = 2
"""The indent of a grouped sheet's rows under their group line."""

FREE_MIN = 20
"""The wide layout is used only where each free-text column gets this many columns (or all it needs)."""

LONG_WORD = 30
"""Free text may fold a word longer than this (a path in an error message) rather than widen its column."""

Cell = str | Text


@dataclass(frozen=True)
class Col:
    """A column: its header, justification, and whether its text may wrap at spaces."""

    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False
    """Free text (notes, reasons, messages) that may wrap; numbers, ids and shapes never do."""
    keep: bool = False
    """Shown even where every cell is empty."""


_TOKEN = re.compile(r"(?:(?:[<>]=?|==?|≠) )?[-+(~]?[0-9][0-9.,]* (?:B|KiB|MiB|GiB|TiB|kB|MB|GB|TB)(?![A-Za-z])\S*|\S+")
"""A word, or a quantity with its unit (``1.5 KiB``, ``(+1536 B);``, ``<= 96 MiB``): wrapping never
splits one."""


def wrap_text(text: Text | str, width: int, *, indent: int = 0, hang: int | None = None) -> Text:
    """``text`` wrapped at spaces to ``width`` columns, a quantity and its unit kept together;
    the first line indented by ``indent``, the others by ``hang`` (default: ``indent``). A word
    longer than the line is folded, after a ``.``, ``/`` or ``:`` where it has one, else ``_`` or ``-``.
    Styles are kept; existing line breaks too."""
    text = _text(text)
    hang = indent if hang is None else hang
    out: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        pad, start, col, last = indent, None, indent, 0
        for m in _TOKEN.finditer(line.plain):
            a, b = m.span()
            if start is not None and col + 1 + (b - a) > width:
                out.append(Text(" " * pad) + line[start:last])
                pad, start, col = hang, None, hang
            while start is None and col + (b - a) > width and width - col > 0:  # fold a long word
                cut = a + (width - col)
                for marks in ("./:", "_-"):  # after a dot, else an underscore, where there is one
                    soft = max(line.plain.rfind(c, a + 1, cut) for c in marks)
                    if soft > a:
                        cut = soft + 1
                        break
                out.append(Text(" " * pad) + line[a:cut])
                pad, col, a = hang, hang, cut
            if start is None:
                start, col = a, col + (b - a)
            else:
                col += 1 + (b - a)
            last = b
        out.append(Text(" " * pad) + line[start:last] if start is not None else Text(""))
    return Text("\n").join(out)


class Prose:
    """Text that wraps to the console's width without splitting a quantity from its unit
    (rich alone would break ``1.5 KiB`` at its space), with a hanging indent."""

    def __init__(self, text: Text | str, *, indent: int = 0, hang: int | None = None) -> None:
        self.text = _text(text)
        self.indent = indent
        self.hang = indent if hang is None else hang

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield wrap_text(self.text, options.max_width, indent=self.indent, hang=self.hang)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max((len(m.group()) for m in _TOKEN.finditer(self.text.plain)), default=0)
        return Measurement(min(options.max_width, longest + self.indent), min(options.max_width, self.text.cell_len + self.indent))


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)  # plain: ids and operands are not markup


def _longest_word(text: Text) -> int:
    return max((len(w) for line in text.plain.splitlines() for w in line.split()), default=0)


def _width(text: Text, wrap: bool) -> int:
    """The narrowest a cell can be without cutting anything: its longest line, or for free text
    its longest word."""
    if wrap:
        return _longest_word(text)
    return max((Text(line).cell_len for line in text.plain.splitlines()), default=0)


@dataclass
class Sheet:
    """Rows for a table that renders wide or compact; see the module doc."""

    cols: Sequence[Col]
    title: Text | str | None = None
    """A plain string or a Text (never read as markup)."""
    caption: Text | str | None = None
    group: int | None = None
    """The index of the column printed as a line above its rows in the compact layout (a case id);
    a row whose cell there is empty or repeats the one above belongs to the same group."""
    rows: list[list[Text]] = field(default_factory=list)
    ends: set[int] = field(default_factory=set)
    """Indices of rows that end a section."""

    def add_row(self, *cells: Cell) -> None:
        if len(cells) != len(self.cols):
            raise ValueError(f"{len(cells)} cells for {len(self.cols)} columns")
        self.rows.append([_text(c) for c in cells])

    def add_section(self) -> None:
        if self.rows:
            self.ends.add(len(self.rows) - 1)

    # ---- columns --------------------------------------------------------------------------------
    def kept(self) -> list[int]:
        """The columns that have a value in some row (or ``keep``)."""
        return [i for i, c in enumerate(self.cols)
                if c.keep or i == self.group or any(r[i].plain.strip() for r in self.rows)]

    def _needs(self, i: int) -> int:
        col = self.cols[i]
        need = max([_width(Text(col.header), col.wrap), *(_width(r[i], col.wrap) for r in self.rows)])
        return min(need, max(LONG_WORD, _width(Text(col.header), True))) if col.wrap else need

    def _natural(self, i: int) -> int:
        return max([Text(self.cols[i].header).cell_len, *(_width(r[i], False) for r in self.rows)])

    def wide_width(self) -> int:
        """The columns the wide layout needs to show every value whole, free text wrapping at
        spaces but at least ``FREE_MIN`` columns wide (or its whole length where shorter)."""
        kept = self.kept()
        need = [max(self._needs(i), min(self._natural(i), FREE_MIN)) if self.cols[i].wrap else self._needs(i) for i in kept]
        return sum(need) + _extra(len(kept), boxed=True)

    def compact_width(self) -> int:
        """The columns the compact layout needs (free text at its longest word; a ``group``
        column on its own line is not counted)."""
        kept = [i for i in self.kept() if i != self.group]
        return sum(self._needs(i) for i in kept) + _extra(len(kept), boxed=False) + (INDENT if self.group is not None else 0)

    def widths(self, kept: Sequence[int], avail: int) -> list[int]:
        """Column widths (no padding) in ``avail`` columns: every column at least what it needs
        (numbers and ids whole, free text its longest word); what is left goes to the free text
        columns, in proportion to how much more they would take."""
        widths = {i: self._needs(i) for i in kept}
        free = [i for i in kept if self.cols[i].wrap]
        room = avail - sum(w for i, w in widths.items() if i not in free)
        for i in free:  # where even the longest words do not fit, free text folds them
            widths[i] = max(1, min(widths[i], room // len(free)))
        spare = avail - sum(widths.values())
        wants = {i: self._natural(i) - widths[i] for i in free}
        total = sum(wants.values())
        if spare > 0 and total > 0:
            share = {i: min(wants[i], spare * wants[i] // total) for i in free}
            left = spare - sum(share.values())
            for i in sorted(free, key=lambda i: wants[i] - share[i], reverse=True):  # the remainder
                extra = min(left, wants[i] - share[i])
                share[i] += extra
                left -= extra
            for i in free:
                widths[i] += share[i]
        return [widths[i] for i in kept]

    # ---- layouts --------------------------------------------------------------------------------
    def wide(self, width: int | None = None) -> RenderableType:
        """A boxed table, in ``width`` columns or, where None, at its natural width (rich's own
        wrapping). Title and caption are drawn inside it where they fit its width, else above
        and below it."""
        kept = self.kept()
        widths = self.widths(kept, width - _extra(len(kept), boxed=True)) if width is not None else None
        inner = sum(widths) + _extra(len(kept), boxed=True) if widths is not None else None
        title = _text(self.title) if self.title is not None else None
        caption = _text(self.caption) if self.caption is not None else None
        above = title if title is not None and inner is not None and title.cell_len > inner else None
        below = caption if caption is not None and inner is not None and caption.cell_len > inner else None
        table = Table(title=title if above is None else None, title_justify="left", header_style="bold",
                      caption=caption if below is None else None, caption_justify="left",
                      min_width=_longest_word(title) if title is not None and inner is None else None)
        self._fill(table, kept, widths)
        for n, row in enumerate(self.rows):
            table.add_row(*self._cells(row, kept, widths), end_section=n in self.ends)
        if above is None and below is None:
            return table
        return Group(*(p for p in (Prose(above) if above else None, table, Prose(below) if below else None) if p))

    def _fill(self, table: Table, kept: Sequence[int], widths: Sequence[int] | None) -> None:
        for k, i in enumerate(kept):
            c = self.cols[i]
            table.add_column(c.header, justify=c.justify, no_wrap=not c.wrap, overflow="fold",
                             width=widths[k] if widths is not None else None)

    def _cells(self, row: list[Text], kept: Sequence[int], widths: Sequence[int] | None) -> list[Text]:
        """The row's cells; free text wrapped to its column here (a quantity kept whole) where the
        widths are known."""
        if widths is None:
            return [row[i] for i in kept]
        return [wrap_text(row[i], w) if self.cols[i].wrap else row[i] for i, w in zip(kept, widths, strict=True)]

    def compact(self, width: int) -> RenderableType:
        """No vertical rules; title and caption above and below; with ``group``, each group's id
        on a line of its own."""
        parts: list[RenderableType] = []
        if self.title is not None:
            parts.append(Prose(self.title))
        if self.group is None:
            kept = self.kept()
            widths = self.widths(kept, width - _extra(len(kept), boxed=False))
            table = _plain_table(show_header=True)
            self._fill(table, kept, widths)
            for n, row in enumerate(self.rows):
                table.add_row(*self._cells(row, kept, widths), end_section=n in self.ends)
            parts.append(table)
        else:
            parts += self._grouped(width)
        if self.caption is not None:
            parts.append(Prose(self.caption))
        return Group(*parts)

    def _grouped(self, width: int) -> list[RenderableType]:
        g = self.group
        assert g is not None
        kept = [i for i in self.kept() if i != g]
        widths = self.widths(kept, width - INDENT - _extra(len(kept), boxed=False))

        def table(rows: Sequence[list[Text]]) -> Padding:
            t = _plain_table(show_header=not rows)
            self._fill(t, kept, widths)
            for row in rows:
                t.add_row(*self._cells(row, kept, widths))
            return Padding(t, (0, 0, 0, INDENT))

        groups: list[list[list[Text]]] = []
        for row in self.rows:  # a group: a row with an id, then the rows with none or the same one
            if not groups or row[g].plain not in ("", groups[-1][0][g].plain):
                groups.append([])
            groups[-1].append(row)
        out: list[RenderableType] = [table([])]
        for rows in groups:
            out += [Prose(rows[0][g]), table(rows)]
        return out


def _extra(n: int, *, boxed: bool) -> int:
    """Columns taken by borders and padding: boxed, a rule each side of every column and one
    space of padding each side of a cell; compact, one space and one padding between columns."""
    return 3 * n + 1 if boxed else 2 * max(0, n - 1)


def _plain_table(*, show_header: bool) -> Table:
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1),
                 header_style="bold", show_header=show_header)


def is_compact(width: int | None) -> bool:
    """Whether a console of ``width`` columns gets compact tables (None: a wide one)."""
    return width is not None and width < COMPACT_WIDTH


def fit(width: int | None, wide: Sheet, compact: Callable[[], Sheet] | Sheet | None = None) -> RenderableType:
    """``wide`` as a boxed table where it fits in ``width`` columns (None: any width), else the
    compact sheet (``compact``, or ``wide`` itself) in the compact layout."""
    if width is None:
        return wide.wide()
    if width >= COMPACT_WIDTH and wide.wide_width() <= width:
        return wide.wide(width)
    sheet = compact() if callable(compact) else (compact or wide)
    return sheet.compact(width)
