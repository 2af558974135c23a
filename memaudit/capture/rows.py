"""Row building: a capture's records -> report rows (names, storages, residence, module calls,
labels), the part of ``capture()`` that runs when ``Capture.report`` is asked. The capture session
(hooks, threads, labels, regions) is :mod:`memaudit.capture.recorder`."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from memaudit.capture import graph
from memaudit.capture.hooks import Record
from memaudit.capture.tensors import (
    Buffer,
    buffer_of,
    dtype_name,
    format_of,
    iter_tensors,
    kind_of,
    storage_ref,
)
from memaudit.report import (
    Row,
    make_row,
    module_operand,
    replace_row,
)

if TYPE_CHECKING:
    from memaudit.capture.recorder import Capture

RELEASED_RESIDES = {"checkpoint": "recomputed", "save_on_cpu": "host"}
"""Where a released record's pair kept it, by the pair's kind (its payload is gone)."""


_PLAIN_NAMES: dict[tuple[torch.dtype, torch.device], tuple[dict[str, Any], int]] = {}
"""(dtype, device) -> (row template, element size) for plain rows."""


def _plain_template(dtype: torch.dtype, device: torch.device) -> dict[str, Any]:
    """The fields of a plain row that (dtype, device) fixes, the rest at Row's defaults, in
    declaration order (``make_row`` of them)."""
    return dict(
        vars(
            make_row(
                {
                    "index": 0,
                    "kind": kind_of(dtype),
                    "format": format_of(dtype),
                    "shape": [],
                    "dtype": dtype_name(dtype),
                    "bytes": 0,
                    "device": str(device),
                }
            )
        )
    )


_WHATS: dict[str, dict[str, str]] = {}
"""op -> slot -> ``NODE.ATTRIBUTE`` (module_operand's node part for a plain row)."""

Unlabelled = tuple[bool, int, Any, int, tuple[int, ...], int | None]
"""A row of a returned report that only memaudit's fallback named (a late label may name it):
``(live, index, storage ref, byte offset, shape, group)``."""


class RowBuilder:
    """Turns records (and walk findings) into rows: storage names, residence, labels, parameters."""

    def __init__(self, cap: Capture, outputs: Any, include_freed: bool = False) -> None:
        self.cap = cap
        self.include_freed = include_freed
        self.rows: list[Row] = []
        self.freed: list[Row] = []
        self.node_of: dict[int, int] = {}  # live row index -> sequence number of its Python node
        self.warnings: list[str] = []
        self.incomplete = False
        self.srefs: dict[int, Any] = {}  # id(sref) -> sref, for every storage a live row names
        self._names: dict[int, str] = {}
        self._views: dict[tuple[bool, int, int, tuple[int, ...]], int] = {}
        self.row_srefs: list[Any] = []  # the storage reference of each live row (None: none)
        # The weak references themselves are kept, so their ids stay unique while this builder lives.
        self._canon: dict[int, Any] = {}  # id(sref) -> the sref standing for its memory (canon())
        self._memory: dict[tuple[str, int, int], Any] = {}
        self._output_refs = [r[0] for t in iter_tensors(outputs) if (r := storage_ref(t)) is not None]
        self._outputs = {id(self.canon(r)) for r in self._output_refs}
        # Parameters by storage: the modules called in the capture name their parameters' storages,
        # so a detached alias of a weight (functional_call, F.linear(x, w.detach())) is parameter memory.
        self._module_refs = [r for r in cap.module_storages()]
        self._param_storages: set[int] = {id(self.canon(r)) for r in self._module_refs}
        self._shared_storages: set[int] = set()  # storages of live rows not flagged as parameter
        self._labelled = bool(cap._labels)  # no labels given: no lookup per row
        self._nth: dict[tuple[bool, int], int] = {}  # (live, index) -> position among its module call's saves
        self._bufs: dict[
            tuple[bool, int], tuple[Any, int, tuple[int, ...]]
        ] = {}  # (live, index) -> (sref, offset, shape), for late labels
        self.named: list[int] = []  # live rows add_records gave memaudit's name (late labels may rename them)
        self._named_freed: list[Unlabelled] = []  # freed rows it named
        self._unnamed: list[tuple[bool, int]] = []  # rows name_rest must visit when no plugin annotates
        self._containers = False  # a row points at a container (finish() checks their parameter flag)
        self._frame_saves: dict[int, int] = {}  # id(frame) -> saves seen so far
        self._sources: dict[str, str] = {}

    def canon(self, sref: Any) -> Any:
        """The storage reference that stands for ``sref``'s memory: two storage objects over the same
        bytes (``torch.from_numpy`` or ``torch.frombuffer`` of one buffer, twice) are one storage.
        Live storages are keyed by (device, data pointer, size), metadata only; a dead, empty or
        meta storage stands for itself."""
        key = id(sref)
        out = self._canon.get(key)
        if out is None:
            out = sref
            st = sref()
            if st is not None:
                try:
                    ptr, n = st.data_ptr(), st.nbytes()
                except Exception:  # noqa: BLE001 - a storage without a data pointer stands for itself
                    ptr = n = 0
                if ptr and n:
                    out = self._memory.setdefault((str(st.device), ptr, n), sref)
            self._canon[key] = out
        return out

    def storage_name_of(self, sref: Any) -> str | None:
        """The name (``s3``) a live row gave the storage ``sref`` refers to, or None."""
        return self._names.get(id(self.canon(sref)))

    def _storage_name(self, sref: Any) -> str:
        key = id(sref)
        self.srefs.setdefault(key, sref)
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"s{len(self._names)}"
        return name

    def _row(self, fields: dict[str, Any], buf: Buffer | None, live: bool) -> Row:
        target = self.rows if live else self.freed
        index = len(target)
        dup = None
        storage = None
        sref = self.canon(buf.sref) if buf is not None and buf.sref is not None else None
        if buf is not None and sref is not None:
            storage = self._storage_name(sref)
            view = (live, id(sref), buf.offset, buf.shape)
            first = self._views.setdefault(view, index)
            dup = None if first == index else first
            if live:
                (self._param_storages if fields.get("is_parameter") else self._shared_storages).add(id(sref))
        if buf is not None and self._labelled:
            label = self.cap.label_for(buf)
            if label is not None and fields.get("operand") is None:
                fields["operand"] = label.name
                if fields.get("group") is None and label.offset == buf.offset and label.shape == buf.shape:
                    fields["group"] = label.group
        fields.pop("_dtype", None)
        nth = fields.pop("_nth", None)
        fields["index"], fields["storage"], fields["duplicate_of"] = index, storage, dup
        row = make_row(fields)
        target.append(row)
        if nth is not None:
            self._nth[(live, index)] = nth
        if buf is not None and buf.sref is not None:
            self._bufs[(live, index)] = (buf.sref, buf.offset, buf.shape)
        if live:
            self.row_srefs.append(sref)
        if row.container_index is not None:
            self._containers = True
        self._unnamed.append((live, index))
        return row

    def add_record(self, rec: Record) -> None:
        if rec.node_seq is None:
            self._add_record(rec)
            return
        before = len(self.rows)
        self._add_record(rec)
        for i in range(before, len(self.rows)):
            self.node_of[i] = rec.node_seq

    def _add_record(self, rec: Record) -> None:
        live = rec.alive() or self.include_freed
        if rec.warning:
            self.warnings.append(rec.warning)
            self.incomplete = True
        op, slot = rec.op, rec.slot
        if op is None and rec.context is not None:
            op, slot = rec.context
        if rec.hook is None:
            resides, kept = rec.resides or "device", None
        elif rec.alive():
            resides, kept = self._residence(rec)
        else:  # released (listed with include_freed): where that pair kept it, as far as its kind tells
            resides, kept = RELEASED_RESIDES.get(rec.hook.kind or "", "unknown"), None
        base: dict[str, Any] = {"op": op, "saved_as": slot, "resides": resides}
        frame = rec.frame if self.cap.modules else None
        if frame is not None:
            base["module"] = frame.name
            nth = self._frame_saves.get(id(frame), 0)
            self._frame_saves[id(frame)] = nth + 1
            base["_nth"] = nth
        if rec.source is not None and self.cap.stack:
            base["source"] = self._source(rec.source)
        if (
            rec.hook is not None and rec.hook.kind is None and resides == "unknown" and live
        ):  # a released one keeps nothing
            self.warnings.append(
                f"{op or '?'} {slot or '?'}: packed by {rec.hook.name}, which keeps no tensor memaudit can see; "
                "where it lives is unknown (case incomplete)"
            )
            self.incomplete = True
        container_index = None
        if rec.container is not None:
            fields = {**base, **rec.container, "slot": slot}
            row = self._row(fields, None, live)
            container_index = row.index
        for name, buf in rec.described():
            fields = {**base, **buf.row_fields()}
            fields["slot"] = fields.get("slot") or (name if name is not None else slot)
            if container_index is not None:
                fields["container_index"] = container_index
                if rec.container and rec.container.get("is_parameter"):
                    fields["is_parameter"] = True
            if kept is not None:
                buf = self._kept_copy(fields, buf, kept, rec)
            elif resides in ("recomputed", "unknown", "host"):  # what is kept is not this storage
                buf = Buffer(buf.shape, buf.dtype, buf.device, None, 0, 0, buf.bytes, buf.is_parameter)
            self._row(fields, buf, live)

    def add_records(self, records: Iterable[Record]) -> None:
        """:meth:`add_record` of each record. A plain one (one plain tensor packed by memaudit's own
        layer, no classifier fields, no labels given) becomes its row inline: the row the general
        path builds, without the intermediate Buffer and dicts; and with no plugin to annotate the
        rows, it gets memaudit's own operand here (what :meth:`name_rest` would give it)."""
        if self._labelled:
            for rec in records:
                self.add_record(rec)
            return
        rows, freed, warnings = self.rows, self.freed, self.warnings
        include_freed, modules_on, stack_on = self.include_freed, self.cap.modules, self.cap.stack
        eager = not self.cap.plugins
        names_of, snames, srefs, views = _PLAIN_NAMES, self._names, self.srefs, self._views
        frame_saves, nth_of, bufs = self._frame_saves, self._nth, self._bufs
        row_sref, params, shared, node_of = self.row_srefs, self._param_storages, self._shared_storages, self.node_of
        named, named_freed, unnamed = self.named, self._named_freed, self._unnamed
        prod, new, set_dict, source_of, canon = math.prod, object.__new__, object.__setattr__, self._source, self.canon
        tuples, whats = (tuple, torch.Size), _WHATS
        for rec in records:
            raw = rec.raw
            if (
                raw is None
                or raw[7] is not None
                or rec.buffers is not None
                or rec.hook is not None
                or rec.container is not None
                or rec.resides is not None
            ):
                self.add_record(rec)
                continue
            shape, dtype, device, sref, nbytes, offset, is_param, _ = raw
            sref = canon(sref)
            ref = rec.ref
            live = (ref is not None and ref() is not None) or include_freed
            if rec.warning:
                warnings.append(rec.warning)
                self.incomplete = True
            op, slot = rec.op, rec.slot
            if op is None and rec.context is not None:
                op, slot = rec.context
            names = names_of.get((dtype, device))
            if names is None:
                names = names_of[(dtype, device)] = (_plain_template(dtype, device), dtype.itemsize)
            template, elt = names
            target = rows if live else freed
            index = len(target)
            shape_t = shape if type(shape) in tuples else tuple(shape)  # a torch.Size hashes and compares as the tuple
            off = offset * elt
            module = nth = None
            frame = rec.frame if modules_on else None
            if frame is not None:
                module = frame.name
                key = id(frame)
                nth = frame_saves.get(key, 0)
                frame_saves[key] = nth + 1
            key = id(sref)
            storage = snames.get(key)
            if storage is None:
                storage = snames[key] = f"s{len(snames)}"
                srefs[key] = sref
            first = views.setdefault((live, key, off, shape_t), index)
            operand = None
            if eager:  # module_operand(module, op, slot, slot, nth), inline
                if op is not None and slot is not None:
                    by_slot = whats.get(op)
                    if by_slot is None:
                        by_slot = whats[op] = {}
                    what = by_slot.get(slot)
                    if what is None:
                        what = by_slot[slot] = f"{op}.{slot.removeprefix('_saved_')}"
                    operand = f"{module}:{what}" if module else what
                elif module is not None:
                    operand = f"{module}:saved[{nth}]" if nth is not None else module
            # Every field, in Row's declaration order (as make_row leaves them): a copy of the
            # template (faster than a 27-key literal), the row's own values set; frozen: set whole.
            d = template.copy()
            d["index"] = index
            d["shape"] = list(shape_t)
            d["bytes"] = prod(shape_t) * elt
            d["op"] = op
            d["saved_as"] = d["slot"] = slot
            d["operand"] = operand
            d["storage"] = storage
            d["storage_offset"] = off
            d["storage_bytes"] = nbytes
            d["is_parameter"] = is_param
            if first != index:
                d["duplicate_of"] = first
            if module is not None:
                d["module"] = module
            if stack_on and rec.source is not None:
                d["source"] = source_of(rec.source)
            row = new(Row)
            set_dict(row, "__dict__", d)
            target.append(row)
            if live:
                row_sref.append(sref)
                (params if is_param else shared).add(key)
                if rec.node_seq is not None:
                    node_of[index] = rec.node_seq
            if operand is not None:
                if live:
                    named.append(index)
                else:
                    named_freed.append((False, index, sref, off, shape_t, None))
            else:
                if nth is not None:
                    nth_of[(live, index)] = nth
                bufs[(live, index)] = (sref, off, shape_t)
                unnamed.append((live, index))

    def _kept_copy(self, fields: dict[str, Any], buf: Buffer, kept: list[Buffer], rec: Record) -> Buffer:
        """The buffer a foreign pair keeps in place of ``buf`` (a host copy, a cast copy)."""
        if len(kept) == 1 and len(rec.described()) == 1:
            copy = kept[0]
            note = (
                f"kept as a {copy.device.type} "
                f"{fields['dtype'] if copy.dtype == buf.dtype else str(copy.dtype).removeprefix('torch.')} copy"
            )
            fields["note"] = f"{note} by {rec.hook.name}" if rec.hook else note
            fields["storage_bytes"], fields["storage_offset"] = copy.storage_bytes, copy.offset
            fields["is_parameter"] = False  # a copy of a parameter is new memory the graph keeps
            return Buffer(
                buf.shape, buf.dtype, buf.device, copy.sref, copy.storage_bytes, copy.offset, buf.bytes, False
            )
        fields["note"] = f"kept by {rec.hook.name if rec.hook else '?'} as {len(kept)} tensor(s)"
        return Buffer(buf.shape, buf.dtype, buf.device, None, 0, 0, buf.bytes, buf.is_parameter)

    def _residence(self, rec: Record) -> tuple[str, list[Buffer] | None]:
        payload = rec.payload()
        tensors = list(payload_tensors(payload))
        mine = {id(b.sref) for _, b in rec.described() if b.sref is not None}
        if tensors:
            refs = [storage_ref(t) for t in tensors]
            if any(r is not None and id(r[0]) in mine for r in refs):
                return "device", None
            origin = rec.described()[0][1].device.type if rec.described() else "cpu"
            on_host = origin != "cpu" and all(t.device.type == "cpu" for t in tensors)
            return ("host" if on_host else "device"), [buffer_of(t) for t in tensors]
        kind = rec.hook.kind if rec.hook else None
        if kind == "checkpoint":
            return "recomputed", None
        for plugin in self.cap.plugins:
            where = getattr(plugin, "resides", None)
            answer = where(kind, payload) if where is not None else None
            if answer is not None:
                return answer, None
        return "unknown", None

    def add_found(self, found: graph.Found) -> None:
        fields = {
            "op": found.op,
            "saved_as": found.slot,
            "slot": found.slot,
            "via": found.via,
            **found.buffer.row_fields(),
        }
        if found.inside and self.cap.modules:  # made in this thread: its sequence number places it in a module call
            fields["module"] = self.cap.module_of_node(found.seq)
        self._row(fields, found.buffer, True)

    def _source(self, where: tuple[str, int]) -> str:
        """``file:line``, the file relative to the working directory or to its sys.path entry."""
        filename, line = where
        short = self._sources.get(filename)
        if short is None:
            short = self._sources[filename] = short_path(filename)
        return f"{short}:{line}"

    def name_rest(self, rows: list[Row], live: bool) -> list[Unlabelled]:
        """Give every row still without an operand memaudit's own name (module, node, attribute:
        :func:`memaudit.report.module_operand`); returns them, for labels given later (with the
        freed rows :meth:`add_records` named already; its live ones are in ``named``)."""
        pending = [] if live else list(self._named_freed)
        if self.cap.plugins:  # a plugin may have named any row, or rebuilt the list
            visit: Iterable[int] = range(len(rows))
        else:  # the builder's own list: row i has index i
            visit = [i for lv, i in self._unnamed if lv is live]
        for i in visit:
            row = rows[i]
            if row.operand is not None:
                continue
            name = module_operand(row.module, row.op, row.saved_as, row.slot, self._nth.get((live, row.index)))
            if name is not None:
                rows[i] = replace_row(row, operand=name)
            buf = self._bufs.get((live, row.index))
            if buf is not None:
                pending.append((live, row.index, *buf, row.group))
        return pending

    def finish(self) -> tuple[list[Row], list[Row]]:
        # Parameters by storage: a row that shares a parameter's storage is parameter memory.
        rows = self.rows
        params, outputs = self._param_storages, self._outputs
        # Only a row not flagged as a parameter in a parameter's storage, or a row in an output's
        # storage, can change: none in the usual case, and then no row is visited.
        touched = (params & self._shared_storages) | (outputs & self._names.keys())
        if touched:
            for i, sref in enumerate(self.row_srefs):
                key = id(sref) if sref is not None else None
                if key not in touched:
                    continue  # nothing to change
                row = rows[i]
                param = row.is_parameter or key in params
                output = row.aliases_output or key in outputs
                if (param, output) != (row.is_parameter, row.aliases_output):
                    rows[i] = dataclasses.replace(row, is_parameter=param, aliases_output=output)
        if self._containers:
            for i, row in enumerate(rows):
                if row.container_index is not None and rows[row.container_index].is_parameter and not row.is_parameter:
                    rows[i] = dataclasses.replace(row, is_parameter=True)
        return rows, self.freed

    def device_storages(self) -> dict[int, tuple[Any, int]]:
        """id -> (storage ref, nbytes) of every live device-resident storage the rows name."""
        out: dict[int, tuple[Any, int]] = {}
        for row, sref in zip(self.rows, self.row_srefs, strict=True):
            if sref is not None and row.resides == "device":
                out[id(sref)] = (sref, row.storage_bytes)
        return out


def short_path(filename: str) -> str:
    """A source file as a report shows it: relative to the working directory when under it, else
    to the longest ``sys.path`` entry holding it (``pkg/mod.py``), else its base name; never an
    absolute path (reports are compared across machines)."""
    if not os.path.isabs(filename) and not os.path.exists(filename):
        return filename  # <string>, <stdin>, a notebook cell
    full = os.path.abspath(filename)

    def under(base: str) -> bool:
        return bool(base) and full.startswith(base.rstrip(os.sep) + os.sep)

    cwd = os.getcwd()
    if under(cwd):
        best: str | None = cwd
    else:
        bases = [b for b in (os.path.abspath(p) for p in sys.path if p) if under(b)]
        best = max(bases, key=len) if bases else None
    rel = os.path.relpath(full, best) if best is not None else os.path.basename(full)
    return rel.replace(os.sep, "/")


def payload_tensors(payload: Any, depth: int = 3) -> Iterator[torch.Tensor]:
    try:
        isinstance(payload, torch.Tensor)
    except ReferenceError:  # a dead weak proxy: it holds nothing
        return
    if isinstance(payload, torch.Tensor):
        yield payload
    elif depth > 0 and isinstance(payload, list | tuple):
        for v in payload:
            yield from payload_tensors(v, depth - 1)
    elif depth > 0 and isinstance(payload, dict):
        for v in payload.values():
            yield from payload_tensors(v, depth - 1)
