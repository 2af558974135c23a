"""capture(): every saved tensor of hand-written autograd Functions with exactly known saved sets.

Every expected value below follows from the shapes and dtypes the test chose (bytes = numel x
element size; a view's storage is its base's), never from allocator totals.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import torch

from memaudit.capture import Capture, capture
from memaudit.report import Row

F32 = 4
I64 = 8


def hooks_installed() -> bool:
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def by_slot(rows: list[Row]) -> dict[tuple[str | None, str | None], Row]:
    out = {(r.op, r.slot): r for r in rows}
    assert len(out) == len(rows), "every (op, slot) names exactly one row"
    return out


def save(make: Any, x: torch.Tensor, *extra: Any) -> tuple[torch.Tensor, Capture]:
    """Run a Function that saves ``make(x, *extra)`` inside capture(); return output and capture."""

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, inp: torch.Tensor, *ex: Any) -> torch.Tensor:
            ctx.save_for_backward(*make(inp, *ex))
            return inp * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            ctx.saved_tensors  # noqa: B018
            return (g * 2, *([None] * len(extra)))

    with capture() as cap:
        y = Fn.apply(x, *extra)
    return y, cap


OP = "FnBackward"


# ---- plain tensors ------------------------------------------------------------------------------


def test_view_of_larger_tensor_shares_storage_and_counts_physical_once() -> None:
    x = torch.randn(8, 16, requires_grad=True)  # storage 8*16*4 = 512 B
    y, cap = save(lambda t: (t[2:5], t), x)
    rep = cap.report(outputs=y)
    view, base = rep.rows
    assert (view.index, view.op, view.slot) == (0, OP, "saved_tensors[0]")
    assert (view.kind, view.format, view.dtype, view.shape) == ("tensor", "fp32", "float32", [3, 16])
    assert view.bytes == 3 * 16 * F32
    assert view.storage_offset == 2 * 16 * F32
    assert view.storage_bytes == 8 * 16 * F32
    assert (base.index, base.slot, base.shape, base.bytes) == (1, "saved_tensors[1]", [8, 16], 8 * 16 * F32)
    assert base.storage_offset == 0
    assert view.storage == base.storage == "s0"
    assert view.duplicate_of is None and base.duplicate_of is None  # different views, not duplicates
    assert not view.is_parameter and view.container is None and view.container_index is None
    t = rep.totals
    assert (t.rows, t.logical_bytes, t.physical_bytes) == (2, (3 + 8) * 16 * F32, 8 * 16 * F32)
    assert (t.parameter_bytes, t.saved_bytes) == (0, 8 * 16 * F32)


def test_view_alone_counts_its_whole_storage_physically() -> None:
    x = torch.randn(10, 4, requires_grad=True)
    y, cap = save(lambda t: (t[7:],), x)
    (row,) = cap.report(outputs=y).rows
    assert (row.shape, row.bytes, row.storage_offset, row.storage_bytes) == (
        [3, 4],
        3 * 4 * F32,
        7 * 4 * F32,
        10 * 4 * F32,
    )
    totals = cap.report(outputs=y).totals
    assert (totals.logical_bytes, totals.physical_bytes, totals.saved_bytes) == (
        3 * 4 * F32,
        10 * 4 * F32,
        10 * 4 * F32,
    )


def test_same_tensor_saved_twice_gives_two_rows_second_is_duplicate() -> None:
    x = torch.randn(5, 6, requires_grad=True)
    y, cap = save(lambda t: (t, t), x)
    rep = cap.report(outputs=y)
    first, second = rep.rows
    assert [r.slot for r in rep.rows] == ["saved_tensors[0]", "saved_tensors[1]"]
    assert first.duplicate_of is None
    assert second.duplicate_of == first.index == 0
    assert first.storage == second.storage == "s0"
    assert first.bytes == second.bytes == 5 * 6 * F32
    t = rep.totals
    assert (t.rows, t.logical_bytes, t.physical_bytes, t.saved_bytes) == (2, 2 * 5 * 6 * F32, 5 * 6 * F32, 5 * 6 * F32)


def test_parameter_is_flagged_and_excluded_from_saved_bytes() -> None:
    w = torch.nn.Parameter(torch.randn(4, 8))
    x = torch.randn(3, 4, requires_grad=True)
    y, cap = save(lambda t, p: (t, p), x, w)
    rep = cap.report(outputs=y)
    xr, wr = rep.rows
    assert (xr.is_parameter, wr.is_parameter) == (False, True)
    assert (wr.slot, wr.shape, wr.bytes, wr.kind) == ("saved_tensors[1]", [4, 8], 4 * 8 * F32, "tensor")
    assert xr.storage != wr.storage
    t = rep.totals
    assert t.physical_bytes == (3 * 4 + 4 * 8) * F32
    assert t.parameter_bytes == 4 * 8 * F32
    assert t.saved_bytes == 3 * 4 * F32


def test_view_of_a_parameter_counts_as_parameter() -> None:
    """nn.Linear saves ``weight.t()``: a view of the Parameter, in the Parameter's storage."""
    lin = torch.nn.Linear(8, 16, bias=False)
    x = torch.randn(4, 8, requires_grad=True)
    with capture() as cap:
        y = lin(x)
    rows = by_slot(cap.report(outputs=y).rows)
    w = rows["MmBackward0", "_saved_mat2"]
    assert (w.shape, w.is_parameter, w.bytes) == ([8, 16], True, 8 * 16 * F32)
    assert rows["MmBackward0", "_saved_self"].is_parameter is False
    t = cap.report(outputs=y).totals
    assert (t.parameter_bytes, t.saved_bytes) == (8 * 16 * F32, 4 * 8 * F32)


def test_none_makes_no_row_and_keeps_positions() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    y, cap = save(lambda t: (None, t, None), x)
    rep = cap.report(outputs=y)
    (row,) = rep.rows
    assert (row.index, row.op, row.slot) == (0, OP, "saved_tensors[1]")
    assert rep.totals.rows == 1


def test_integer_tensor_is_metadata() -> None:
    x = torch.randn(4, requires_grad=True)
    sizes = torch.arange(5)  # int64
    y, cap = save(lambda t, s: (s,), x, sizes)
    (row,) = cap.report(outputs=y).rows
    assert (row.kind, row.format, row.dtype, row.shape, row.bytes) == ("metadata", "int64", "int64", [5], 5 * I64)
    assert row.slot == "saved_tensors[0]"


def test_mixed_function_exact_rows_and_totals() -> None:
    """View + duplicate + parameter + None + int metadata in one save, every row exact."""
    base = torch.randn(6, 4, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(4, 4))
    meta = torch.tensor([2, 4], dtype=torch.int32)

    def make(t: torch.Tensor, p: torch.Tensor, m: torch.Tensor) -> tuple[Any, ...]:
        v = t[1:3]
        return (v, None, p, m, v, t)

    y, cap = save(make, base, w, meta)
    rep = cap.report(outputs=y)
    got = [
        (
            r.index,
            r.op,
            r.slot,
            r.kind,
            r.format,
            r.shape,
            r.bytes,
            r.storage,
            r.storage_offset,
            r.duplicate_of,
            r.is_parameter,
        )
        for r in rep.rows
    ]
    assert got == [
        (0, OP, "saved_tensors[0]", "tensor", "fp32", [2, 4], 2 * 4 * F32, "s0", 1 * 4 * F32, None, False),
        (1, OP, "saved_tensors[2]", "tensor", "fp32", [4, 4], 4 * 4 * F32, "s1", 0, None, True),
        (2, OP, "saved_tensors[3]", "metadata", "int32", [2], 2 * 4, "s2", 0, None, False),
        (3, OP, "saved_tensors[4]", "tensor", "fp32", [2, 4], 2 * 4 * F32, "s0", 1 * 4 * F32, 0, False),
        (4, OP, "saved_tensors[5]", "tensor", "fp32", [6, 4], 6 * 4 * F32, "s0", 0, None, False),
    ]
    assert all(r.saved_as == r.slot for r in rep.rows)
    t = rep.totals
    assert t.rows == 5
    assert t.logical_bytes == (2 * 4 + 4 * 4 + 2 * 4 + 6 * 4) * F32 + 2 * 4
    assert t.physical_bytes == (6 * 4 + 4 * 4) * F32 + 2 * 4
    assert t.parameter_bytes == 4 * 4 * F32
    assert t.saved_bytes == 6 * 4 * F32 + 2 * 4


# ---- tensor subclasses --------------------------------------------------------------------------


class PlainSub(torch.Tensor):
    """A plain ``as_subclass`` subclass: it owns its storage, no ``__tensor_flatten__``."""


class Pair(torch.Tensor):
    """A traceable wrapper subclass: its bytes live in the inner tensors ``a`` and ``b``."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, b: torch.Tensor) -> Pair:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a = a
        self.b = b

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a", "b"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], ctx: Any, outer_size: Any, outer_stride: Any) -> Pair:
        return Pair(inner["a"], inner["b"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(f"Pair does not implement {func}")


def test_plain_subclass_is_one_row() -> None:
    x = torch.randn(3, 5, requires_grad=True)
    y, cap = save(lambda t: (t.detach().as_subclass(PlainSub),), x)
    (row,) = cap.report(outputs=y).rows
    assert (row.kind, row.format, row.shape, row.bytes) == ("tensor", "fp32", [3, 5], 3 * 5 * F32)
    assert row.container is None and row.container_index is None
    assert row.storage == "s0" and row.storage_bytes == 3 * 5 * F32


def test_wrapper_subclass_is_container_plus_inner_rows() -> None:
    x = torch.randn(2, requires_grad=True)
    a = torch.zeros(2, 3)
    b = torch.zeros(2, 3, dtype=torch.float16)
    y, cap = save(lambda t: (t, Pair(a, b)), x)
    rep = cap.report(outputs=y)
    xr, cont, ar, br = rep.rows
    assert (xr.index, xr.slot, xr.container) == (0, "saved_tensors[0]", None)
    assert (cont.index, cont.op, cont.slot, cont.kind, cont.bytes) == (1, OP, "saved_tensors[1]", "container", 0)
    assert (cont.container, cont.shape, cont.format, cont.storage, cont.container_index) == (
        "Pair",
        [2, 3],
        "fp32",
        None,
        None,
    )
    assert (cont.saved_as, ar.saved_as, br.saved_as) == ("saved_tensors[1]",) * 3
    assert (ar.slot, ar.container, ar.container_index, ar.format, ar.bytes, ar.op) == (
        "a",
        "Pair",
        1,
        "fp32",
        2 * 3 * F32,
        OP,
    )
    assert (br.slot, br.container, br.container_index, br.format, br.bytes) == ("b", "Pair", 1, "fp16", 2 * 3 * 2)
    assert len({xr.storage, ar.storage, br.storage}) == 3
    t = rep.totals
    assert t.rows == 4
    assert t.logical_bytes == t.physical_bytes == 2 * F32 + 2 * 3 * F32 + 2 * 3 * 2  # the wrapper adds 0


def test_provenance_noted_twice_for_one_tensor_goes_to_each_pack_in_order() -> None:
    """A classifier may describe one buffer twice (one scale tensor held in two attributes)."""
    x = torch.randn(3, requires_grad=True)
    shared = torch.empty(4)

    def make(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cap.note_buffer(shared, {"kind": "scale_inv", "orientation": "both", "container": "Box", "slot": "scale_inv"})
        cap.note_buffer(
            shared, {"kind": "scale_inv", "orientation": "columnwise", "container": "Box", "slot": "col_scale_inv"}
        )
        return (shared, shared, shared)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, inp: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(*make(inp))
            return inp * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 2

    with capture(plugins=[]) as cap:
        y = Fn.apply(x)
    rows = cap.report(outputs=y).rows
    assert [(r.saved_as, r.slot, r.kind, r.orientation, r.container, r.duplicate_of) for r in rows] == [
        ("saved_tensors[0]", "scale_inv", "scale_inv", "both", "Box", None),
        ("saved_tensors[1]", "col_scale_inv", "scale_inv", "columnwise", "Box", 0),
        ("saved_tensors[2]", "saved_tensors[2]", "tensor", None, None, 0),  # nothing left to claim
    ]


# ---- C++ autograd nodes -------------------------------------------------------------------------


def test_cpp_nodes_name_op_and_saved_attribute() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    with capture() as cap:
        out = (x @ w).sin()
    rep = cap.report(outputs=out)
    rows = by_slot(rep.rows)
    assert set(rows) == {
        ("MmBackward0", "_saved_self"),
        ("MmBackward0", "_saved_mat2"),
        ("SinBackward0", "_saved_self"),
    }
    assert (rows["MmBackward0", "_saved_self"].shape, rows["MmBackward0", "_saved_self"].bytes) == ([3, 4], 3 * 4 * F32)
    assert (rows["MmBackward0", "_saved_mat2"].shape, rows["MmBackward0", "_saved_mat2"].bytes) == ([4, 5], 4 * 5 * F32)
    assert (rows["SinBackward0", "_saved_self"].shape, rows["SinBackward0", "_saved_self"].bytes) == (
        [3, 5],
        3 * 5 * F32,
    )
    assert rep.totals.logical_bytes == rep.totals.physical_bytes == (12 + 20 + 15) * F32


def test_tensor_saved_by_two_nodes_is_attributed_to_each() -> None:
    """sin packs x first, cos second; the rows must name them in that order (walk runs outputs first)."""
    x = torch.randn(2, 3, requires_grad=True)
    with capture() as cap:
        out = x.sin() + x.cos()
    rows = cap.report(outputs=out).rows
    assert [(r.op, r.slot, r.duplicate_of) for r in rows] == [
        ("SinBackward0", "_saved_self", None),
        ("CosBackward0", "_saved_self", 0),
    ]


def test_report_without_outputs_walks_live_graphs() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    with capture() as cap:
        out = x.exp()
    rows = cap.report().rows
    assert [(r.op, r.slot, r.shape) for r in rows] == [("ExpBackward0", "_saved_result", [3, 4])]
    del out


# ---- hooks, gradients, lifetimes ----------------------------------------------------------------


def test_hooks_are_active_only_inside_and_removed_after_exception() -> None:
    assert not hooks_installed()
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="boom"):
        with capture() as cap:
            assert hooks_installed()
            z = (x * x).sum()
            raise RuntimeError("boom")
    assert not hooks_installed()
    n = len(cap.report().rows)
    assert n == 2  # MulBackward0 saved x twice (self and other)
    y = x.sin()  # outside capture: the pack hook must not run
    assert len(cap.report(outputs=y).rows) == n
    assert len(cap.records) == 2
    del z
    assert cap.report().rows == [] and len(cap.report().freed) == 2  # the dropped graph released both


def test_pack_hook_returns_the_same_object() -> None:
    x = torch.randn(4, requires_grad=True)
    keep: list[torch.Tensor] = []

    def make(t: torch.Tensor) -> tuple[torch.Tensor]:
        s = t * 3
        keep.append(s)
        return (s,)

    y, cap = save(make, x)
    back = y.grad_fn.saved_tensors[0]
    assert back.data_ptr() == keep[0].data_ptr()  # no copy: the same storage comes back
    assert back._version == keep[0]._version
    keep[0].add_(1)  # shared version counter: the in-place change is visible through the saved alias
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.grad_fn.saved_tensors  # noqa: B018


def run_model(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    h = (x @ w).sin()
    y, _ = save(lambda t: (t, t[1:]), h)
    return (y * v).tanh().sum()


def test_backward_gives_same_gradients_with_and_without_capture() -> None:
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(5, 4, generator=gen), torch.randn(4, 3, generator=gen), torch.randn(5, 3, generator=gen)]
    plain = [t.clone().requires_grad_() for t in base]
    run_model(*plain).backward()
    hooked = [t.clone().requires_grad_() for t in base]
    with capture() as cap:
        loss = run_model(*hooked)
    rep = cap.report(outputs=loss)
    assert rep.rows  # something was captured
    loss.backward()
    for a, b in zip(plain, hooked, strict=True):
        assert a.grad is not None and torch.equal(a.grad, b.grad)


def test_capture_keeps_no_tensor_alive() -> None:
    x = torch.randn(64, 64, requires_grad=True)
    ref_x = weakref.ref(x)
    inner: list[weakref.ref[torch.Tensor]] = []

    def make(t: torch.Tensor) -> tuple[torch.Tensor]:
        s = t.exp()
        inner.append(weakref.ref(s))
        return (s, t)

    y, cap = save(make, x)
    rep = cap.report(outputs=y)
    assert len(rep.rows) == 2
    assert inner[0]() is not None  # the graph holds it
    del x, y
    gc.collect()
    assert inner[0]() is None
    assert ref_x() is None
    later = cap.report()
    assert later.rows == [] and len(later.freed) == 2  # released rows leave the totals
    assert later.totals.saved_bytes == 0 and later.totals.freed_rows == 2
    assert rep.totals.rows == 2  # the earlier report is plain data and unchanged


# ---- labels -------------------------------------------------------------------------------------


def test_labels_match_by_storage() -> None:
    x = torch.randn(8, 4, requires_grad=True)
    other = torch.randn(3, requires_grad=True)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(t[0:2], t[2:8], o)
            return t * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            return g * 2, None

    with capture() as cap:
        cap.label(x, "x")
        cap.label(x[2:8], "x.tail", group=1)
        y = Fn.apply(x, other)
    rows = cap.report(outputs=y).rows
    assert [(r.shape, r.operand, r.group) for r in rows] == [
        ([2, 4], "FnBackward.saved_tensors[0]", None),  # two labels on the storage, no exact view: memaudit's own name
        ([6, 4], "x.tail", 1),  # exact view
        ([3], "FnBackward.saved_tensors[2]", None),  # another storage
    ]

    with capture() as cap2:
        cap2.label(x, "x")
        y2 = Fn.apply(x, other)
    rows2 = cap2.report(outputs=y2).rows
    assert [(r.operand, r.group) for r in rows2] == [("x", None), ("x", None), ("FnBackward.saved_tensors[2]", None)]


def test_region_holds_the_first_node_made_inside_and_not_the_last_made_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture's region (sequence numbers ``lo <= seq < hi``) starts at the first node made
    inside and ends before the first node made after: a ctx-only save (which no hook sees, so
    the walk names it only for nodes in the region) is reported for the node made first inside
    the block, and not for the one made just before it or just after."""

    class KeepsOnCtx(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
            ctx.kept = t * 3
            return t * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 2

    # Threads other tests left running (a compile worker) would make an output made before the
    # capture possibly another thread's (read in full): this test is about the region alone.
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    x = torch.randn(3, requires_grad=True)
    before = KeepsOnCtx.apply(x)  # the last node made before the capture
    with capture(plugins=[], modules=False) as cap:
        first = KeepsOnCtx.apply(x)  # the first node made inside
    after = KeepsOnCtx.apply(x)  # the first node made after
    seqs = [y.grad_fn._sequence_nr() for y in (before, first, after)]
    assert seqs[0] + 1 == seqs[1] and seqs[1] + 1 == seqs[2]
    rows = cap.report(outputs=[before, first, after]).rows
    assert [(r.via, r.saved_as) for r in rows] == [("ctx", "ctx.kept")]
