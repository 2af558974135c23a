"""Where users really run: thread pools, nested tensors, Functions that clear their saved tensors,
PyTorch's own errors, hooks disabled, asyncio, and graphs built before the capture.

Ground truth: the same code bare, under a plain pass-through pair of the test's own (``control``:
what PyTorch does under *any* hook pair), or shapes and dtypes chosen here; never memaudit itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn as nn

from memaudit.capture import capture


@contextlib.contextmanager
def control() -> Iterator[None]:
    """A plain pass-through pair: what PyTorch does under any hook pair."""
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        yield


def outcome(fn: Callable[[], Any]) -> tuple[str, str]:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return type(exc).__name__, str(exc)
    return "ok", ""


def top_hooks() -> Any:
    return torch._C._autograd._top_saved_tensors_default_hooks(False)


def global_module_hooks() -> int:
    from torch.nn.modules import module as m

    return len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)


# ---- a pool outlives the capture ------------------------------------------------------------------
def test_a_pool_started_inside_a_capture_keeps_nothing_after_it() -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        lin, x = nn.Linear(8, 16), torch.randn(4, 8)
        with capture() as cap:
            y = pool.submit(lambda: lin(x).tanh()).result()  # the pool's worker starts here
        case = cap.report(outputs=y)
        assert case.complete and {r.op for r in case.rows} == {"AddmmBackward0", "TanhBackward0"}

        def after() -> tuple[Any, tuple[str, str], int]:
            grad = outcome(lambda: torch.func.grad(lambda t: t.sin().sum())(torch.randn(3)))
            return top_hooks(), grad, global_module_hooks()

        assert pool.submit(after).result() == (None, ("ok", ""), 0)
    finally:
        pool.shutdown()


def test_a_task_submitted_inside_a_capture_to_an_older_pool_is_captured() -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        pool.submit(lambda: None).result()  # the worker runs before the capture
        lin, x = nn.Linear(8, 16), torch.randn(4, 8)
        with capture() as cap:
            y = pool.submit(lambda: lin(x).tanh()).result()
        case = cap.report(outputs=y)
        assert case.complete and all(r.via == "hook" for r in case.rows)
        assert case.totals.saved_bytes == 4 * 8 * 4 + 4 * 16 * 4  # x and tanh's result; the weight is a parameter
        assert pool.submit(top_hooks).result() is None
    finally:
        pool.shutdown()


# ---- a tensor the hook cannot describe ----------------------------------------------------------
def test_strided_nested_tensor_forward_runs_and_is_counted_by_storage() -> None:
    a, b = torch.randn(2, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)

    def forward() -> torch.Tensor:
        return torch.nested.as_nested_tensor([a, b]).sin()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the nested-tensor prototype warning (once per process)
        bare = forward()
        with capture() as cap:
            y = forward()
    assert torch.equal(torch.cat([t for t in y.unbind()]), torch.cat([t for t in bare.unbind()]))
    case = cap.report(outputs=y)
    nested = [r for r in case.rows if r.container == "nested"]
    assert [r.bytes for r in nested] == [(2 + 4) * 3 * 4]  # sin saves its nested input: 18 floats
    assert not any("could not be described" in w for w in case.warnings)


def test_a_tensor_whose_shape_raises_becomes_an_unknown_row() -> None:
    from memaudit.capture.hooks import Layer, new_record

    class Odd:
        @property
        def shape(self) -> Any:
            raise RuntimeError("no sizes")

        dtype = torch.float32

    saved, rec = new_record(None)
    Layer._odd(rec, Odd(), RuntimeError("boom"))  # must not raise
    assert rec.container["kind"] == "unknown" and rec.container["shape"] == [] and "boom" in rec.warning


# ---- report() reads without consuming ---------------------------------------------------------
class ClearsOnAccess(torch.autograd.Function):
    clear_saved_tensors_on_access = True

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * x


def test_report_does_not_use_up_a_clear_on_access_functions_one_read() -> None:
    def step(report: bool) -> torch.Tensor:
        x = torch.arange(3.0, requires_grad=True)
        with capture() as cap:
            y = ClearsOnAccess.apply(x)
            if report:
                case = cap.report(outputs=y)
                assert [r.saved_as for r in case.rows] == ["saved_tensors[0]"]
                cap.report()  # and without outputs
        y.sum().backward()
        return x.grad

    assert torch.equal(step(True), step(False))
    x = torch.arange(3.0, requires_grad=True)
    y = ClearsOnAccess.apply(x)
    y.sum().backward()
    assert torch.equal(step(True), x.grad)


# ---- PyTorch's own errors ---------------------------------------------------------------------
def _detached_inplace() -> None:
    a = torch.randn(5, requires_grad=True)
    b = a.clone()
    c = b * b
    b.detach_()
    c.sum().backward()


def test_detach_inplace_error_is_raised_as_bare() -> None:
    bare = outcome(_detached_inplace)
    assert bare[0] == "RuntimeError" and "detached in-place" in bare[1]
    with control():
        assert outcome(_detached_inplace) == ("ok", "")  # PyTorch skips the check under any pair
    with capture():
        assert outcome(_detached_inplace) == bare


def test_detach_inplace_of_a_custom_functions_input_is_fine_as_bare() -> None:
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return g * x

    def run() -> None:
        a = torch.randn(3, requires_grad=True)
        b = a.clone()
        c = Keep.apply(b)
        b.detach_()
        c.sum().backward()

    bare = outcome(run)
    with capture():
        assert outcome(run) == bare


@pytest.mark.parametrize("where", ["disable_saved_tensors_hooks", "torch.func.grad"])
def test_capture_where_hooks_are_disabled_raises_pytorchs_message(where: str) -> None:
    def enter(pair: Callable[[], Any]) -> tuple[str, str]:
        if where == "disable_saved_tensors_hooks":

            def run() -> None:
                with torch.autograd.graph.disable_saved_tensors_hooks("not here, says the user"), pair():
                    pass
        else:

            def run() -> None:
                def f(x: torch.Tensor) -> torch.Tensor:
                    with pair():
                        return x.sin().sum()

                torch.func.grad(f)(torch.randn(3))

        return outcome(run)

    expected = enter(control)
    assert expected[0] == "RuntimeError" and "INTERNAL ASSERT" not in expected[1]
    assert enter(capture) == expected
    assert top_hooks() is None and global_module_hooks() == 0
    with capture() as cap:  # and a capture after works
        y = torch.randn(3, requires_grad=True).exp()
    assert cap.report(outputs=y).rows


# ---- asyncio ----------------------------------------------------------------------------------
def test_interleaved_captures_in_two_tasks_are_refused_and_say_why() -> None:
    async def job(n: int, delay: float) -> int:
        with capture() as cap:
            x = torch.randn(n, 4, requires_grad=True)
            await asyncio.sleep(delay)
            y = x.exp()
            await asyncio.sleep(0.01)
            return cap.report(outputs=y).totals.saved_bytes

    async def main() -> list[Any]:
        return await asyncio.gather(job(8, 0.0), job(16, 0.002), return_exceptions=True)

    first, second = asyncio.run(main())
    assert first == 8 * 4 * 4  # exp's result only: the other task's forward is not in it
    assert isinstance(second, RuntimeError) and "asyncio task" in str(second) and "one after the other" in str(second)


def test_a_capture_in_a_task_records_only_its_own_context() -> None:
    async def other() -> torch.Tensor:
        await asyncio.sleep(0)
        return torch.randn(32, 4, requires_grad=True).exp()

    async def main() -> tuple[Any, Any]:
        t = asyncio.create_task(other())  # created before the capture: not its forward
        with capture() as cap:
            x = torch.randn(8, 4, requires_grad=True)
            await asyncio.sleep(0)
            y = x.exp()
            z = await t
        return cap.report(), (y, z)

    case, keep = asyncio.run(main())
    assert [r.shape for r in case.rows] == [[8, 4]]


def _own_pair_bytes(fn: Callable[[], Any], params: list[torch.Tensor]) -> int:
    """What ``fn`` saves, by storage and without parameters, under a pair of the test's own."""
    ptrs = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in ptrs:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        keep = fn()
    assert keep.grad_fn is not None
    return sum(seen.values())


@pytest.mark.parametrize(
    "how", ["run_in_executor(None)", "run_in_executor(pool)", "pool.submit", "threading.Thread", "to_thread"]
)
def test_a_forward_on_another_thread_inside_an_asyncio_task_is_recorded(how: str) -> None:
    """A capture entered in a task records its task's context only; a forward the task runs on a
    worker (a pool task or a thread started inside the capture) is that task's forward too."""
    torch.manual_seed(0)
    m, x = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)), torch.randn(32, 64)
    truth = _own_pair_bytes(lambda: m(x), list(m.parameters()))
    assert truth > 0

    async def main(pool: concurrent.futures.ThreadPoolExecutor) -> Any:
        loop = asyncio.get_running_loop()
        with capture() as cap:
            if how == "run_in_executor(None)":
                y = await loop.run_in_executor(None, m, x)
            elif how == "run_in_executor(pool)":
                y = await loop.run_in_executor(pool, m, x)
            elif how == "pool.submit":
                y = pool.submit(m, x).result()
            elif how == "threading.Thread":
                out: list[torch.Tensor] = []
                t = threading.Thread(target=lambda: out.append(m(x)))
                t.start()
                t.join()
                y = out[0]
            else:
                y = await asyncio.to_thread(m, x)
        return cap.report(outputs=y), y

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        case, _ = asyncio.run(main(pool))
    assert case.totals.saved_bytes == truth
    assert case.complete and all(r.via == "hook" for r in case.rows)


def test_a_worker_started_by_another_task_is_not_a_captures() -> None:
    """A pool task submitted by a task that did not enter the capture runs bare: the capture
    records its own task's forwards only (its report says another thread ran)."""
    torch.manual_seed(0)
    m, x = nn.Linear(8, 8), torch.randn(4, 8)

    async def main(pool: concurrent.futures.ThreadPoolExecutor) -> Any:
        loop = asyncio.get_running_loop()
        started = asyncio.Event()
        done = asyncio.Event()

        async def other() -> Any:
            await started.wait()
            y = await loop.run_in_executor(pool, m, x)
            done.set()
            return y

        job = asyncio.create_task(other())  # created before the capture: not its context
        with capture() as cap:
            started.set()
            await done.wait()
            mine = m(x)
        return cap.report(), await job, mine

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        case, theirs, mine = asyncio.run(main(pool))
    assert [r.shape for r in case.rows] == [[4, 8]]  # its own forward's input only
    assert theirs.grad_fn is not None


# ---- graphs from before the capture ------------------------------------------------------------
def _embed_then_block(enter: Callable[[], Any]) -> tuple[Any, Any]:
    torch.manual_seed(0)
    embed, block = nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 16), nn.GELU())
    h = embed(torch.randn(4, 8)).tanh()  # built before the capture
    with enter() as cap:
        y = block(h)
    return cap.report(outputs=y), y


def _bare_block_saves() -> int:
    """What block(h) saves, from a pair of the test's own: h (4x8) and gelu's input (4x16)."""
    torch.manual_seed(0)
    embed, block = nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 16), nn.GELU())
    h = embed(torch.randn(4, 8)).tanh()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, nn.Parameter) and not isinstance(t._base, nn.Parameter):
            seen[id(t.untyped_storage())] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(h)
    return sum(seen.values())


@pytest.mark.parametrize("other", ["daemon thread", "short thread inside", "inference mode"])
def test_graphs_built_before_the_capture_are_not_reported(other: str) -> None:
    stop = threading.Event()
    sleeper = threading.Thread(target=stop.wait, daemon=True)
    if other == "daemon thread":
        sleeper.start()

    @contextlib.contextmanager
    def enter() -> Iterator[Any]:
        if other == "inference mode":
            with torch.inference_mode():
                cap = capture().__enter__()
            try:
                yield cap
            finally:
                cap.__exit__(None, None, None)
            return
        with capture() as cap:
            if other == "short thread inside":
                t = threading.Thread(target=time.sleep, args=(0.001,))
                t.start()
                t.join()
            yield cap

    try:
        case, _ = _embed_then_block(enter)
    finally:
        stop.set()
    assert case.complete, case.warnings
    assert all(r.via == "hook" for r in case.rows)
    assert {r.op for r in case.rows} == {"AddmmBackward0", "GeluBackward0"}
    assert case.totals.saved_bytes == _bare_block_saves()


# ---- completeness: selective checkpointing, parameter aliases, one allocation twice --------------
def _sac_forward() -> tuple[nn.Module, torch.Tensor, Callable[[], torch.Tensor]]:
    import functools

    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        saves = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
        return CheckpointPolicy.MUST_SAVE if saves else CheckpointPolicy.PREFER_RECOMPUTE

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    x = torch.randn(512, 256, requires_grad=True)
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    return m, x, lambda: checkpoint(m, x, use_reentrant=False, context_fn=context)


def test_selective_checkpointing_counts_its_cached_outputs_as_memtracker_does() -> None:
    from torch.distributed._tools.mem_tracker import MemTracker

    m, x, forward = _sac_forward()
    tracker = MemTracker()
    tracker.track_external(m, x)
    with tracker:
        y_truth = forward()
        snap = tracker.get_tracker_snapshot()
    acts = {str(k): v for k, v in snap[torch.device("cpu")].items()}["_MemRefType.ACT"]
    assert acts == 512 * 1024 * 4 + 512 * 256 * 4  # the two cached addmm outputs (the second is y)
    del y_truth
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # SAC warns of a user pair around it: memaudit's is none
        with capture() as cap:
            y = forward()
    case = cap.report(outputs=y)
    cached = [r for r in case.rows if r.via == "cache"]
    assert sum(r.bytes for r in cached) == acts
    assert case.complete
    # saved = the cached outputs + the region's input, which checkpoint keeps (MemTracker: not an activation)
    assert case.totals.saved_bytes == acts + x.numel() * 4
    assert {r.module for r in cached} == {"Sequential"}
    y.sum().backward()  # backward reads the cache: it is released
    assert not [r for r in cap.report().rows if r.via == "cache"]


def test_detached_parameter_aliases_are_parameters() -> None:
    import torch.nn.functional as F
    from torch.func import functional_call

    lin = nn.Linear(256, 256)
    x = torch.randn(8, 256, requires_grad=True)
    with capture() as cap:
        y = functional_call(lin, {k: v.detach().requires_grad_() for k, v in lin.named_parameters()}, (x,))
    case = cap.report(outputs=y)
    assert case.totals.saved_bytes == x.numel() * 4  # only x: the weight is the module's own memory
    assert case.totals.parameter_bytes == 256 * 256 * 4

    class Detaches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(256, 256))

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return F.linear(t, self.weight.detach())

    model = Detaches()
    with capture() as cap:
        y = model(x)
    case = cap.report(outputs=y)
    assert case.totals.saved_bytes == 0 and case.totals.parameter_bytes == 256 * 256 * 4


@pytest.mark.parametrize("make", ["from_numpy", "frombuffer"])
def test_one_allocation_seen_through_two_tensors_is_counted_once(make: str) -> None:
    np = pytest.importorskip("numpy")
    arr = np.zeros((128, 128), dtype=np.float32)
    buf = bytearray(65536)

    def view() -> torch.Tensor:
        t = torch.from_numpy(arr) if make == "from_numpy" else torch.frombuffer(buf, dtype=torch.float32)
        return t.requires_grad_()

    with capture() as cap:
        a, b = view(), view()
        y = a * b
    case = cap.report(outputs=y)
    assert a.untyped_storage() is not b.untyped_storage() or True  # two storage objects, one allocation
    assert case.totals.saved_bytes == 65536  # the memory the buffer really has
    assert len({r.storage for r in case.rows}) == 1


def test_a_nested_tensor_modified_in_place_raises_pytorchs_message() -> None:
    def run() -> None:
        a = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], requires_grad=True)
        b = a.clone()
        c = b.sin()
        b.add_(1)
        c.backward(torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        bare = outcome(run)
        assert bare[0] == "RuntimeError" and "modified by an inplace operation" in bare[1]
        with capture():
            assert outcome(run) == bare


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_torchscript_resolves_autograd_grad_inside_a_naming_capture() -> None:
    from memaudit.capture import Capture

    with Capture(name_early=True):  # the pytest plugin's capture: it names graphs before backward

        @torch.jit.script
        def grad_of(x: torch.Tensor) -> list[torch.Tensor | None]:
            return torch.autograd.grad([(x * x).sum()], [x])

        x = torch.ones(3, requires_grad=True)
        g = grad_of(x)[0]
        assert g is not None and torch.equal(g, 2 * x.detach())


def _malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not taken back (``mallinfo2``): the CPU allocator's view."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_size_t)
            for n in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = MallInfo2
    info = fn()
    return info.uordblks + info.hblkhd


def test_selective_checkpointing_cache_is_what_the_cpu_allocator_keeps() -> None:
    import gc

    if _malloc_in_use() is None:
        pytest.skip("no glibc mallinfo2 here: the CPU allocator's view is not readable")
    m, x, forward = _sac_forward()
    with capture() as cap:
        y = forward()
    cached = sum(r.bytes for r in cap.report(outputs=y).rows if r.via == "cache")
    assert cached == 512 * 1024 * 4 + 512 * 256 * 4
    y.sum().backward()  # also a warm-up: first-call allocations are not the forward's
    del y, cap
    seen = []
    for _ in range(5):  # malloc is process-wide: another thread (a compile worker) may free meanwhile
        gc.collect()
        before = _malloc_in_use()
        y = forward()
        gc.collect()
        retained = (
            _malloc_in_use() - before
        )  # what the forward keeps: SAC's cache (its last output is y), small objects
        y.sum().backward()
        del y
        seen.append(retained)
        if 0 <= retained - cached < 64 * 1024:  # the rest: autograd nodes and metadata, not tensor memory
            break
    else:
        pytest.fail(f"the allocator kept {seen} B over the forward, selective checkpointing's cache is {cached} B")


def test_a_thread_started_inside_a_capture_that_outlives_it_leaves_no_global_module_hook() -> None:
    go, done = threading.Event(), threading.Event()
    lin = nn.Linear(8, 8)
    seen: list[Any] = []

    def worker() -> None:
        seen.append(lin(torch.randn(2, 8)).tanh())  # inside the capture
        go.wait()
        done.set()

    with capture() as cap:
        t = threading.Thread(target=worker)
        t.start()
        while not seen:
            time.sleep(0.001)
    try:
        assert global_module_hooks() == 0  # the thread still runs, the capture is over
        assert {r.module for r in cap.report(outputs=seen[0]).rows if r.op == "AddmmBackward0"} == {"Linear"}
    finally:
        go.set()
        t.join()
