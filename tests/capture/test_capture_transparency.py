"""capture() is invisible to autograd, and its rows match what autograd really keeps.

Expected values come from the shapes and dtypes chosen here (bytes = numel x element size), from
a minimal saved-tensors hook pair of the test's own (:class:`SavedLog`), or from plain autograd
run without memaudit; never from memaudit itself.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils._pytree import tree_map
from torch.utils.checkpoint import checkpoint

from memaudit.capture import Capture, capture
from memaudit.report import CaseReport, Row

F32 = 4
F16 = 2
N, IN, OUT = 32, 64, 128
X_BYTES = N * IN * F32  # lin's input
H_BYTES = N * OUT * F32  # lin's output (and anything of its shape)
W_BYTES = OUT * IN * F32


def top_hooks() -> Any:
    return torch._C._autograd._top_saved_tensors_default_hooks(False)


def setup(seed: int = 0, x_grad: bool = False) -> tuple[nn.Linear, torch.Tensor]:
    """``lin = nn.Linear(64, 128); x = torch.randn(32, 64)``, the same for every ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(IN, OUT)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(OUT, IN, generator=gen))
        lin.bias.copy_(torch.randn(OUT, generator=gen))
    x = torch.randn(N, IN, generator=gen).requires_grad_(x_grad)
    return lin, x


def grads(*tensors: torch.Tensor) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        assert t.grad is not None
        out.append(t.grad.clone())
    return out


def assert_bitwise_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for ga, gb in zip(a, b, strict=True):
        assert torch.equal(ga, gb)


class SavedLog:
    """Ground truth: a saved-tensors pair of our own that records what it packs and returns it."""

    def __init__(self) -> None:
        self.packed: list[tuple[tuple[int, ...], torch.dtype, int, int, int, bool]] = []
        self.unpacks = 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        is_param = isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter)
        self.packed.append(
            (tuple(t.shape), t.dtype, t.numel() * t.element_size(), st.data_ptr(), st.nbytes(), is_param)
        )
        return t

    def unpack(self, t: torch.Tensor) -> torch.Tensor:
        self.unpacks += 1
        return t

    @contextmanager
    def active(self) -> Iterator[SavedLog]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            yield self

    def shapes_and_bytes(self) -> list[tuple[list[int], int]]:
        return sorted((list(shape), nbytes) for shape, _, nbytes, *_ in self.packed)

    def saved_bytes(self) -> int:
        """Every distinct non-parameter storage once, at full size (valid while the graph lives)."""
        storages = {ptr: size for *_, ptr, size, is_param in self.packed if not is_param}
        return sum(storages.values())


def find_node(root: Any, name: str) -> Any:
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.name() == name:
            return node
        stack.extend(fn for fn, _ in node.next_functions)
    raise AssertionError(f"no {name} in the graph")


def rows_of(rep: CaseReport, op: str, saved_as: str) -> list[Row]:
    return [r for r in rep.rows if r.op == op and r.saved_as == saved_as]


def one_row(rep: CaseReport, op: str, saved_as: str) -> Row:
    (row,) = rows_of(rep, op, saved_as)
    return row


# ---- 1. the in-place check ------------------------------------------------------------------------


def _backward_error(loss: torch.Tensor) -> str:
    with pytest.raises(RuntimeError) as info:
        loss.backward()
    return str(info.value)


def test_inplace_modification_of_saved_input_raises_pytorchs_own_error() -> None:
    lin, x = setup()
    h = lin(x)
    z = h * h  # saves h (self and other)
    h.add_(1)
    plain = _backward_error(z.sum())
    assert "modified by an inplace operation" in plain

    lin, x = setup()
    with capture():
        h = lin(x)
        z = h * h
        h.add_(1)
    assert _backward_error(z.sum()) == plain


def _inplace_dropped_input() -> torch.Tensor:
    lin, x = setup()
    h = lin(x)
    z = h * h
    h.add_(1)
    return z.sum()  # h's Python object dies here; autograd still holds its TensorImpl


def _inplace_output() -> torch.Tensor:
    lin, x = setup()
    t = lin(x).tanh()  # TanhBackward0 saves its result
    t.mul_(2)
    return t.sum()


def _inplace_leaf() -> torch.Tensor:
    w = torch.randn(N, IN, generator=torch.Generator().manual_seed(1), requires_grad=True)
    z = w * w
    with torch.no_grad():
        w.add_(1)
    return z.sum()


@pytest.mark.parametrize(
    "build",
    [
        _inplace_dropped_input,
        _inplace_output,
        _inplace_leaf,
    ],
    ids=["dropped-input", "output", "leaf"],
)
def test_inplace_modification_message_matches_pytorch(build: Callable[[], torch.Tensor]) -> None:
    plain = _backward_error(build())
    assert "modified by an inplace operation" in plain
    with capture():
        loss = build()
    assert _backward_error(loss) == plain


def test_without_modification_gradients_are_bitwise_identical() -> None:
    def run() -> list[torch.Tensor]:
        lin, x = setup(x_grad=True)
        h = lin(x)
        (h * h).tanh().sum().backward()
        return grads(x, lin.weight, lin.bias)

    plain = run()
    with capture() as cap:
        lin, x = setup(x_grad=True)
        h = lin(x)
        loss = (h * h).tanh().sum()
    assert cap.report(outputs=loss).rows
    loss.backward()
    assert_bitwise_equal(grads(x, lin.weight, lin.bias), plain)


# ---- 2. no leaked graphs --------------------------------------------------------------------------


def _deep_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(256, 256), nn.Tanh())])


def test_dropped_graph_is_freed_by_refcounting_alone() -> None:
    model = _deep_model()
    x = torch.randn(4, 256)
    seen: list[tuple[weakref.ref[torch.Tensor], weakref.ref[Any]]] = []
    handle = model[5].register_forward_hook(
        lambda m, i, o: seen.append((weakref.ref(o), weakref.ref(o.untyped_storage())))
    )
    log = SavedLog()
    with log.active():
        model(x)
    gc.disable()
    try:
        with capture() as cap:
            y = model(x)
        handle.remove()
        rep = cap.report(outputs=y)
        assert len(rep.rows) == len(log.packed)
        ref_y = weakref.ref(y)
        ref_mid, ref_mid_storage = seen[-1]
        assert ref_mid_storage() is not None  # the graph keeps the intermediate's memory
        del y
        assert ref_y() is None
        assert ref_mid() is None
        assert ref_mid_storage() is None
        later = cap.report()
    finally:
        gc.enable()
    assert later.rows == []
    assert len(later.freed) == len(rep.rows)
    assert later.totals.saved_bytes == 0
    assert later.totals.freed_rows == len(rep.rows)


def _checkpointed_blocks(x: torch.Tensor, blocks: nn.ModuleList, seen: list[weakref.ref[torch.Tensor]]) -> torch.Tensor:
    h = x
    for blk in blocks:
        h = h + checkpoint(blk, h, use_reentrant=False)
        seen.append(weakref.ref(h))  # the next block's checkpoint frame keeps this one
    return h


@pytest.mark.parametrize("hooked", ["bare", "capture"])
def test_dropped_checkpoint_graph_is_freed_by_refcounting_alone(hooked: str) -> None:
    """Non-reentrant checkpoint keeps its inputs in a SavedTensor that holds the enclosing pack and
    unpack from C++, where gc cannot look: nothing memaudit puts there may reach back (a layer ->
    pack -> layer cycle once kept every block's frame alive after the graph was dropped)."""
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(IN, 32), nn.GELU(), nn.Linear(32, IN)) for _ in range(3))
    x = torch.randn(N, IN, requires_grad=True)
    _checkpointed_blocks(x, blocks, []).sum().backward()  # checkpoint's first call keeps lazy state
    seen: list[weakref.ref[torch.Tensor]] = []
    gc.collect()
    gc.disable()
    try:
        with capture() if hooked == "capture" else contextlib.nullcontext() as cap:
            y = _checkpointed_blocks(x, blocks, seen)
        if cap is not None:
            assert cap.report(outputs=y).rows
        ref_cap = weakref.ref(cap) if cap is not None else lambda: None
        del y, cap
        assert [r() is None for r in seen] == [True] * len(seen)
        assert ref_cap() is None
    finally:
        gc.enable()


def test_users_pair_holding_a_saved_tensor_does_not_keep_the_capture() -> None:
    """A pair pushed inside a capture whose pack holds a SavedTensor made under the capture (what
    checkpoint's frame does): once both are dropped, reference counting frees the capture."""
    x = torch.randn(N, IN, requires_grad=True)
    gc.disable()
    try:
        with capture() as cap:
            saved = torch._C._autograd._make_saved_tensor(x, is_output=False)

            def pack(t: torch.Tensor, keep: Any = saved) -> torch.Tensor:
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                pass
            del pack, saved
        ref_cap = weakref.ref(cap)
        del cap
        assert ref_cap() is None
    finally:
        gc.enable()


def test_deep_model_gradients_identical_with_and_without_capture() -> None:
    model = _deep_model()
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(3))
    model(x).sum().backward()
    plain = grads(*model.parameters())
    model.zero_grad(set_to_none=True)
    with capture() as cap:
        y = model(x)
    assert cap.report(outputs=y).rows
    y.sum().backward()
    assert_bitwise_equal(grads(*model.parameters()), plain)


# ---- 3. composing with other pairs ----------------------------------------------------------------


def test_outer_user_pair_gets_the_same_pack_and_unpack_calls() -> None:
    plain = SavedLog()
    lin, x = setup(x_grad=True)
    with plain.active():
        loss = (lin(x).tanh() * 2).sum()
    loss.backward()
    plain_grads = grads(x, lin.weight, lin.bias)
    assert plain.packed and plain.unpacks

    outer = SavedLog()
    lin, x = setup(x_grad=True)
    with outer.active():
        with capture() as cap:
            loss = (lin(x).tanh() * 2).sum()
        cap.report()
        cap.report(outputs=loss)
        assert (len(outer.packed), outer.unpacks) == (len(plain.packed), 0)
    loss.backward()
    assert (len(outer.packed), outer.unpacks) == (len(plain.packed), plain.unpacks)
    assert_bitwise_equal(grads(x, lin.weight, lin.bias), plain_grads)


def test_a_pass_through_pair_inside_the_capture_stays_complete_after_backward() -> None:
    """Backward releases what a user's pair packed: nothing is kept anywhere any more, so the case
    is as complete as before backward (and as without the pair)."""
    x, w = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    plain = SavedLog()
    with plain.active():
        (x * w).sum().backward()
    assert len(plain.packed) == 2 and plain.unpacks == 2
    for inner in (False, True):
        user = SavedLog()
        with capture() as cap:
            with user.active() if inner else contextlib.nullcontext():
                y = (x * w).sum()
            before = cap.report()
            y.backward()
            after = cap.report()
        if inner:
            assert (len(user.packed), user.unpacks) == (len(plain.packed), plain.unpacks)  # the pair ran as bare
        assert before.complete and len(before.rows) == 2, before.warnings
        assert after.complete, after.warnings
        assert after.rows == [] and len(after.freed) == 2 and after.totals.saved_bytes == 0


def test_a_pair_pushed_inside_the_capture_reads_back_through_memaudits_layer() -> None:
    """What the README says ``capture()`` changes beyond any pair: a pair pushed inside a capture is
    pushed wrapped, so ``SavedTensor.data`` / ``.unpack_hook`` of what it packed are memaudit's; what
    every read through the saved attribute gives (the user's unpack) is the same as bare."""
    x, w = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)

    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    got = {}
    for where in ("plain", "capture"):
        with capture() if where == "capture" else contextlib.nullcontext():
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
                b = x * w
        raw = b.grad_fn._raw_saved_self
        got[where] = (b.grad_fn._saved_self.data_ptr() == x.data_ptr(), raw.unpack_hook is unpack, raw.data is x)
    assert got["plain"] == (True, True, True)
    assert got["capture"] == (True, False, False)


def test_save_on_cpu_outside_capture() -> None:
    """On CPU ``save_on_cpu()`` keeps ``tensor.cpu()``: the tensor itself, so rows stay on the device."""
    lin, x = setup(x_grad=True)
    h = lin(x)
    (h * h).sum().backward()
    plain = grads(x, lin.weight, lin.bias)

    lin, x = setup(x_grad=True)
    with torch.autograd.graph.save_on_cpu():
        with capture() as cap:
            h = lin(x)
            loss = (h * h).sum()
    rep = cap.report(outputs=loss)
    this, other = one_row(rep, "MulBackward0", "_saved_self"), one_row(rep, "MulBackward0", "_saved_other")
    assert rep.rows and all(r.resides == "device" for r in rep.rows)
    assert (this.bytes, other.bytes) == (H_BYTES, H_BYTES)
    assert this.storage == other.storage  # h itself, kept once
    assert rep.totals.saved_bytes == X_BYTES + H_BYTES  # addmm's mat1 (x) and h; weight.t() is a parameter
    loss.backward()
    assert_bitwise_equal(grads(x, lin.weight, lin.bias), plain)


def test_save_on_cpu_pinned_copies_are_what_rows_name() -> None:
    """``save_on_cpu(pin_memory=True)`` without CUDA packs a fresh copy per save: its pack ran."""
    lin, x = setup()
    h = lin(x)
    (h * h).sum().backward()
    plain = grads(lin.weight, lin.bias)

    lin, x = setup()
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        with capture() as cap:
            h = lin(x)
            loss = (h * h).sum()
    rep = cap.report(outputs=loss)
    this, other = one_row(rep, "MulBackward0", "_saved_self"), one_row(rep, "MulBackward0", "_saved_other")
    assert this.storage != other.storage  # two copies of h
    assert (this.storage_bytes, other.storage_bytes) == (H_BYTES, H_BYTES)
    assert all(r.resides == "device" and r.note is not None and "copy" in r.note for r in rep.rows)
    loss.backward()
    assert_bitwise_equal(grads(lin.weight, lin.bias), plain)


def _half_pack(t: torch.Tensor) -> tuple[torch.Tensor]:
    return (t.half(),)


def _half_unpack(p: tuple[torch.Tensor]) -> torch.Tensor:
    return p[0].float()


def test_fp16_copy_pair_inside_capture() -> None:
    lin, x = setup(x_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
        loss = lin(x).tanh().sum()
    loss.backward()
    plain = grads(x, lin.weight, lin.bias)
    log = SavedLog()
    lin, x = setup(x_grad=True)
    with log.active():
        lin(x).tanh().sum()

    lin, x = setup(x_grad=True)
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
            loss = lin(x).tanh().sum()
    rep = cap.report(outputs=loss)
    assert sorted((r.shape, r.bytes) for r in rep.rows) == log.shapes_and_bytes()
    assert all(r.via == "hook" and r.note is not None and "float16 copy" in r.note for r in rep.rows)
    loss.backward()
    assert_bitwise_equal(grads(x, lin.weight, lin.bias), plain)


def test_fp16_copy_rows_carry_the_copys_storage_bytes() -> None:
    lin, x = setup()  # x needs no grad: addmm keeps only x (mat1); tanh keeps its result
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
            loss = lin(x).tanh().sum()
    rep = cap.report(outputs=loss)
    got = sorted((r.shape, r.bytes, r.storage_bytes) for r in rep.rows)
    assert got == [([N, IN], X_BYTES, N * IN * F16), ([N, OUT], H_BYTES, N * OUT * F16)]
    assert rep.totals.saved_bytes == (N * IN + N * OUT) * F16


def test_copies_of_a_pair_do_not_alias_an_unsaved_output() -> None:
    for _ in range(5):  # the id reuse depends on the allocator: almost always, not always
        lin, x = setup()
        with capture() as cap:
            with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
                loss = lin(x).tanh().sum()  # the 0-dim loss is saved by no node
        rep = cap.report(outputs=loss)
        assert not any(r.aliases_output for r in rep.rows)
        assert rep.totals.output_bytes == 0


# ---- 4. checkpoint -------------------------------------------------------------------------------


def test_checkpoint_runs_as_often_and_region_rows_are_recomputed() -> None:
    runs = [0]

    def f(t: torch.Tensor) -> torch.Tensor:
        runs[0] += 1
        return t.sin().tanh()

    base = torch.randn(N, IN, generator=torch.Generator().manual_seed(2))
    xx = base.clone().requires_grad_()
    checkpoint(f, xx, use_reentrant=False).sum().backward()
    assert runs == [2]
    plain = grads(xx)

    runs[0] = 0
    xx = base.clone().requires_grad_()
    with capture() as cap:
        y = checkpoint(f, xx, use_reentrant=False)
    cap.report()
    cap.report()
    rep = cap.report(outputs=y)
    assert runs == [1]
    inputs = [r for r in rep.rows if r.op == "checkpoint"]
    assert [(r.saved_as, r.bytes, r.resides) for r in inputs] == [("inputs[0]", X_BYTES, "device")]
    region = [r for r in rep.rows if r.op != "checkpoint"]
    assert {(r.op, r.saved_as) for r in region} == {("SinBackward0", "_saved_self"), ("TanhBackward0", "_saved_result")}
    assert all(r.resides == "recomputed" for r in region)
    assert rep.totals.saved_bytes == X_BYTES  # only the checkpoint's input is kept
    y.sum().backward()
    assert runs == [2]
    assert_bitwise_equal(grads(xx), plain)


# ---- 5. an opaque wrapper subclass -----------------------------------------------------------------


class Opaque(torch.Tensor):
    """A wrapper subclass without ``__tensor_flatten__``: memaudit cannot see its storage."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False) -> Opaque:
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, dtype=elem.dtype, device=elem.device, requires_grad=requires_grad
        )
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        def unwrap(t: Any) -> Any:
            return t.elem if isinstance(t, Opaque) else t

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: Opaque(t) if isinstance(t, torch.Tensor) else t, out)


def test_opaque_wrapper_subclass_rows_are_unknown_and_incomplete() -> None:
    base = torch.randn(8, 16)
    w = Opaque(base.clone(), requires_grad=True)
    with capture() as cap:
        y = (w * w).sin().sum()
    rep = cap.report(outputs=y)
    assert rep.rows
    assert all(r.kind == "unknown" for r in rep.rows)
    assert sorted((r.op, r.saved_as, r.bytes) for r in rep.rows) == [
        ("MulBackward0", "_saved_other", 8 * 16 * F32),
        ("MulBackward0", "_saved_self", 8 * 16 * F32),
        ("SinBackward0", "_saved_self", 8 * 16 * F32),
    ]
    assert any("Opaque" in w for w in rep.warnings)
    assert rep.complete is False
    y.backward()
    w2 = Opaque(base.clone(), requires_grad=True)
    (w2 * w2).sin().sum().backward()
    assert isinstance(w.grad, Opaque) and isinstance(w2.grad, Opaque)
    assert torch.equal(w.grad.elem, w2.grad.elem)


# ---- 6. disabling hooks ---------------------------------------------------------------------------


def test_disabling_hooks_inside_capture_raises_as_under_any_pair() -> None:
    """PyTorch refuses ``disable_saved_tensors_hooks`` while a pair is active; capture's is no exception.

    Saves that memaudit's hooks miss are covered by the worker-thread tests below.
    """
    log = SavedLog()
    with log.active(), pytest.raises(RuntimeError) as plain:
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            pass
    with capture() as cap, pytest.raises(RuntimeError) as under:
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            pass
    assert str(under.value) == str(plain.value)
    assert top_hooks() is None
    assert cap.records == []


# ---- 7. nested captures ---------------------------------------------------------------------------


def _wrapped_three_bytes(b: torch.Tensor) -> int:
    """PyTorch saves the Python number 3 of ``a * 3`` as a 0-dim tensor without calling any hook."""
    other = find_node(b.grad_fn, "MulBackward0")._saved_other
    assert other.dim() == 0
    return other.numel() * other.element_size()


def test_nested_captures_count_their_own_blocks() -> None:
    lin, x = setup()
    whole, inner_only = SavedLog(), SavedLog()
    with whole.active():
        a = lin(x).tanh()
        with torch.autograd.graph.saved_tensors_hooks(inner_only.pack, inner_only.unpack):
            b = (a * 3).tanh().sum()
    three = _wrapped_three_bytes(b)
    want_outer = whole.saved_bytes() + inner_only.saved_bytes() + three
    want_inner = inner_only.saved_bytes() + three
    assert (want_outer, want_inner) == (X_BYTES + 2 * H_BYTES + three, H_BYTES + three)

    lin, x = setup()
    with capture() as outer:
        a = lin(x).tanh()
        with capture() as inner:
            b = (a * 3).tanh().sum()
    assert outer.report(outputs=b).totals.saved_bytes == want_outer
    assert inner.report(outputs=b).totals.saved_bytes == want_inner


# ---- 8. threads -----------------------------------------------------------------------------------


def _forward_in_thread(cap: Capture, attach: bool) -> torch.Tensor:
    """A thread started inside the capture (attached to it automatically; ``attach`` again is harmless)."""
    lin, x = setup()
    out: list[torch.Tensor] = []

    def worker() -> None:
        if attach:
            with cap.attach():
                out.append(lin(x).tanh())
        else:
            out.append(lin(x).tanh())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    return out[0]


class Pool:
    """One worker thread started before any capture: it runs the jobs it is given."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, done = job
            done.put(fn())

    def run(self, fn: Any) -> Any:
        done: queue.Queue[Any] = queue.Queue()
        self.jobs.put((fn, done))
        return done.get()

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


def _thread_truth() -> list[tuple[list[int], int]]:
    lin, x = setup()
    log = SavedLog()
    with log.active():
        lin(x).tanh()
    assert log.shapes_and_bytes() == sorted([([N, IN], X_BYTES), ([N, OUT], H_BYTES)])
    return log.shapes_and_bytes()


@pytest.mark.parametrize("attach", [False, True], ids=["started-inside", "started-inside-and-attached"])
def test_thread_started_inside_capture_is_captured(attach: bool) -> None:
    truth = _thread_truth()
    with capture() as cap:
        y = _forward_in_thread(cap, attach=attach)
    rep = cap.report(outputs=y)
    assert rep.rows and all(r.via == "hook" for r in rep.rows)
    assert sorted((r.shape, r.bytes) for r in rep.rows) == truth  # each save once
    assert rep.complete is True
    assert rep.totals.saved_bytes == X_BYTES + H_BYTES


def test_a_capture_exited_in_another_thread_says_so_and_stops() -> None:
    """Only the thread that pushed a pair can pop it: exiting a capture elsewhere raises a clear
    error, the capture stops recording and the global module hooks go."""
    from torch.nn.modules import module as mm

    hooks_before = (len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks))
    cap = capture()
    cap.__enter__()
    assert "thread that entered it" in _exit_in_another_thread(cap)
    assert not cap.active
    assert (len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks)) == hooks_before
    lin, x = setup()
    lin(x).tanh()
    assert cap.records == []  # recording stopped
    with capture() as again:  # the next capture entered here pops the pair left behind
        y = lin(x).tanh()
    assert again.report(outputs=y).rows
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    torch.func.grad(lambda t: t.sin().sum())(torch.randn(3))  # no pair left: torch.func runs


def _exit_in_another_thread(cap: Capture) -> str:
    """Exit ``cap`` in a new thread; the error it raises there (exactly one), as text."""
    errors: list[BaseException] = []

    def leave() -> None:
        try:
            cap.__exit__(None, None, None)
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=leave)
    t.start()
    t.join()
    assert len(errors) == 1 and "exited in thread" in str(errors[0])
    return str(errors[0])


def _push_unseen_pair() -> None:
    """A pair pushed from C++ (not through ``saved_tensors_hooks``): memaudit cannot see what it saves."""
    torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t.clone(), lambda t: t)


def test_a_capture_exited_in_another_thread_still_reads_its_own_region() -> None:
    """Sequence numbers are per thread: the region of the thread that entered ends in that thread, not
    at the exiting thread's count, so a save no hook saw inside the capture still makes it incomplete."""
    lin, x = setup()
    lin(x).tanh()  # this thread's sequence numbers are past those of a new thread
    cap = capture()
    cap.__enter__()
    y = lin(x).tanh()
    _push_unseen_pair()
    try:
        w = lin(x).exp()
    finally:
        torch._C._autograd._pop_saved_tensors_default_hooks()
    _exit_in_another_thread(cap)
    case = cap.report(outputs=[y, w])
    assert not case.complete
    assert {r.op for r in case.rows if r.via == "unhooked"} == {"AddmmBackward0", "ExpBackward0"}
    assert sum(r.via == "hook" for r in case.rows) == 2  # y's: addmm's input and tanh's result
    with capture():  # pops the pair left behind
        pass


def test_a_graph_made_after_a_capture_exited_in_another_thread_is_not_the_captures() -> None:
    """The next capture entered in the thread that entered it pops the pair left behind and ends its
    region there: what that thread saves later, without hooks, is not the capture's."""
    lin, x = setup()
    lin(x).tanh()
    cap = capture()
    cap.__enter__()
    y = lin(x).tanh()
    _exit_in_another_thread(cap)
    with capture():
        pass
    z = lin(x).exp()  # no pair now: saved without hooks, after the capture
    case = cap.report(outputs=[y, z])
    assert case.complete, case.warnings
    assert [r.via for r in case.rows] == ["hook", "hook"]


class _TwoSteps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def test_the_capture_after_one_exited_in_another_thread_keeps_its_module_calls_apart() -> None:
    """A capture exited in another thread leaves this thread's module calls as they were (only this
    thread may reset them): the next capture entered here starts its own, so neither capture names
    a module by the other's calls."""
    left, right = _TwoSteps(), torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    x = torch.randn(2, 4, requires_grad=True)
    cap = capture()
    cap.__enter__()
    y = left(x)
    _exit_in_another_thread(cap)
    with capture() as again:
        z = right(x)
    assert cap.module_names() == {"_TwoSteps", "first", "second"}
    assert again.module_names() == {"Sequential", "0", "1"}
    assert {r.module for r in cap.report(outputs=y).rows} == {"first", "second"}
    assert {r.module for r in again.report(outputs=z).rows} == {"0", "1"}


def test_pool_thread_unattached_saves_are_unhooked_rows() -> None:
    truth = _thread_truth()
    pool = Pool()
    try:
        lin, x = setup()
        with capture() as cap:
            y = pool.run(lambda: lin(x).tanh())
        rep = cap.report(outputs=y)
    finally:
        pool.close()
    assert rep.rows and all(r.via == "unhooked" for r in rep.rows)
    assert sorted((r.shape, r.bytes) for r in rep.rows) == truth
    assert rep.complete is False
    assert any("AddmmBackward0 _saved_mat1" in w and "attach()" in w for w in rep.warnings)
    assert any("TanhBackward0 _saved_result" in w for w in rep.warnings)


def test_pool_thread_attached_saves_are_hooked_rows() -> None:
    truth = _thread_truth()
    pool = Pool()
    try:
        lin, x = setup()
        with capture() as cap:

            def job() -> torch.Tensor:
                with cap.attach():
                    return lin(x).tanh()

            y = pool.run(job)
        rep = cap.report(outputs=y)
    finally:
        pool.close()
    assert rep.rows and all(r.via == "hook" for r in rep.rows)
    assert sorted((r.shape, r.bytes) for r in rep.rows) == truth
    assert rep.complete is True


# ---- 9. ctx attributes ----------------------------------------------------------------------------


class WithCtxBuffer(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor) -> torch.Tensor:
        ctx.buf = torch.zeros(1024, 1024)
        ctx.save_for_backward(a)
        return a * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (a,) = ctx.saved_tensors
        return g * 2 + ctx.buf[0, 0]


def test_ctx_attribute_is_a_ctx_row_counted_in_saved_and_ctx_bytes() -> None:
    a = torch.randn(16, 8, requires_grad=True)
    with capture() as cap:
        y = WithCtxBuffer.apply(a)
    rep = cap.report(outputs=y)
    buf = one_row(rep, "WithCtxBufferBackward", "ctx.buf")
    assert (buf.via, buf.bytes, buf.shape, buf.resides) == ("ctx", 1024 * 1024 * F32, [1024, 1024], "device")
    saved = one_row(rep, "WithCtxBufferBackward", "saved_tensors[0]")
    assert (saved.via, saved.bytes) == ("hook", 16 * 8 * F32)
    assert rep.totals.ctx_bytes == 4 * 1024 * 1024
    assert rep.totals.saved_bytes == 4 * 1024 * 1024 + 16 * 8 * F32


# ---- 10. parameters by storage --------------------------------------------------------------------


def test_addmm_weight_view_is_parameter() -> None:
    lin, x = setup(x_grad=True)
    with capture() as cap:
        y = lin(x)
    rep = cap.report(outputs=y)
    mat2 = one_row(rep, "AddmmBackward0", "_saved_mat2")
    assert (mat2.shape, mat2.is_parameter) == ([IN, OUT], True)
    assert one_row(rep, "AddmmBackward0", "_saved_mat1").is_parameter is False
    assert (rep.totals.parameter_bytes, rep.totals.saved_bytes) == (W_BYTES, X_BYTES)


class SavesWeightViews(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, inp: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # weight[0:2] is a view of the Parameter; w.detach()[2:4] only shares its storage.
        ctx.save_for_backward(inp, w[0:2], w.detach()[2:4])
        return inp * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        ctx.saved_tensors  # noqa: B018
        return g * 2, None


def test_rows_in_a_parameters_storage_are_parameters() -> None:
    lin, _ = setup()
    inp = torch.randn(4, 5, requires_grad=True)
    with capture() as cap:
        y = SavesWeightViews.apply(inp, lin.weight)
    rep = cap.report(outputs=y)
    op = "SavesWeightViewsBackward"
    assert one_row(rep, op, "saved_tensors[0]").is_parameter is False
    view, detached = one_row(rep, op, "saved_tensors[1]"), one_row(rep, op, "saved_tensors[2]")
    assert (view.bytes, view.storage_bytes, view.is_parameter) == (2 * IN * F32, W_BYTES, True)
    assert (detached.bytes, detached.storage_bytes, detached.is_parameter) == (2 * IN * F32, W_BYTES, True)
    assert (rep.totals.parameter_bytes, rep.totals.saved_bytes) == (W_BYTES, 4 * 5 * F32)


def test_dtensor_parameters_are_parameters(tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{tmp_path}/pg")
    try:
        mesh = DeviceMesh("cpu", [0])
        lin, x = setup()
        lin.weight = nn.Parameter(distribute_tensor(lin.weight.detach(), mesh, [Replicate()]))
        lin.bias = nn.Parameter(distribute_tensor(lin.bias.detach(), mesh, [Replicate()]))
        xd = distribute_tensor(x, mesh, [Replicate()]).requires_grad_()
        with capture() as cap:
            y = lin(xd)
        rep = cap.report(outputs=y)
        containers = [
            r for r in rep.rows if r.op == "AddmmBackward0" and r.saved_as == "_saved_mat2" and r.kind == "container"
        ]
        assert len(containers) == 1
        inside = [r for r in rep.rows if r.container_index == containers[0].index]
        assert inside and all(r.is_parameter for r in inside)
        assert sum(r.bytes for r in inside) == W_BYTES
        assert rep.totals.parameter_bytes == W_BYTES
        assert rep.totals.saved_bytes == X_BYTES
        assert rep.complete is True
    finally:
        dist.destroy_process_group()


# ---- 11. several steps in one capture --------------------------------------------------------------


def test_many_steps_leave_only_the_last_forward() -> None:
    lin, x = setup()
    log = SavedLog()
    with log.active():
        probe = lin(x).tanh().sum()
    per_forward, per_forward_bytes = len(log.packed), log.saved_bytes()
    del probe
    assert (per_forward, per_forward_bytes) == (2, X_BYTES + H_BYTES)

    with capture() as cap:
        for _ in range(10):
            lin(x).tanh().sum().backward()
        y = lin(x).tanh().sum()
    rep = cap.report(outputs=y)
    assert len(rep.rows) == per_forward
    assert rep.totals.freed_rows == len(rep.freed) == 10 * per_forward
    assert rep.totals.saved_bytes == per_forward_bytes


# ---- 12. report after backward with a Python Function ---------------------------------------------


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return g * b, g * a


def test_report_after_backward_lists_released_rows_as_freed() -> None:
    a = torch.randn(6, 7, requires_grad=True)
    b = torch.randn(6, 7, requires_grad=True)
    log = SavedLog()
    with log.active():
        Square.apply(a, b).tanh().sum()
    truth = log.shapes_and_bytes()
    assert len(truth) == 3  # a, b and tanh's result

    with capture() as cap:
        y = Square.apply(a, b).tanh().sum()
    y.backward()
    for rep in (cap.report(), cap.report(outputs=y)):
        assert rep.rows == []
        assert sorted((r.shape, r.bytes) for r in rep.freed) == truth
        assert rep.totals.saved_bytes == 0
        assert rep.totals.freed_bytes == sum(n for _, n in truth)


# ---- 13. outputs ----------------------------------------------------------------------------------


def test_saved_result_that_is_the_output_aliases_it() -> None:
    lin, x = setup(x_grad=True)
    with capture() as cap:
        y = lin(x).relu()
    rep = cap.report(outputs=y)
    relu = one_row(rep, "ReluBackward0", "_saved_result")
    assert (relu.aliases_output, relu.bytes) == (True, H_BYTES)
    assert rep.totals.output_bytes == N * OUT * F32
    addmm = [r for r in rep.rows if r.op == "AddmmBackward0"]
    assert {r.saved_as for r in addmm} == {"_saved_mat1", "_saved_mat2"}
    assert not any(r.aliases_output for r in addmm)


# ---- exceptions -----------------------------------------------------------------------------------


def test_hooks_removed_after_exception_inside_capture() -> None:
    assert top_hooks() is None
    lin, x = setup()
    with pytest.raises(KeyError, match="inside"):
        with capture():
            with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
                lin(x).tanh()
                raise KeyError("inside")
    assert top_hooks() is None


def test_exception_in_users_pack_hook_propagates_unchanged() -> None:
    err = ValueError("pack refused")

    def refuse(t: torch.Tensor) -> torch.Tensor:
        raise err

    lin, x = setup()
    with pytest.raises(ValueError) as plain:
        with torch.autograd.graph.saved_tensors_hooks(refuse, lambda t: t):
            lin(x).tanh()
    with pytest.raises(ValueError) as under:
        with capture():
            with torch.autograd.graph.saved_tensors_hooks(refuse, lambda t: t):
                lin(x).tanh()
    assert under.value is err
    assert type(under.value) is type(plain.value) and str(under.value) == str(plain.value)
    assert top_hooks() is None


# ---- identity of what comes back -------------------------------------------------------------------


class KeepsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a)
        return a * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (a,) = ctx.saved_tensors
        SEEN.append(getattr(a, "tag", None))
        return g * 2


SEEN: list[Any] = []


def test_saved_input_comes_back_as_under_any_hook_pair() -> None:
    """PyTorch rebuilds a saved tensor that requires grad whenever any hook pair is active (so
    attributes set on it are gone in backward); memaudit adds no difference to a plain identity pair."""

    def identity_pair() -> Any:
        return torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)

    SEEN.clear()
    for ctx in (contextlib.nullcontext, identity_pair, capture):
        x = torch.randn(3, requires_grad=True)
        with ctx():
            h = x.sin()
            h.tag = "mine"
            y = KeepsInput.apply(h)
        del h
        y.sum().backward()
    assert SEEN == ["mine", None, None]


def test_copy_of_a_parameter_kept_by_a_pair_is_not_parameter_memory() -> None:
    lin, x = setup(x_grad=True)
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(_half_pack, _half_unpack):
            y = lin(x)
    rep = cap.report(outputs=y)
    mat2 = one_row(rep, "AddmmBackward0", "_saved_mat2")
    assert not mat2.is_parameter and mat2.storage_bytes == OUT * IN * F16
    assert rep.totals.parameter_bytes == 0
    assert rep.totals.saved_bytes == (N * IN + OUT * IN) * F16


# ---- module names (around Module.__call__) --------------------------------------------------------


def _global_module_hooks() -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    from torch.nn.modules import module as m

    return (
        list(m._global_forward_pre_hooks),
        list(m._global_forward_hooks),
        list(m._global_forward_hooks_always_called),
        list(m._global_forward_hooks_with_kwargs),
    )


class _Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(5)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(3))
        self.norm = nn.LayerNorm(16)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = x + b(self.norm(x))
        return x


def test_module_tracking_ends_with_the_capture_also_on_exceptions() -> None:
    """Module calls run memaudit's code from the first capture that names modules to the last one's
    end (nested captures, a thread attached meanwhile, a block that raises), and torch's own
    after; no global module hook is registered at any time."""
    call = torch.nn.Module.__dict__["__call__"]
    code = call.__code__
    before = _global_module_hooks()
    model = _Nested()
    x = torch.randn(4, 16)
    with capture():
        assert call.__code__ is not code and _global_module_hooks() == before
        with capture():  # nested: kept until the outer capture ends
            model(x)
        assert call.__code__ is not code
        t = threading.Thread(target=lambda: model(x))  # attached: its exit does not end it
        t.start()
        t.join()
        assert call.__code__ is not code
    assert call.__code__ is code and _global_module_hooks() == before
    with pytest.raises(ZeroDivisionError), capture():
        model(x)
        1 / 0  # noqa: B018
    assert call.__code__ is code and _global_module_hooks() == before
    with pytest.raises(ZeroDivisionError), capture(modules=False):
        assert call.__code__ is code
        1 / 0  # noqa: B018


def test_outputs_and_gradients_identical_with_and_without_module_names() -> None:
    model = _Nested()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(6), requires_grad=True)
    y0 = model(x)
    y0.sum().backward()
    plain = grads(x, *model.parameters())
    model.zero_grad(set_to_none=True)
    x.grad = None
    with capture(stack=True) as cap:
        y1 = model(x)
    assert {r.module for r in cap.report(outputs=y1).rows} >= {"blocks.0.0", "blocks.2.2", "norm"}
    assert torch.equal(y0, y1)
    y1.sum().backward()
    assert_bitwise_equal(grads(x, *model.parameters()), plain)


def test_users_module_hooks_still_run_and_still_change_outputs() -> None:
    from torch.nn.modules.module import register_module_forward_hook

    calls: list[str] = []
    lin, x = setup()
    handle = register_module_forward_hook(lambda m, a, out: calls.append("global") or out * 2)
    local = lin.register_forward_hook(lambda m, a, out: calls.append("local") or out + 1)
    try:
        plain = lin(x)
        with capture():
            captured = lin(x)
    finally:
        handle.remove()
        local.remove()
    assert calls == ["global", "local"] * 2
    assert torch.equal(plain, captured)


def test_exception_in_forward_is_the_same_exception() -> None:
    err = KeyError("in forward")

    class Raises(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise err

    outer = nn.Sequential(nn.Linear(4, 4), Raises())
    with capture(), pytest.raises(KeyError) as info:
        outer(torch.randn(2, 4))
    assert info.value is err


def test_module_names_keep_no_module_alive() -> None:
    model = _Nested()
    ref = weakref.ref(model)
    x = torch.randn(4, 16)
    with capture() as cap:
        model(x)
    rep = cap.report(include_freed=True)
    assert "blocks.1.0" in {r.module for r in rep.rows}
    gc.disable()
    try:
        del model
        assert ref() is None  # refcounting alone: the capture and its report hold names only
    finally:
        gc.enable()
