"""Capture every tensor autograd saves, with provenance, without touching its data.

``capture()`` installs ``torch.autograd.graph.saved_tensors_hooks``. The pack hook records
metadata and returns the object it was given, so autograd's behaviour and lifetimes are
unchanged; memaudit keeps only weak references. ``report()`` walks the autograd graph from the
outputs and reads each node's ``_saved_*`` attributes (or ``saved_tensors``): the unpack hook
reports which packed object each access returns, which names the node class (``op``) and the
attribute (``slot``) of every row.
"""

from __future__ import annotations

import gc
import sys
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from memaudit.classify import torch as tclass
from memaudit.report import CaseReport, Row, compute_totals

Provenance = dict[str, Any] | Callable[[torch.dtype], dict[str, Any]]
"""Row fields a classifier learned for a buffer before it was packed (container, slot, kind, ...),
or a function of the buffer's dtype that returns them (evaluated in ``report()``, off the hot path)."""


class _Packed:
    """One pack-hook call: a weak reference to the packed object and what it is.

    Plain tensors keep a tuple of raw metadata (``raw``) that becomes a row only in ``report()``,
    so the pack hook stays a few attribute reads; other objects carry their rows already.
    """

    __slots__ = ("ref", "raw", "_rows", "op", "slot")

    def __init__(self, ref: Callable[[], Any], raw: tuple[Any, ...] | None = None, rows: list[dict[str, Any]] | None = None) -> None:
        self.ref = ref
        self.raw = raw
        self._rows = rows
        self.op: str | None = None
        self.slot: str | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = [_raw_row(self.raw)]
        return self._rows


_Parameter = torch.nn.Parameter


def _raw_row(raw: tuple[Any, ...] | None) -> dict[str, Any]:
    """Row fields from the metadata the pack hook recorded for a plain tensor."""
    assert raw is not None
    shape, dtype, device, ptr, nbytes, offset, numel, elt, is_param, fields, ident = raw
    row: dict[str, Any] = {
        "kind": tclass.kind_of(dtype),
        "format": tclass.format_of(dtype),
        "shape": list(shape),
        "dtype": tclass.dtype_name(dtype),
        "bytes": numel * elt,
        "device": str(device),
        "is_parameter": is_param,
    }
    if ptr is not None:
        row["_storage_key"] = ("noptr", ident) if ptr == 0 or nbytes == 0 else (device.type, device.index, ptr)
        row["storage_bytes"] = nbytes
        row["storage_offset"] = offset * elt
    if fields:
        row.update(fields(dtype) if callable(fields) else fields)
    return row


@dataclass
class _Label:
    name: str
    group: int | None
    offset: int
    shape: tuple[int, ...]


@dataclass
class Capture:
    """The state of one ``capture()`` block. Use :func:`capture`; do not build this directly."""

    _packed: list[_Packed] = field(default_factory=list)
    _by_id: dict[int, list[int]] = field(default_factory=dict)
    _indexed: int = -1
    _provenance: dict[int, tuple[Callable[[], Any], list[Provenance]]] = field(default_factory=dict)
    _labels: dict[Any, list[_Label]] = field(default_factory=dict)
    _walk_seen: list[Any] | None = None
    _plugins: list[Any] = field(default_factory=list)
    walk_nodes: list[Any] = field(default_factory=list)
    """Python-function nodes met by the graph walk; held only while ``report()`` runs."""
    warnings: list[str] = field(default_factory=list)

    # ---- hooks -------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        tp = type(t)
        if tp is torch.Tensor or tp is _Parameter:
            # Hot path: metadata reads only; strings and dicts are built in report().
            fields = self._take_provenance(t) if self._provenance else None
            try:
                st = t.untyped_storage()
                ptr, nbytes = st.data_ptr(), st.nbytes()
            except (RuntimeError, NotImplementedError, TypeError):
                ptr = nbytes = None
            base = t._base
            is_param = tp is _Parameter or (base is not None and isinstance(base, _Parameter))
            raw = (t.shape, t.dtype, t.device, ptr, nbytes, t.storage_offset(), t.numel(), t.element_size(), is_param, fields, id(t))
            packed = _Packed(weakref.ref(t), raw=raw)
        else:
            packed = _Packed(_weak(t), rows=self._rows_for(t))
        self._packed.append(packed)
        return t

    def _take_provenance(self, t: torch.Tensor) -> Provenance | None:
        prov = self._provenance.get(id(t))
        if prov is None:
            return None
        fields = prov[1].pop(0) if prov[0]() is t else None
        if not prov[1] or prov[0]() is not t:
            del self._provenance[id(t)]
        return fields

    def _unpack(self, t: Any) -> Any:
        if self._walk_seen is not None:
            self._walk_seen.append(t)
        return t

    # ---- classification ----------------------------------------------------------------------
    def note_buffer(self, t: torch.Tensor, fields: Provenance) -> None:
        """Called by classifiers when they learn what a buffer is before it reaches the hook."""
        # One tensor can be handed over more than once (FP8 current scaling's grouped storage
        # holds one scale tensor as both scale_inv and columnwise_scale_inv): queue them, and
        # each pack-hook call takes the next one.
        known = self._provenance.get(id(t))
        if known is not None and known[0]() is t:
            known[1].append(fields)
        else:
            self._provenance[id(t)] = (_weak(t), [fields])

    def _rows_for(self, t: torch.Tensor) -> list[dict[str, Any]]:
        for plugin in self._plugins:
            expanded = plugin.expand(t)
            if expanded is not None:
                container, inner = expanded
                rows = [container]
                for name, fields, buf in inner:
                    row = self._buffer_row(buf, fields)
                    row["slot_in_container"] = name
                    rows.append(row)
                return rows
        if tclass.is_wrapper_subclass(t):
            container = {
                "kind": "container",
                "format": tclass.format_of(t.dtype),
                "shape": list(t.shape),
                "dtype": tclass.dtype_name(t.dtype),
                "bytes": 0,
                "device": str(t.device),
                "is_parameter": isinstance(t, torch.nn.Parameter),
                "container": type(t).__name__,
            }
            rows = [container]
            for name, buf in tclass.inner_tensors(t):
                row = self._buffer_row(buf, {"container": type(t).__name__})
                row["slot_in_container"] = name
                rows.append(row)
            return rows
        return [self._buffer_row(t, self._take_provenance(t))]

    def _buffer_row(self, t: torch.Tensor, fields: Provenance | None) -> dict[str, Any]:
        row = tclass.describe(t)
        info = tclass.storage_info(t)
        if info is not None:
            row["_storage_key"], row["storage_bytes"], row["storage_offset"] = info
        if fields:
            row.update(fields(t.dtype) if callable(fields) else fields)
        return row

    # ---- labels ------------------------------------------------------------------------------
    def label(self, tensor: torch.Tensor, name: str, *, group: int | None = None) -> None:
        """Name an operand. Rows in the same storage get the name (exact view first)."""
        info = tclass.storage_info(tensor)
        if info is None:
            return
        key, _nbytes, offset = info
        self._labels.setdefault(key, []).append(_Label(name, group, offset, tuple(tensor.shape)))

    def _apply_labels(self, row: dict[str, Any]) -> None:
        if row.get("operand") is not None:
            return
        labels = self._labels.get(row.get("_storage_key"))
        if not labels:
            return
        exact = [
            lab
            for lab in labels
            if lab.offset == row.get("storage_offset") and lab.shape == tuple(row["shape"])
        ]
        pick = exact[0] if exact else (labels[0] if len({lab.name for lab in labels}) == 1 else None)
        if pick is not None:
            row["operand"] = pick.name
            if row.get("group") is None and exact:
                row["group"] = pick.group

    # ---- graph walk --------------------------------------------------------------------------
    def _attribute(self, outputs: Any) -> None:
        roots = [t.grad_fn for t in iter_tensors(outputs) if t.grad_fn is not None]
        if outputs is None:
            roots = _live_graph_roots()
        seen_nodes: set[int] = set()
        keep_alive: list[Any] = []  # node wrappers are rebuilt on access; keep them while walking
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            keep_alive.append(node)
            if hasattr(node, "saved_tensors"):
                self.walk_nodes.append(node)
            for nxt, _ in getattr(node, "next_functions", ()):
                if nxt is not None:
                    stack.append(nxt)
        # Claim in creation order: a tensor saved by several nodes was packed in that order, so
        # each packed entry goes to the node that packed it (the walk itself runs outputs first).
        for node in sorted(keep_alive, key=_sequence_nr):
            self._attribute_node(node)

    def _attribute_node(self, node: Any) -> None:
        op = type(node).__name__
        if hasattr(node, "saved_tensors") and not hasattr(node, "_saved_self"):
            got = self._unpacked(lambda: node.saved_tensors)
            if got is not None:
                values, seen = got
                it = iter(seen)
                for i, v in enumerate(values or ()):
                    if v is None:
                        continue
                    obj = next(it, None)
                    self._claim(obj, op, f"saved_tensors[{i}]")
                return
        for attr in dir(node):
            if not attr.startswith("_saved_") or attr.endswith(("_sym_sizes", "_sym_strides")):
                continue
            got = self._unpacked(lambda a=attr: getattr(node, a))
            if got is None:
                continue
            _, seen = got
            if len(seen) == 1:
                self._claim(seen[0], op, attr)
            else:
                for k, obj in enumerate(seen):
                    self._claim(obj, op, f"{attr}[{k}]")

    def _unpacked(self, access: Callable[[], Any]) -> tuple[Any, list[Any]] | None:
        self._walk_seen = []
        try:
            value = access()
        except (RuntimeError, AttributeError, TypeError):
            return None
        finally:
            seen, self._walk_seen = self._walk_seen, None
        return value, seen

    def _claim(self, obj: Any, op: str, slot: str) -> None:
        if self._indexed != len(self._packed):  # index the packs by object once, off the hot path
            self._by_id = {}
            for i, p in enumerate(self._packed):
                self._by_id.setdefault(id(p.ref()), []).append(i)
            self._indexed = len(self._packed)
        for idx in self._by_id.get(id(obj), ()):
            p = self._packed[idx]
            if p.op is None and p.ref() is obj:
                p.op, p.slot = op, slot
                return

    # ---- report ------------------------------------------------------------------------------
    def report(self, outputs: Any = None, *, case_id: str = "capture") -> CaseReport:
        """Build the rows and totals. ``outputs`` roots the graph walk that names op and slot.

        Without ``outputs`` the walk starts from every live tensor that has a ``grad_fn``.
        """
        self._attribute(outputs)
        storage_ids: dict[Any, str] = {}
        first_view: dict[tuple[Any, int, tuple[int, ...]], int] = {}
        rows: list[Row] = []
        for p in self._packed:
            container_index: int | None = None
            for j, raw in enumerate(p.rows):
                raw = dict(raw)
                self._apply_labels(raw)
                key = raw.pop("_storage_key", None)
                inner_name = raw.pop("slot_in_container", None)
                index = len(rows)
                storage = None
                dup = None
                if key is not None:
                    storage = storage_ids.setdefault(key, f"s{len(storage_ids)}")
                    view = (key, raw.get("storage_offset", 0), tuple(raw["shape"]))
                    dup = first_view.setdefault(view, index)
                    dup = None if dup == index else dup
                if j == 0:
                    slot = p.slot
                    if raw.get("kind") == "container":
                        container_index = index
                else:
                    slot = inner_name
                    raw["container_index"] = container_index
                fields = {"op": p.op, "saved_as": p.slot, **raw, "slot": raw.pop("slot", None) or slot}
                rows.append(Row(index=index, storage=storage, duplicate_of=dup, **fields))
        try:
            for plugin in self._plugins:
                plugin.annotate(rows, self)
        finally:
            self.walk_nodes = []
        return CaseReport(
            id=case_id,
            target="capture",
            recipe="-",
            groups=0,
            tokens=0,
            hidden=0,
            ffn=0,
            dtype="-",
            rows=rows,
            totals=compute_totals(rows),
            warnings=list(self.warnings),
        )


def _weak(t: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(t)
    except TypeError:  # pragma: no cover - every torch.Tensor is weak-referenceable
        return lambda: None


def _sequence_nr(node: Any) -> int:
    try:
        return int(node._sequence_nr())
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - every Node has one
        return -1


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from iter_tensors(v)


def _live_graph_roots() -> list[Any]:
    """Every grad_fn of a live tensor: the fallback roots when the caller names no outputs."""
    roots = []
    with warnings.catch_warnings():
        # isinstance() on deprecated module-level aliases (torch.distributed.reduce_op) warns.
        warnings.simplefilter("ignore", FutureWarning)
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor):
                fn = obj.grad_fn
                if fn is not None:
                    roots.append(fn)
    return roots


def _active_plugins(cap: Capture) -> list[Any]:
    """TE's classifier joins only when the caller already imported TE (memaudit never does)."""
    plugins = []
    if "transformer_engine.pytorch" in sys.modules:
        from memaudit.classify import te

        plugins.append(te.TEClassifier(cap))
    return plugins


@contextmanager
def capture(plugins: Iterable[Any] | None = None) -> Iterator[Capture]:
    """Record every saved tensor of the autograd graphs built inside the block.

    The hooks are removed on exit, also when the block raises.
    """
    cap = Capture()
    cap._plugins = list(plugins) if plugins is not None else _active_plugins(cap)
    installed = []
    try:
        for plugin in cap._plugins:
            plugin.install()
            installed.append(plugin)
        with torch.autograd.graph.saved_tensors_hooks(cap._pack, cap._unpack):
            yield cap
    finally:
        for plugin in reversed(installed):
            plugin.uninstall()
