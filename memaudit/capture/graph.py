"""Walk the autograd graph to name records, and to find what the hooks did not see.

Every node reachable from the roots that was created while the capture was active is visited in
creation order. Its saved attributes (``_saved_*`` of C++ nodes, ``saved_tensors`` of Python
``autograd.Function`` nodes) are read while :class:`~memaudit.capture.stack.walking` is on, so
each read answers with the record it was packed as and no foreign unpack runs (no checkpoint
recompute, no copy back from the host). A saved tensor that answers without a record was saved
outside memaudit's hooks (another thread, hooks disabled, a pair pushed from C++): it becomes a row
``via="unhooked"`` and the case is incomplete. Tensors a Python node keeps as ``ctx`` attributes
bypass the hooks entirely; they become rows ``via="ctx"``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from memaudit.capture.hooks import Record, state, walk_ended, walk_started
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


_KINDS: dict[type, tuple[str, tuple[str, ...] | None]] = {}
"""Node class -> (op name, saved attributes; None for a Python ``autograd.Function`` node)."""


def sequence_nr(node: Any) -> int:
    try:
        return int(node._sequence_nr())
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - every Node has one
        return -1


def collect(roots: list[Any]) -> list[Any]:
    """Every node reachable from ``roots`` (kept alive in the list: wrappers are rebuilt on access)."""
    seen: set[int] = set()
    nodes: list[Any] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None:
                stack.append(nxt)
    return nodes


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
        name = slot + suffix
        result.found.append(Found("unhooked", op, name, buffer_of(t), seq, in_region))
        if t.dim() == 0 and t.device.type == "cpu":
            continue  # PyTorch saves wrapped Python numbers without hooks; nothing hides there
        result.unseen += 1
        result.warnings.append(f"{op} {name}: {_WHY[in_region]}; counted from the graph, case incomplete")


def walk(roots: list[Any], in_region: Any, *, outside: bool = False) -> WalkResult:
    """Name every record packed by a node reachable from ``roots``; find what no hook packed.

    Nodes ``in_region(seq)`` accepts (made in the capturing thread while it was active) are read
    in full. The others are read only when ``outside`` is set (other threads ran during the
    capture): sequence numbers are per thread, so a node made in another thread cannot be told
    from one made before the capture; their records are claimed, and saves without a record are
    reported as unhooked.
    """
    result = WalkResult()
    nodes = collect(roots)
    try:
        seqs = [node._sequence_nr() for node in nodes]
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - every Node has one
        seqs = [sequence_nr(node) for node in nodes]
    kinds = _KINDS
    st = state()
    prev = st.walking
    seen: list[Record] = []
    st.walking = seen  # one walking window for every C++ attribute read (cleared per read)
    walk_started()
    try:
        for i in sorted(range(len(nodes)), key=seqs.__getitem__):
            node = nodes[i]
            seq = seqs[i]
            inside = in_region(seq)
            if not inside and not outside:
                continue
            tp = type(node)
            kind = kinds.get(tp)
            if kind is None:
                kind = kinds[tp] = (tp.__name__, None if issubclass(tp, BackwardCFunction) else saved_attributes(tp))
            op, attrs = kind
            if attrs is None:
                result.python_nodes.append(node)
                _walk_python(node, op, result, inside, seq)
                continue
            for attr in attrs:
                try:
                    value = getattr(node, attr)
                except (RuntimeError, AttributeError, TypeError):
                    seen.clear()
                    continue  # freed by backward, or not readable
                if seen:
                    _claim(seen, op, attr)
                    seen.clear()
                elif value is not None:
                    _unhooked(result, op, attr, value, inside, seq)
    finally:
        walk_ended()
        st.walking = prev
    return result


def _walk_python(node: Any, op: str, result: WalkResult, inside: bool, seq: int) -> None:
    with walking() as seen:
        try:
            values = node.saved_tensors
        except RuntimeError:
            values = None  # released by backward: its records are freed
    if values is not None:
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
    try:
        attrs = vars(node)
    except TypeError:  # pragma: no cover - every Python node has a __dict__
        return
    for name, value in attrs.items():
        for suffix, t in _tensors(value):
            result.found.append(Found("ctx", op, f"ctx.{name}{suffix}", buffer_of(t), seq, inside))
