"""A module compiled with ``torch.compile`` runs compiled under ``capture()``: the same graphs, graph
breaks and compiled frames as bare, whether it was compiled before the capture or inside it, and
nothing changes after the capture ends.

Ground truth: the same program run bare (the graphs Dynamo hands a counting backend, its
graph-break and frame counters), and a saved-tensors pair of the test's own around the compiled
module (what the compiled program saves); never memaudit itself.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import warnings
from typing import Any

import pytest
import torch
import torch.nn as nn

from memaudit.capture import capture

pytest.importorskip("torch._dynamo")
import torch._dynamo  # noqa: E402
import torch._dynamo.utils  # noqa: E402
import torch._subclasses.fake_tensor  # noqa: E402


class Breaks(nn.Module):
    """Two Linear layers with a graph break between them: code runs eagerly inside a compiled call."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.b(h))


def model(kind: str) -> tuple[Any, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    if kind == "sequential":
        return nn.Sequential(nn.Linear(8, 8), nn.GELU()), x
    m = Breaks()
    if kind == "breaks":
        return m, x
    return (lambda t: m(t).relu()), x  # a compiled function that calls a module


def counters() -> dict[str, Any]:
    c = torch._dynamo.utils.counters
    return {"breaks": sum(c["graph_break"].values()), "frames": dict(c["frames"])}


def run(backend: str, kind: str, mode: str) -> dict[str, Any]:
    """Compile ``kind`` with ``backend``: ``bare``, or compiled ``before`` / ``inside`` a capture
    that calls it once; then call it again after (and run backward)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs: list[str] = []

    def counting(gm: torch.fx.GraphModule, example: Any) -> Any:
        from torch._dynamo.backends.registry import lookup_backend

        graphs.append(gm.code)
        return lookup_backend(backend)(gm, example)

    m, x = model(kind)
    compiled = torch.compile(m, backend=counting) if mode != "inside" else None
    out: dict[str, Any] = {}
    if mode == "bare":
        compiled(x)
    else:
        with capture() as cap:
            if compiled is None:
                compiled = torch.compile(m, backend=counting)
            y = compiled(x)
            case = cap.report(outputs=y)
        out["rows"] = case.rows
        out["saved"] = case.totals.saved_bytes
    out["during"] = (list(graphs), counters())
    y2 = compiled(x)
    y2.sum().backward()
    out["after"] = (list(graphs), counters())
    out["grad_fn"] = type(y2.grad_fn).__name__
    return out


BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["sequential", "breaks", "function"])
def test_compiled_graphs_breaks_and_frames_are_bare(backend: str, kind: str) -> None:
    bare = run(backend, kind, "bare")
    for mode in ("before", "inside"):
        got = run(backend, kind, mode)
        assert got["during"] == bare["during"], mode
        assert got["after"] == bare["after"], mode  # nothing recompiled after the capture, nothing new
        assert got["grad_fn"] == bare["grad_fn"]
        assert got["rows"], "the compiled program's saved tensors are rows"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_rows_are_what_the_compiled_program_saves(backend: str) -> None:
    torch._dynamo.reset()
    m, x = model("sequential")
    compiled = torch.compile(m, backend=backend)
    compiled(x)  # compiled bare
    packed: list[tuple[tuple[int, ...], int]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append((tuple(t.shape), t.numel() * t.element_size()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = compiled(x)
    assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
    with capture() as cap:
        y = compiled(x)
    case = cap.report(outputs=y)
    assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
    assert sorted((tuple(r.shape), r.bytes) for r in case.rows) == sorted(packed)
    assert {r.op for r in case.rows} == {"CompiledFunctionBackward"}
    assert {r.module for r in case.rows} == {"Sequential"}  # named by the module torch.compile wraps


def test_a_compiled_submodule_is_named_as_the_module_it_wraps() -> None:
    """A parent that registers ``torch.compile(block)``: the wrapper's call is named as the module it
    wraps (``block._orig_mod``, the name ``named_modules()`` gives it), so rows and module groups
    have one call of it, not the wrapper's and the wrapped module's."""
    torch._dynamo.reset()
    torch.manual_seed(0)

    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.GELU()), backend="eager")
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.block(x))

    m, x = Parent(), torch.randn(3, 4, requires_grad=True)
    m(x).sum().backward()  # compiled bare
    with capture() as cap:
        case = cap.report(outputs=m(x))
    assert sorted({r.module for r in case.rows}) == ["block._orig_mod", "head"]
    assert [(g.module, g.own_rows) for g in case.modules] == [("Parent", 0), ("block._orig_mod", 3), ("head", 2)]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_report_without_outputs_counts_what_a_module_compiled_inside_saves(backend: str) -> None:
    """Compiling inside the capture leaves fake tensors of AOTAutograd's tracing alive, with a
    grad_fn and saves made with hooks off; they hold no memory, so ``report()`` without outputs
    (what the pytest marker and fixture ask) counts what ``outputs`` count, complete."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m, x = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)), torch.randn(32, 64)
    truth = torch.compile(m, backend=backend)
    truth(x)
    packed: dict[int, int] = {}  # storage pointer -> bytes, parameters left out

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, nn.Parameter) and all(
            t.untyped_storage().data_ptr() != p.untyped_storage().data_ptr() for p in m.parameters()
        ):
            packed[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        keep = truth(x)
    assert packed and keep.grad_fn is not None
    torch._dynamo.reset()
    compiled = torch.compile(m, backend=backend)
    with capture() as cap:
        y = compiled(x)  # compiled here
    fake = torch._subclasses.fake_tensor.FakeTensor
    fakes = [o for o in gc.get_objects() if issubclass(type(o), fake) and o.grad_fn is not None]
    assert fakes, "compile leaves fake tensors with a grad_fn (what this test is about)"
    with_outputs, without = cap.report(outputs=y), cap.report()
    assert with_outputs.totals.saved_bytes == without.totals.saved_bytes == sum(packed.values())
    assert with_outputs.complete and without.complete, without.warnings
    assert not [r for r in without.rows if r.via == "unhooked"]


def test_rows_saved_while_another_thread_compiles_name_their_module() -> None:
    """While Dynamo compiles, memaudit's global module hooks are out of torch's dicts in every
    thread; a save another thread makes meanwhile still names its module call, read off that
    thread's Python stack: every call is named, ``0#k`` and ``1#k`` for the k-th call, during the
    compile as before and after it."""
    torch._dynamo.reset()
    other = torch.compile(nn.Sequential(nn.Linear(16, 16), nn.ReLU()), backend="aot_eager")
    seq, x = nn.Sequential(nn.Linear(32, 32), nn.Tanh()), torch.randn(4, 32)
    ys: list[torch.Tensor] = []
    window: list[int] = []  # len(ys) when the compile started and when it ended

    def mark(args: Any) -> None:
        window.append(len(ys))

    callbacks = torch._dynamo.callback_handler
    callbacks.register_start_callback(mark)
    callbacks.register_end_callback(mark)
    try:
        with capture() as cap:
            t = threading.Thread(target=lambda: other(torch.randn(2, 16)))  # its first call compiles
            t.start()
            while t.is_alive():
                ys.append(seq(x))
            t.join()
            after = [seq(x) for _ in range(20)]
    finally:
        callbacks.remove_start_callback(mark)
        callbacks.remove_end_callback(mark)
    assert len(window) >= 2 and window[-1] - window[0] >= 2, window  # calls ran while it compiled
    case = cap.report(outputs=ys + after)
    mine = [r for r in case.rows if r.op in ("AddmmBackward0", "TanhBackward0")]
    calls = len(ys) + len(after)
    assert len(mine) == 2 * calls  # Linear keeps its input, Tanh its result: one each per call
    for op, prefix in (("AddmmBackward0", "0"), ("TanhBackward0", "1")):
        names = [r.module for r in mine if r.op == op]
        assert all(n == prefix or str(n).startswith(prefix + "#") for n in names), names  # its own module
        index = sorted(1 if n == prefix else int(str(n).split("#")[1]) for n in names)
        assert len(set(index)) == calls, index  # every call its own index: none shared
        # in order from 1; where the compile ended, one call index may go unused (docs/guides/capture.md)
        assert index[0] == 1 and index[-1] <= calls + 1, index
    assert not any("while torch.compile compiled in another" in w for w in case.warnings), case.warnings


def test_a_module_compiled_after_the_capture_is_compiled_as_bare() -> None:
    def history(under_capture: bool) -> tuple[list[str], dict[str, Any]]:
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        m, x = model("breaks")
        first = torch.compile(m, backend="aot_eager")
        if under_capture:
            with capture():
                first(x)
        else:
            first(x)
        graphs: list[str] = []

        def counting(gm: torch.fx.GraphModule, example: Any) -> Any:
            graphs.append(gm.code)
            return gm.forward

        later, x = model("breaks")  # a new module, compiled after the capture ended
        torch.compile(later, backend=counting)(x)
        return graphs, counters()

    assert history(True) == history(False)


def test_no_global_hook_warning_from_memaudits_hooks() -> None:
    torch._dynamo.reset()
    m, x = model("sequential")
    compiled = torch.compile(m, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with capture():
            compiled(x)

    def user_hook(mod: nn.Module, args: Any) -> None:
        return None

    handle = torch.nn.modules.module.register_module_forward_pre_hook(user_hook)
    try:  # with a global hook of the user's, torch warns bare, and so it does under a capture
        with pytest.warns(UserWarning, match="global hooks"):
            compiled(x)
        with pytest.warns(UserWarning, match="global hooks"), capture():
            compiled(x)
    finally:
        handle.remove()


_FRESH = """
import json, sys, torch, torch.nn as nn
import memaudit
assert "torch._dynamo" not in sys.modules
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
x = torch.randn(4, 8, requires_grad=True)
graphs = []
def counting(gm, example):
    graphs.append(gm.code)
    return gm.forward
fn = lambda t: m(t).relu()
if sys.argv[1] == "capture":
    with memaudit.capture() as cap:
        y = torch.compile(fn, backend=counting)(x)   # Dynamo is first imported here
else:
    y = torch.compile(fn, backend=counting)(x)
import torch._dynamo.utils as du
print(json.dumps({"graphs": graphs, "frames": dict(du.counters["frames"]), "meta_path": len(sys.meta_path)}))
"""


def test_dynamo_imported_inside_the_capture_compiles_as_bare(tmp_path: Any) -> None:
    def go(mode: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-c", _FRESH, mode], capture_output=True, text=True, timeout=300, check=True, cwd=tmp_path
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert go("capture") == go("bare")


def test_a_save_while_the_hooks_leave_for_a_compile_names_its_own_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The instant between memaudit's module hooks leaving torch's dicts (Dynamo starts compiling in
    another thread) and the rest of that start: a save made then in this thread, in a call no hook
    saw start, names that call (read off the stack), never the call around it."""
    from memaudit.capture import modules

    removed, saved = threading.Event(), threading.Event()
    remove = modules._remove

    def remove_then_wait() -> None:  # the compiling thread, right after the hooks left the dicts
        remove()
        removed.set()
        saved.wait(30)

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            compiling = threading.Thread(target=modules._hide)  # what Dynamo's start callback calls
            compiling.start()
            assert removed.wait(30)
            y = self.inner(x).tanh()  # no hook runs for inner: it starts while the hooks are out
            saved.set()
            compiling.join()
            modules._show()  # and the compile's end
            return y

    monkeypatch.setattr(modules, "_remove", remove_then_wait)
    with capture() as cap:
        y = Outer()(torch.randn(2, 8, requires_grad=True))
    monkeypatch.setattr(modules, "_remove", remove)
    rows = cap.report(outputs=y).rows
    assert {r.module for r in rows if r.op == "AddmmBackward0"} == {"inner"}, [(r.op, r.module) for r in rows]
    assert {r.module for r in rows if r.op == "TanhBackward0"} == {"Outer"}
