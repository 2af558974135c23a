"""Edges of building rows and of a capture's session that the mutation run found unguarded: each
test states what memaudit does there, checked against a pair of the test's own, PyTorch, or a
stand-in whose answer is known; never memaudit against itself.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from memaudit.capture import Capture, capture, hooks
from memaudit.capture.rows import RowBuilder, short_path


def _own_bytes(fn: Any, params: list[torch.Tensor]) -> int:
    """Non-parameter storages ``fn`` saves, by a pair of the test's own."""
    ptrs = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in ptrs:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        keep = fn()
    del keep
    return sum(seen.values())


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)), torch.randn(4, 8, requires_grad=True)


# ---- rows named after backward: each call's saves in order ---------------------------------------------
class _Plugin:
    """A classifier that knows nothing: rows take the path a plugin's annotation needs."""

    def install(self) -> None: ...
    def uninstall(self) -> None: ...
    def resides(self, kind: Any, payload: Any) -> None: ...
    def expand(self, t: Any) -> None: ...
    def annotate(self, rows: list[Any], cap: Any) -> list[Any]:
        return rows


@pytest.mark.parametrize("path", ["plain", "plugin", "labels"])
def test_rows_released_before_any_report_are_named_by_call_and_position(path: str) -> None:
    """Never named by a walk (backward ran first): each row is ``module:saved[k]``, k its place
    among its module call's saves, whichever way the rows are built."""
    m, x = _mlp()
    truth: list[str] = []
    frames: list[str] = []

    def note_call(mod: nn.Module, args: Any) -> None:
        frames.append({id(c): n for n, c in m.named_children()}[id(mod)])

    counts: dict[str, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        name = frames[-1]
        truth.append(f"{name}:saved[{counts.get(name, 0)}]")
        counts[name] = counts.get(name, 0) + 1
        return t

    handles = [c.register_forward_pre_hook(note_call) for c in m.children()]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(x)
    for h in handles:
        h.remove()
    with capture(plugins=[_Plugin()] if path == "plugin" else []) as cap:
        if path == "labels":
            cap.label(torch.empty(1), "unrelated")  # every record takes the general path
        m(x).sum().backward()
    case = cap.report()
    assert case.rows == [] and [r.operand for r in case.freed] == truth


def test_a_label_given_after_report_names_a_released_row() -> None:
    m, x = _mlp()
    with capture() as cap:
        m(x).sum().backward()
    case = cap.report()
    cap.label(x, "input")
    assert [r.operand for r in case.freed if r.shape == [4, 8]] == ["input"]


def test_what_a_pass_through_pair_inside_the_capture_keeps_is_the_tensor_itself() -> None:
    """Not a copy: no note, parameters stay parameters, the same bytes as without the pair."""
    m, x = _mlp()
    with capture() as bare:
        y0 = m(x)
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = m(x)
    case, plain = cap.report(outputs=y), bare.report(outputs=y0)
    assert all(r.note is None and r.resides == "device" for r in case.rows)
    assert [r.is_parameter for r in case.rows] == [r.is_parameter for r in plain.rows] and any(
        r.is_parameter for r in case.rows
    )
    assert case.totals.saved_bytes == plain.totals.saved_bytes == _own_bytes(lambda: m(x), list(m.parameters()))


def test_rows_kept_on_the_host_are_not_device_storages() -> None:
    """A pair that keeps a host tensor for a tensor of another device (here meta): the row resides
    on the host, and what the allocator check compares with device memory leaves it out."""
    w = torch.randn(4, 4, device="meta", requires_grad=True)
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: torch.empty(t.shape, dtype=t.dtype), lambda t: t):
            y = (w * w).sum()
    builder = RowBuilder(cap, y)
    builder.add_records(cap.records)
    assert {r.resides for r in builder.rows} == {"host"}
    assert builder.device_storages() == {}


def test_a_storage_without_a_data_pointer_stands_for_itself() -> None:
    class NoPointer:
        device = torch.device("cpu")

        def data_ptr(self) -> int:
            raise RuntimeError("no data pointer")

        def nbytes(self) -> int:
            return 64

    import weakref

    a, b = NoPointer(), NoPointer()
    with capture() as cap:
        pass
    builder = RowBuilder(cap, None)
    ra, rb = weakref.ref(a), weakref.ref(b)
    assert builder.canon(ra) is ra and builder.canon(rb) is rb


def test_a_source_outside_the_working_directory_is_never_relative_to_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shown = short_path(torch.__file__)
    assert not shown.startswith("..") and not os.path.isabs(shown) and shown.endswith("__init__.py")


# ---- the session -----------------------------------------------------------------------------------
def test_a_capture_that_names_early_leaves_the_threads_counter_as_it_found_it() -> None:
    st = hooks.state()
    before = st.naming
    with Capture(plugins=[], name_early=True):
        assert st.naming == before + 1
    assert st.naming == before


def test_a_capture_attached_again_in_its_own_thread_reports_both_regions() -> None:
    m, x = _mlp()
    with capture() as cap:
        y1 = m(x)
        with cap.attach():  # a second region in this thread
            y2 = m(x)
    case = cap.report(outputs=[y1, y2])
    assert case.complete and all(r.via == "hook" for r in case.rows)
    assert case.totals.saved_bytes == 2 * _own_bytes(lambda: m(x), list(m.parameters())) - x.untyped_storage().nbytes()


def test_a_graph_made_after_the_capture_in_its_thread_is_not_the_captures() -> None:
    """Another thread ran during the capture (outputs may be another thread's graph), but a root
    this thread made after the capture ended is this thread's own: not read, not unhooked."""
    m, x = _mlp()
    done = threading.Event()
    t = threading.Thread(target=done.wait)  # alive during the capture, never attached to it
    t.start()
    try:
        with capture() as cap:
            y = m(x)
        z = y.exp()  # the first node made after the capture
        case = cap.report(outputs=z)
    finally:
        done.set()
        t.join()
    assert case.complete, case.warnings
    assert all(r.via == "hook" for r in case.rows)
    assert case.totals.saved_bytes == _own_bytes(lambda: m(x), list(m.parameters()))


class _Passing(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_a_checkpoint_under_a_dispatch_mode_memaudit_cannot_read_is_incomplete() -> None:
    m, x = _mlp()
    with capture() as cap:
        y = checkpoint(m, x, use_reentrant=False, context_fn=lambda: (_Passing(), _Passing()))
    case = cap.report(outputs=y)
    assert not case.complete and any("context_fn" in w for w in case.warnings)
    with capture() as plain:
        y = checkpoint(m, x, use_reentrant=False)
    assert plain.report(outputs=y).complete


def test_the_peak_is_one_step_when_each_step_is_released_before_the_next() -> None:
    m, x = _mlp()
    step = _own_bytes(lambda: m(x), list(m.parameters()))
    cap = Capture(plugins=[], track_peak=True)
    with cap:
        for _ in range(3):
            m(x).sum().backward()
    peak, alive = cap.peak()
    assert peak == step > 0
    assert alive and set(map(id, alive)) <= set(map(id, cap.records[: len(cap.records) // 3]))  # the first step's


class _Naming(_Plugin):
    """A classifier that names every row."""

    def annotate(self, rows: list[Any], cap: Any) -> list[Any]:
        import dataclasses

        return [dataclasses.replace(r, operand=f"plugin.{i}") for i, r in enumerate(rows)]


def test_a_label_given_after_report_leaves_what_a_classifier_named() -> None:
    m, x = _mlp()
    with capture(plugins=[_Naming()]) as cap:
        y = m(x)
    case = cap.report(outputs=y)
    assert all(r.operand and r.operand.startswith("plugin.") for r in case.rows)
    cap.label(x, "input")
    assert all(r.operand and r.operand.startswith("plugin.") for r in case.rows)


def test_report_without_outputs_reads_any_payload_a_pair_keeps() -> None:
    """A pair inside the capture may keep any object, even a dead weak proxy: report() without
    outputs walks from what it can and never raises."""
    import weakref

    class Box:
        pass

    x = torch.randn(4, requires_grad=True)
    with capture() as cap:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: weakref.proxy(Box()), lambda p: x):
            y = (x * x).sum()
    case = cap.report()
    assert len(case.rows) == 2 and not case.complete  # what the pair keeps is not a tensor memaudit can see
    del y
