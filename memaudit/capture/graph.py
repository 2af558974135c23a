"""Walk the autograd graph to name records, and to find what the hooks did not see.

Every node reachable from the roots that was created while the capture was active is visited in
creation order. Its saved attributes (``_saved_*`` of C++ nodes, ``saved_tensors`` of Python
``autograd.Function`` nodes) are read while :class:`~memaudit.capture.stack.walking` is on, so
each read answers with the record it was packed as and no foreign unpack runs (no checkpoint
recompute, no copy back from the host). Where PyTorch exposes what a hook packed
(``_raw_saved_*``, ``SavedTensor.data``), a value memaudit's own layer packed is read there, with
no unpack at all: the same record the unpack would answer with. A saved tensor that answers
without a record was saved outside memaudit's hooks (another thread, hooks disabled, a pair pushed
from C++): it becomes a row ``via="unhooked"`` and the case is incomplete. Tensors a Python node keeps as ``ctx``
attributes
bypass the hooks entirely; they become rows ``via="ctx"``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from memaudit.capture.hooks import Layer, Record, state, walk_ended, walk_started
from memaudit.capture.stack import walking
from memaudit.capture.tensors import Buffer, buffer_of


@dataclass
class Found:
    """A saved buffer the walk found without a record: a ctx attribute or an unhooked save."""

    via: str
    op: str
    slot: str
    buffer: Buffer
    seq: int = -1
    """The sequence number of the node that keeps it (names its module, see Capture.module_of_node)."""
    inside: bool = False
    """The node was made in the capturing thread while the capture was active."""


@dataclass
class WalkResult:
    python_nodes: list[Any] = field(default_factory=list)
    found: list[Found] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unseen: int = 0


@functools.cache
def saved_attributes(node_type: type) -> tuple[str, ...]:
    """The saved-value attributes of a C++ node class (``_saved_self``, ``_saved_result``, ...)."""
    return tuple(
        a for a in dir(node_type) if a.startswith("_saved_") and not a.endswith(("_sym_sizes", "_sym_strides"))
    )


_KINDS: dict[type, list[Any]] = {}
"""Node class -> [op name, ``(attribute, raw attribute or None)`` per saved attribute (None for a
Python ``autograd.Function`` node)]. An attribute without a raw twin is dropped from the list once
a read proves it holds no tensor (see :func:`_no_tensor`)."""

_SavedTensor = getattr(torch._C._autograd, "SavedTensor", None)
_RAW = _SavedTensor is not None and hasattr(_SavedTensor, "data") and hasattr(_SavedTensor, "unpack_hook")
"""Whether this PyTorch exposes a saved value's packed object and unpack hook."""
_LAYER_UNPACK = getattr(Layer, "unpack", None)
_PACKED: set[type] = set()
"""Classes of the objects memaudit's layers pack (learned: a value whose unpack hook is a layer's)."""

_SCALARS = frozenset({int, float, bool, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format})


def _no_tensor(value: Any) -> bool:
    """True for a value whose C++ type can hold no tensor: a number, string or dtype-like value, or
    a non-empty sequence of numbers (an int array). None and empty sequences prove nothing."""
    tp = type(value)
    if tp in _SCALARS:
        return True
    return tp in (tuple, list) and bool(value) and all(type(v) in (int, float, bool) for v in value)


def _kind(tp: type) -> list[Any]:
    if issubclass(tp, BackwardCFunction):
        return [tp.__name__, None]
    raw = _RAW
    return [
        tp.__name__,
        tuple((a, f"_raw{a}" if raw and hasattr(tp, f"_raw{a}") else None) for a in saved_attributes(tp)),  # type: ignore[arg-type]
    ]


def _packed(sv: Any) -> Record | None:
    """The record memaudit's layer packed as saved value ``sv`` (the one its unpack would answer
    with while walking), or None when another hook or none packed it, or it was released."""
    data = sv.data
    tp = type(data)
    if tp in _PACKED:
        return data.rec  # type: ignore[no-any-return]
    if tp is type(None) or getattr(sv.unpack_hook, "__func__", None) is not _LAYER_UNPACK or _LAYER_UNPACK is None:
        return None
    rec = getattr(data, "rec", None)
    if type(rec) is not Record:
        return None
    _PACKED.add(tp)
    return rec


def _packed_all(value: Any) -> list[Record] | None:
    """:func:`_packed` of a raw attribute's value (one saved value, or a list of them), or None
    unless memaudit's layer packed every one."""
    if type(value) is _SavedTensor:
        rec = _packed(value)
        return None if rec is None else [rec]
    if type(value) not in (tuple, list):
        return None
    out = []
    for sv in value:
        rec = _packed(sv) if type(sv) is _SavedTensor else None
        if rec is None:
            return None
        out.append(rec)
    return out


def sequence_nr(node: Any) -> int:
    try:
        return int(node._sequence_nr())
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - every Node has one
        return -1


def _tensors(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(suffix, tensor) for a tensor, or the tensors of a list/tuple/dict one level down."""
    if isinstance(value, torch.Tensor):
        yield "", value
    elif isinstance(value, list | tuple):
        for k, v in enumerate(value):
            if isinstance(v, torch.Tensor):
                yield f"[{k}]", v
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, torch.Tensor):
                yield f"[{k!r}]", v


def _claim(seen: list[Record], op: str, slot: str) -> None:
    if len(seen) == 1:
        rec = seen[0]
        if rec.op is None:
            rec.op, rec.slot = op, slot
        return
    for k, rec in enumerate(seen):
        if rec.op is None:
            rec.op, rec.slot = op, f"{slot}[{k}]"


_WHY = {
    True: "saved without memaudit's hooks (hooks disabled, or a pair pushed from C++)",
    False: (
        "saved outside this capture's thread while other threads ran (or before the capture started), "
        "without memaudit's hooks; use Capture.attach() in the worker thread"
    ),
}


def _unhooked(result: WalkResult, op: str, slot: str, value: Any, in_region: bool, seq: int) -> None:
    for suffix, t in _tensors(value):
        if _is_fake(t):
            continue  # compile's tracing saves fake tensors without hooks: they hold no memory
        name = slot + suffix
        result.found.append(Found("unhooked", op, name, buffer_of(t), seq, in_region))
        if t.dim() == 0 and t.device.type == "cpu":
            continue  # PyTorch saves wrapped Python numbers without hooks; nothing hides there
        result.unseen += 1
        result.warnings.append(f"{op} {name}: {_WHY[in_region]}; counted from the graph, case incomplete")


def _is_fake(t: torch.Tensor) -> bool:
    fake = getattr(sys.modules.get("torch._subclasses.fake_tensor"), "FakeTensor", None)
    return fake is not None and isinstance(t, fake)


def walk(roots: list[Any], in_region: Any, *, outside: Any = None) -> WalkResult:
    """Name every record packed by a node reachable from ``roots``; find what no hook packed.

    Nodes ``in_region(seq)`` accepts (made in the capturing thread while it was active) are read
    in full. Of the others, memaudit's records are claimed (named) wherever they are; they are read
    in full only when ``outside`` is given (other threads ran during the capture), accepts a root's
    sequence number, and that root reaches them through out-of-region nodes only (:func:`_foreign`): sequence numbers
    are per thread, so a node made in another thread cannot be told from one made before the
    capture, but a graph built before the capture and used by it sits *below* the capture's own
    nodes. Their saves without a record are reported as unhooked.

    One pass over the graph (depth first from the roots) claims the records memaudit's layers
    packed, read raw (no unpack runs; each record has one node, so the order does not matter).
    Everything else, Python nodes and the attributes read through an unpack, is read afterwards
    in creation order (ties in the pass's order), as the rows and warnings it makes are ordered.
    """
    result = WalkResult()
    kinds = _KINDS
    packed = _PACKED
    saved_tensor = _SavedTensor
    later: list[tuple[int, int, Any, Any, bool]] = []  # (seq, position, node, attribute or None, inside)
    keep: list[Any] = []  # every node met, alive while the walk runs (wrappers are rebuilt on access)
    met: set[int] = set()
    foreign = _foreign(roots, in_region, outside, keep) if outside is not None else set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node is None or id(node) in met:
            continue
        met.add(id(node))
        keep.append(node)
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None:
                stack.append(nxt)
        tp = type(node)
        kind = kinds.get(tp)
        if kind is None:
            kind = kinds[tp] = _kind(tp)
        op, attrs = kind
        if not attrs and attrs is not None:
            continue  # a node that saves nothing (a view, an AccumulateGrad): nothing to read, wherever it was made
        try:
            seq = node._sequence_nr()
        except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - every Node has one
            seq = -1
        inside = in_region(seq)
        full = inside or id(node) in foreign  # else only claim what memaudit's layers packed
        if attrs is None:
            if full:
                later.append((seq, len(keep), node, None, inside))
            else:
                _claim_python(node, op, seq)
            continue
        for item in attrs:
            attr, raw = item
            if raw is not None:
                try:
                    sv = getattr(node, raw)
                    if type(sv) is saved_tensor and type(data := sv.data) in packed:
                        rec = data.rec
                        if rec.op is None:
                            rec.op, rec.slot = op, attr
                        continue
                    recs = _packed_all(sv)
                except (RuntimeError, AttributeError, TypeError):
                    recs = None
                if recs is not None:  # what an unpack would answer while walking, without running it
                    if recs:
                        _claim(recs, op, attr)
                    continue
            if full:
                later.append((seq, len(keep), node, item, inside))
    if later:
        later.sort(key=lambda e: (e[0], e[1]))  # stable: a node's attributes stay in their order
        _read_later(later, result)
    return result


def _foreign(roots: list[Any], in_region: Any, outside: Any, keep: list[Any]) -> set[int]:
    """ids of the nodes made outside the capture's region that a root made outside it reaches
    through such nodes only: another thread's graph (or one built before the capture) handed over
    as ``outputs``. Nodes the capture's own graph reaches below it (its inputs' graphs, built before
    the capture) are not among them: they were not made during the capture."""
    out: set[int] = set()
    todo = []
    for r in roots:
        if r is not None and not in_region(seq := sequence_nr(r)) and outside(seq):
            todo.append(r)
    while todo:
        node = todo.pop()
        if id(node) in out or in_region(sequence_nr(node)):
            continue
        out.add(id(node))
        keep.append(node)  # wrappers are rebuilt on access: keep ids unique while the walk runs
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None:
                todo.append(nxt)
    return out


def _claim_python(node: Any, op: str, seq: int) -> None:
    """Name the records memaudit packed for a Python node made outside the region (no unhooked or
    ``ctx`` rows from it: it is not this capture's)."""
    try:
        raw = node._raw_saved_tensors
    except (AttributeError, RuntimeError):
        return
    for i, sv in enumerate(raw):
        rec = _packed(sv) if type(sv) is _SavedTensor else None
        if rec is not None and rec.op is None:
            rec.op, rec.slot, rec.node_seq = op, f"saved_tensors[{i}]", seq


def _read_later(later: list[tuple[int, int, Any, Any, bool]], result: WalkResult) -> None:
    """Python nodes, and saved attributes read through an unpack (while walking: memaudit's layers
    answer with their record; a value no layer packed is an unhooked save)."""
    kinds = _KINDS
    st = state()
    prev = st.walking
    seen: list[Record] = []
    st.walking = seen  # one walking window for every C++ attribute read (cleared per read)
    walk_started()
    try:
        for seq, _, node, item, inside in later:
            kind = kinds[type(node)]
            op = kind[0]
            if item is None:
                result.python_nodes.append(node)
                _walk_python(node, op, result, inside, seq)
                continue
            attr, raw = item
            try:
                value = getattr(node, attr)
            except (RuntimeError, AttributeError, TypeError):
                seen.clear()
                continue  # freed by backward, or not readable
            if seen:
                _claim(seen, op, attr)
                seen.clear()
            elif value is not None:
                if raw is None and _no_tensor(value):  # never a tensor here: not read again
                    kind[1] = tuple(a for a in kind[1] if a[0] != attr)
                    continue
                _unhooked(result, op, attr, value, inside, seq)
    finally:
        walk_ended()
        st.walking = prev


def _walk_python(node: Any, op: str, result: WalkResult, inside: bool, seq: int) -> None:
    """A Python ``autograd.Function`` node: its saved tensors, read raw (``_raw_saved_tensors``: no
    unpack runs, and a Function with ``clear_saved_tensors_on_access`` keeps its one access for
    backward), then its ``ctx`` attributes."""
    try:
        raw = node._raw_saved_tensors
    except AttributeError:  # pragma: no cover - a torch without raw saved values: unpack while walking
        raw = None
        _walk_python_unpacked(node, op, result, inside, seq)
    except RuntimeError:
        raw = None  # released by backward: its records are freed
    if raw is not None:
        for i, sv in enumerate(raw):
            if sv is None:
                continue
            rec = _packed(sv) if type(sv) is _SavedTensor else None
            if rec is not None:
                if rec.op is None:
                    rec.op, rec.slot, rec.node_seq = op, f"saved_tensors[{i}]", seq
                continue
            try:
                data = sv.data
            except (RuntimeError, AttributeError):
                continue
            if isinstance(data, torch.Tensor):  # saved without any hook: the tensor itself
                _unhooked(result, op, f"saved_tensors[{i}]", data, inside, seq)
            elif data is not None:  # a pair memaudit did not wrap packed it: nothing to describe without its unpack
                result.unseen += 1
                result.warnings.append(
                    f"{op} saved_tensors[{i}]: {_WHY[inside]}; packed as a {type(data).__name__} memaudit cannot "
                    "describe without running that pair's unpack (not counted; case incomplete)"
                )
    try:
        attrs = vars(node)
    except TypeError:  # pragma: no cover - every Python node has a __dict__
        return
    for name, value in attrs.items():
        for suffix, t in _tensors(value):
            result.found.append(Found("ctx", op, f"ctx.{name}{suffix}", buffer_of(t), seq, inside))


def _walk_python_unpacked(node: Any, op: str, result: WalkResult, inside: bool, seq: int) -> None:
    with walking() as seen:
        try:
            values = node.saved_tensors
        except RuntimeError:
            values = None  # released by backward: its records are freed
    if values is None:
        return
    if seen:
        it = iter(seen)
        for i, v in enumerate(values):
            if v is None:
                continue
            rec = next(it, None)
            if rec is not None and rec.op is None:
                rec.op, rec.slot, rec.node_seq = op, f"saved_tensors[{i}]", seq
    else:
        for i, v in enumerate(values):
            if v is not None:
                _unhooked(result, op, f"saved_tensors[{i}]", v, inside, seq)
