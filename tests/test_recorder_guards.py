"""capture() internals that decide rows and bytes, where the mutation run (bench/mutate.py, issue 29)
found no test: per-thread counters, the warnings of a report whose rows were all released or kept
out of sight, and parameters found through a shared storage on the labelled path."""

from __future__ import annotations

import pytest
import torch

from memaudit.capture import capture, hooks


def test_a_capture_leaves_its_threads_counters_as_it_found_them() -> None:
    st = hooks.state()
    before = (st.sources, st.tracking)
    with capture(stack=True, modules=True):
        assert (st.sources, st.tracking) == (before[0] + 1, before[1] + 1)
        with capture(stack=True, modules=False):
            assert (st.sources, st.tracking) == (before[0] + 2, before[1] + 1)
        with capture(stack=False, modules=True):
            assert (st.sources, st.tracking) == (before[0] + 1, before[1] + 2)
    assert (st.sources, st.tracking) == before
    with pytest.raises(ZeroDivisionError), capture(stack=True, modules=True):
        1 / 0  # noqa: B018
    assert (st.sources, st.tracking) == before


def test_only_a_report_whose_rows_were_all_released_says_so() -> None:
    x = torch.randn(8, requires_grad=True)
    with capture() as cap:
        y = (x * 2).sin().sum()
    kept = cap.report(outputs=y)
    assert kept.rows and not any("already released" in w for w in kept.warnings)
    y.backward()
    gone = cap.report()
    assert not gone.rows and gone.freed
    assert any(w.startswith(f"all {len(gone.freed)} saved buffers were already released") for w in gone.warnings)
    with capture() as nothing:
        torch.randn(3) + 1
    empty = nothing.report()
    assert not empty.rows and not empty.freed and empty.warnings == []


def test_a_pair_that_keeps_what_memaudit_cannot_see_makes_the_case_incomplete() -> None:
    kept: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> int:
        kept[len(kept)] = t
        return len(kept) - 1  # an opaque handle

    x = torch.randn(4, requires_grad=True)
    with capture() as cap, torch.autograd.graph.saved_tensors_hooks(pack, kept.__getitem__):
        y = x.sin()
    case = cap.report(outputs=y)
    assert case.rows and {r.resides for r in case.rows} == {"unknown"}
    assert not case.complete and any("which keeps no tensor memaudit can see" in w for w in case.warnings)
    with capture() as plain:
        z = x.sin()
    assert plain.report(outputs=z).complete  # without the pair: complete, nothing unknown


def test_a_labelled_view_of_a_weight_is_parameter_memory() -> None:
    """The labelled path (every record through the general row builder): a saved view of a weight
    that autograd did not flag is found in the weight's storage and counted as a parameter."""
    w = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(8, requires_grad=True)
    with capture() as cap:
        cap.label(x, "x")
        view = w[0]  # a view: not itself a Parameter
        y = (view * x).sum() + (w @ x).sum()  # MulBackward0 saves the view, MvBackward0 the weight itself
    case = cap.report(outputs=y)
    in_w = [r for r in case.rows if r.storage_bytes == w.numel() * 4]
    assert sorted(r.bytes for r in in_w) == [32, 256] and all(r.is_parameter for r in in_w)
    assert case.totals.parameter_bytes == 256
    assert case.totals.saved_bytes == case.totals.physical_bytes - 256
