"""capture() internals that decide rows and bytes, where the mutation run (bench/mutation/mutate.py)
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


@pytest.mark.parametrize(
    ("depth", "resides"), [(1, "device"), (4, "device"), (5, "unknown")]
)  # the tensor inside depth-1 containers
def test_a_pairs_payload_is_searched_three_levels_deep(depth: int, resides: str) -> None:
    """What a user pair keeps is looked for in lists, tuples and dicts up to three levels down; deeper,
    memaudit cannot tell where the tensor lives and says so."""

    def wrap(t: torch.Tensor) -> object:
        x: object = t.clone()
        for level in range(depth - 1):
            x = [x] if level % 2 else {"k": x}
        return x

    def unwrap(x: object) -> torch.Tensor:
        while not isinstance(x, torch.Tensor):
            x = x[0] if isinstance(x, list) else x["k"]  # type: ignore[index]
        return x

    a = torch.randn(5, requires_grad=True)
    with capture() as cap, torch.autograd.graph.saved_tensors_hooks(wrap, unwrap):
        y = a.sin()
    case = cap.report(outputs=y)
    assert {r.resides for r in case.rows} == {resides}
    assert case.complete is (resides != "unknown")


def test_buffers_of_a_container_that_is_not_a_parameter_stay_saved_memory() -> None:
    """A wrapper subclass saved whole (a container row and its buffers): nothing in it is a parameter."""
    from torch.utils._python_dispatch import return_and_correct_aliasing  # noqa: F401 - needs the dispatch utilities

    class Pair(torch.Tensor):
        @staticmethod
        def __new__(cls, a: torch.Tensor, b: torch.Tensor) -> Pair:
            return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

        def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
            self.a, self.b = a, b

        def __tensor_flatten__(self) -> tuple[list[str], None]:
            return ["a", "b"], None

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            def unwrap(x: object) -> object:
                return x.a if isinstance(x, Pair) else x

            return func(*[unwrap(a) for a in args], **(kwargs or {}))

    class SaveWhole(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, obj):  # noqa: ANN001, ANN205
            ctx.save_for_backward(obj)
            return x * 2

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            return g, None

    p = Pair(torch.randn(4), torch.randn(4))
    x = torch.randn(2, requires_grad=True)
    with capture() as cap:
        y = SaveWhole.apply(x, p)
    case = cap.report(outputs=y)
    assert [r.kind for r in case.rows] == ["container", "tensor", "tensor"]
    assert not any(r.is_parameter for r in case.rows)
    assert case.totals.saved_bytes == case.totals.physical_bytes == 32


def test_the_allocator_check_is_given_every_device_storage_the_rows_name() -> None:
    seen: list[dict] = []

    class Recorder:
        def result(self, storages: dict, outputs: object) -> dict:
            seen.append(storages)
            return {"hidden_bytes": 0}

        def stop(self) -> None:
            pass

    a = torch.randn(6, requires_grad=True)
    with capture() as cap:
        cap._allocator = Recorder()
        y = (a * 2).sin()
    case = cap.report(outputs=y)
    assert case.allocator == {"hidden_bytes": 0}
    assert sorted(n for _, n in seen[0].values()) == sorted(
        {r.storage: r.storage_bytes for r in case.rows if r.storage}.values()
    )
    assert len(seen[0]) == len({r.storage for r in case.rows if r.storage})


@pytest.mark.parametrize("kind", ["list", "tuple", "dict"])
@pytest.mark.parametrize(("levels", "resides"), [(3, "device"), (4, "unknown")])
def test_a_pairs_payload_of_one_container_kind_is_searched_three_levels_deep(
    kind: str, levels: int, resides: str
) -> None:
    """The same limit whatever the containers are: three lists (tuples, dicts) deep is found, four is not."""

    def wrap(t: torch.Tensor) -> object:
        x: object = t.clone()
        for _ in range(levels):
            x = [x] if kind == "list" else (x,) if kind == "tuple" else {"k": x}
        return x

    def unwrap(x: object) -> torch.Tensor:
        while not isinstance(x, torch.Tensor):
            x = x["k"] if isinstance(x, dict) else x[0]  # type: ignore[index]
        return x

    a = torch.randn(5, requires_grad=True)
    with capture() as cap, torch.autograd.graph.saved_tensors_hooks(wrap, unwrap):
        y = a.sin()
    case = cap.report(outputs=y)
    assert {r.resides for r in case.rows} == {resides}
    assert case.complete is (resides != "unknown")
