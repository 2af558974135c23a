"""Tables that fit the console, laid out by rich: a boxed table where it fits, a compact one where not.

Every table of the CLI is a :class:`Sheet`: rich :class:`~rich.table.Column` s (``no_wrap=True``
for numbers, ids and shapes; wrapping free text otherwise), rows, optional sections. A sheet drops
the columns that are empty in every row and renders

* **wide**: rich's boxed table (what a CI log of ``LOG_WIDTH`` columns gets, and a wide terminal);
* **compact**: fewer columns (the caller builds a second, smaller sheet), ``box.SIMPLE_HEAD``
  without edges, below ``COMPACT_WIDTH`` columns or wherever the wide one would not fit. A sheet
  with a ``group`` column (a case id) prints that column as a line of its own above its rows.

rich measures, wraps and draws. Each value column gets ``min_width`` = its longest value (it
never wraps, and the tables of a grouped sheet line up); each free-text column a fixed ``width``:
its longest word, plus a share of what is left (see :meth:`Sheet._free_widths` for why rich's
``ratio`` does not do this). Two more things rich has no option for stay here: dropping empty
columns, and
:class:`Prose`, wrapping that keeps a quantity with its unit (rich breaks ``1.5 KiB`` at its space,
a no-break space U+00A0 included, since its word pattern is ``\\s``; and a no-break space in a cell
would make ``grep '1.5 KiB'`` miss the CI log).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

COMPACT_WIDTH = 100
"""Below this many columns every table uses its compact layout."""

INDENT = 2
"""The indent of a grouped sheet's rows under their group line."""

FREE_MIN = 20
"""The wide layout is used only where each free-text column gets this many columns (or all it needs)."""

LONG_WORD = 30
"""Free text may fold a word longer than this (a path in an error message) rather than widen its column."""

NARROW_TEXT = 20
"""Where the compact table would leave a free-text column fewer columns than this (or its longest
word, where shorter), free text goes on lines of its own under each row's values."""

Cell = str | Text

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
    """Text that wraps to the width rich gives it (the console, or a table cell) without splitting
    a quantity from its unit, with a hanging indent."""

    def __init__(self, text: Text | str, *, indent: int = 0, hang: int | None = None) -> None:
        self.text = _text(text)
        self.indent = indent
        self.hang = indent if hang is None else hang

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield wrap_text(self.text, options.max_width, indent=self.indent, hang=self.hang)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max((len(m.group()) for m in _TOKEN.finditer(self.text.plain)), default=0)
        natural = max((Text(ln).cell_len for ln in self.text.plain.splitlines()), default=0)
        return Measurement(min(options.max_width, longest + self.indent), min(options.max_width, natural + self.indent))


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)  # plain: ids and operands are not markup


def _lines(text: Text) -> int:
    """The longest line of a cell."""
    return max((Text(line).cell_len for line in text.plain.splitlines()), default=0)


def _word(text: Text) -> int:
    """The longest word of free text, a quantity and its unit one word."""
    return max((len(m.group()) for m in _TOKEN.finditer(text.plain)), default=0)


class Sheet:
    """Rows for a table that renders wide or compact; see the module doc."""

    def __init__(
        self,
        cols: Sequence[Column],
        *,
        title: Cell | None = None,
        caption: Cell | None = None,
        group: int | None = None,
        keep: Collection[str] = (),
    ) -> None:
        self.cols = list(cols)
        self.title = _text(title) if title is not None else None
        """Plain text or a Text (never read as markup)."""
        self.caption = _text(caption) if caption is not None else None
        self.group = group
        """The index of the column printed as a line above its rows in the compact layout (a case
        id); a row whose cell there is empty or repeats the one above belongs to the same group."""
        self.keep = set(keep)
        """Headers of the columns shown even where every cell is empty."""
        self.rows: list[list[Text]] = []
        self.ends: set[int] = set()
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
        """The columns that have a value in some row (or are in ``keep``)."""
        return [
            i
            for i, c in enumerate(self.cols)
            if c.header in self.keep or i == self.group or any(r[i].plain.strip() for r in self.rows)
        ]

    def _natural(self, i: int) -> int:
        return max([Text(str(self.cols[i].header)).cell_len, *(_lines(r[i]) for r in self.rows)])

    def _floor(self, i: int, *, wide: bool) -> int:
        """The narrowest column ``i`` may be: a value whole; free text its longest word (at most
        ``LONG_WORD``, a longer one folds), in the wide layout at least ``FREE_MIN``."""
        col = self.cols[i]
        if col.no_wrap:
            return self._natural(i)
        head = _word(Text(str(col.header)))
        need = min(max([head, *(_word(r[i]) for r in self.rows)]), max(LONG_WORD, head))
        return max(need, min(self._natural(i), FREE_MIN)) if wide else need

    def wide_width(self) -> int:
        """The columns the wide layout needs to show every value whole."""
        kept = self.kept()
        return sum(self._floor(i, wide=True) for i in kept) + _extra(len(kept), boxed=True)

    def compact_width(self, word: int = LONG_WORD) -> int:
        """The columns the compact layout needs (a ``group`` column on its own line not counted),
        free text folding a word longer than ``word``."""
        kept = [i for i in self.kept() if i != self.group]
        floors = [
            self._floor(i, wide=False) if self.cols[i].no_wrap else min(self._floor(i, wide=False), word) for i in kept
        ]
        return sum(floors) + _extra(len(kept), boxed=False) + (INDENT if self.group is not None else 0)

    def _table(self, kept: Sequence[int], width: int | None, *, boxed: bool, show_header: bool = True) -> Table:
        """An empty rich table of the ``kept`` columns, sized for ``width`` columns in all (None:
        rich's natural widths)."""
        free = self._free_widths(kept, width - _extra(len(kept), boxed=boxed), boxed=boxed) if width is not None else {}
        specs = []
        for i in kept:
            col = self.cols[i].copy()  # without its cells
            col.overflow = "fold"  # a value too wide for any layout folds, never lost
            if width is not None and col.no_wrap:  # its longest value: never wrapped, the same in every group's table
                col.min_width = self._natural(i)
            elif width is not None:
                col.width = free[i]
            specs.append(col)
        if boxed:
            return Table(*specs, header_style="bold", show_header=show_header)
        return Table(
            *specs,
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 0, 0, 1),
            header_style="bold",
            show_header=show_header,
        )

    def _free_widths(self, kept: Sequence[int], avail: int, *, boxed: bool) -> dict[int, int]:
        """The free-text columns' widths in ``avail`` columns of content: each its floor, what is
        left shared in proportion to how much more each would take. (rich's ``ratio`` with
        ``expand`` cannot do this: its distribution gives the first columns their share before the
        later ones their minimum, overshoots, and then drops every column back to its minimum.)"""
        free = [i for i in kept if not self.cols[i].no_wrap]
        floors = {i: self._floor(i, wide=boxed) for i in free}
        room = avail - sum(self._natural(i) for i in kept if i not in floors)
        if sum(floors.values()) > room:  # even the longest words do not fit: free text folds them
            return {i: max(1, min(floors[i], room // len(free))) for i in free}
        wants = {i: self._natural(i) - floors[i] for i in free}
        spare, total = room - sum(floors.values()), sum(wants.values())
        if spare >= total:
            return {i: self._natural(i) for i in free}
        out = {i: floors[i] + spare * wants[i] // total for i in free}
        for i in sorted(free, key=lambda i: wants[i], reverse=True)[: room - sum(out.values())]:  # the remainder
            out[i] += 1
        return out

    def _add(self, table: Table, rows: Sequence[list[Text]], kept: Sequence[int], ends: Collection[int] = ()) -> None:
        for n, row in enumerate(rows):
            cells: list[RenderableType] = [Prose(row[i]) if not self.cols[i].no_wrap else row[i] for i in kept]
            table.add_row(*cells, end_section=n in ends)

    # ---- layouts --------------------------------------------------------------------------------
    def wide(self, width: int | None = None) -> RenderableType:
        """A boxed table, in ``width`` columns or, where None, at its natural width. Title and
        caption are drawn inside it where they fit its width, else above and below it."""
        kept = self.kept()
        table = self._table(kept, width, boxed=True)
        self._add(table, self.rows, kept, self.ends)
        inner = None  # the table's width, where it is sized
        if width is not None:
            inner = sum(c.width or c.min_width or 0 for c in table.columns) + _extra(len(kept), boxed=True)
        above = self.title is not None and inner is not None and self.title.cell_len > inner
        below = self.caption is not None and inner is not None and self.caption.cell_len > inner
        table.title, table.title_justify = (None if above else self.title), "left"
        table.caption, table.caption_justify = (None if below else self.caption), "left"
        if self.title is not None and inner is None:
            table.min_width = _word(self.title)
        if not above and not below:
            return table
        parts = [
            Prose(self.title) if above and self.title else None,
            table,
            Prose(self.caption) if below and self.caption else None,
        ]
        return Group(*(p for p in parts if p is not None))

    def compact(self, width: int) -> RenderableType:
        """No vertical rules; title and caption above and below; with ``group``, each group's id
        on a line of its own."""
        parts: list[RenderableType] = [Prose(self.title)] if self.title is not None else []
        if self.compact_width(NARROW_TEXT) > width and any(not self.cols[i].no_wrap for i in self.kept()):
            parts += self._stacked(width)
        elif self.group is None:
            kept = self.kept()
            table = self._table(kept, width, boxed=False)
            self._add(table, self.rows, kept, self.ends)
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

        def table(rows: Sequence[list[Text]]) -> Padding:  # every group's table has the same columns
            t = self._table(kept, width - INDENT, boxed=False, show_header=not rows)
            self._add(t, rows, kept)
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

    def _stacked(self, width: int) -> list[RenderableType]:
        """Where even the compact table leaves its free text less than its longest word: the
        values of each row on a line (a group's id above them), its free text on lines of its
        own under them, indented; each free cell named by its header where there are several."""
        g = self.group
        kept = [i for i in self.kept() if i != g]
        values, free = [i for i in kept if self.cols[i].no_wrap], [i for i in kept if not self.cols[i].no_wrap]
        indent = INDENT if g is not None else 0

        def table(rows: Sequence[list[Text]]) -> Padding:  # every row's table has the same columns
            t = self._table(values, width - indent, boxed=False, show_header=not rows)
            self._add(t, rows, values)
            return Padding(t, (0, 0, 0, indent))

        out: list[RenderableType] = [table([])]
        group = None
        for n, row in enumerate(self.rows):
            if g is not None and row[g].plain not in ("", group):
                group = row[g].plain
                out.append(Prose(row[g]))
            out.append(table([row]))
            for i in free:
                if row[i].plain.strip():
                    label = Text(f"{self.cols[i].header}: ", style="dim") if len(free) > 1 else Text("")
                    out.append(Prose(label + row[i], indent=indent + 2, hang=indent + 4))
            if n in self.ends:
                out.append(Text(""))
        return out


def _extra(n: int, *, boxed: bool) -> int:
    """Columns taken by borders and padding: boxed, a rule each side of every column and one
    space of padding each side of a cell; compact, one space and one padding between columns."""
    return 3 * n + 1 if boxed else 2 * max(0, n - 1)


def value_col(header: str, justify: Literal["left", "right"] = "left") -> Column:
    """A column of values (numbers, ids, shapes): never wrapped."""
    return Column(header, justify=justify, no_wrap=True)


def text_col(header: str) -> Column:
    """A column of free text (notes, reasons, messages): wraps at spaces, a quantity kept whole."""
    return Column(header, overflow="fold")


def fit(width: int | None, wide: Sheet, compact: Callable[[], Sheet] | Sheet | None = None) -> RenderableType:
    """``wide`` as a boxed table where it fits in ``width`` columns (None: any width), else the
    compact sheet (``compact``, or ``wide`` itself) in the compact layout."""
    if width is None:
        return wide.wide()
    if width >= COMPACT_WIDTH and wide.wide_width() <= width:
        return wide.wide(width)
    sheet = compact() if callable(compact) else (compact or wide)
    return sheet.compact(width)
