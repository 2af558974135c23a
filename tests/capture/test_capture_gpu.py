"""``capture()`` on CUDA, checked against the caching allocator and plain autograd.

Ground truth here is ``torch.cuda.memory_allocated()`` and bare autograd, never memaudit's own
numbers: every allocator figure memaudit reports is compared with a reading of our own (a bare run
of the same forward, or the bytes the known shapes must take), and every gradient with a bare run's.

Sizes are chosen so that every new tensor is at most 1 MiB: the caching allocator serves those from
its small pool, where a block is exactly the request rounded up to 512 bytes. A large-pool block
(>1 MiB) is not split when the remainder would be <=1 MiB, so ``memory_allocated`` can count up to
~1 MiB more than the tensor asked for; ``bench/verify/verify_allocator.py`` measures that slack on bigger
models.

Cases: (a) ``hidden_bytes == 0`` for an MLP and a cuDNN LSTM; (b) a captured graph dropped without
backward gives all its memory back, with gc disabled; (c) gradients are bitwise those of a bare
run; (d) ``save_on_cpu`` with a capture on CUDA: rows reside on the host, ``host_bytes`` is what the
shapes say, and the device keeps exactly the activations less; (e) non-reentrant checkpoint: the
region's rows are ``recomputed`` and the allocator's growth excludes them.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from memaudit.capture import capture

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

BLOCK = 512
B, D, H = 64, 256, 1024  # MLP: tokens, model width, hidden width (every activation <= 1 MiB)


def blk(nbytes: int) -> int:
    """What the caching allocator takes for a small-pool request (our own rounding, not memaudit's)."""
    return 0 if nbytes <= 0 else -(-nbytes // BLOCK) * BLOCK


def f32(*shape: int) -> int:
    return math.prod(shape) * 4


def alloc() -> int:
    return torch.cuda.memory_allocated()


def mlp(d: int = D, h: int = H) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)).cuda()


def clear(*modules_or_tensors: Any) -> None:
    for obj in modules_or_tensors:
        if isinstance(obj, nn.Module):
            for p in obj.parameters():
                p.grad = None
        else:
            obj.grad = None


def grads(model: nn.Module, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    out.update({f"input[{i}]": x.grad.detach().clone() for i, x in enumerate(inputs) if x.grad is not None})
    return out


def differ(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in a or k not in b or not torch.equal(a[k], b[k]))


def first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def warm_up(fwd: Callable[[], Any], *clear_after: Any) -> None:
    """Forward+backward once outside any capture: cuBLAS/cuDNN handles, workspaces, lazy init."""
    first(fwd()).float().sum().backward()
    clear(*clear_after)
    torch.cuda.synchronize()


def bare_delta(fwd: Callable[[], Any]) -> int:
    """What a bare forward leaves allocated while its outputs (and graph) are alive."""
    gc.collect()
    before = alloc()
    out = fwd()
    delta = alloc() - before
    del out
    assert alloc() == before, "the bare forward's graph did not give its memory back"
    return delta


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    gc.collect()
    torch.cuda.synchronize()
    yield
    gc.collect()


# ---- (a) hidden_bytes == 0 -------------------------------------------------------------------------
def test_mlp_allocator_growth_is_the_rows() -> None:
    torch.manual_seed(0)
    model = mlp()
    x = torch.randn(B, D, device="cuda", requires_grad=True)
    warm_up(lambda: model(x), model, x)
    # Alive after the forward: the first Linear's output (GELU saved it), GELU's output (the second
    # Linear saved it), and the output. x and the weights existed before.
    expected = 2 * blk(f32(B, H)) + blk(f32(B, D))
    assert bare_delta(lambda: model(x)) == expected

    with capture(verify_allocator=True) as cap:
        y = model(x)
    report = cap.report(outputs=y)
    a = report.allocator
    assert a is not None and a["available"], a
    assert a["allocated_delta"] == expected, a
    assert a["hidden_bytes"] == 0, a
    assert a["accounted_bytes"] == expected, a
    assert report.complete, report.warnings
    y.float().sum().backward()


def test_lstm_allocator_growth_is_the_rows() -> None:
    torch.manual_seed(0)
    model = nn.LSTM(64, 128, num_layers=2).cuda()
    x = torch.randn(16, 8, 64, device="cuda", requires_grad=True)  # (seq, batch, feature)
    warm_up(lambda: model(x), model, x)
    bare = bare_delta(lambda: model(x))
    output_bytes = f32(16, 8, 128) + 2 * f32(2, 8, 128)  # output, h_n, c_n
    assert bare > output_bytes  # cuDNN's reserve space and the saved hidden states come on top

    with capture(verify_allocator=True) as cap:
        out = model(x)
    report = cap.report(outputs=out)
    a = report.allocator
    assert a is not None and a["available"], a
    assert a["allocated_delta"] == bare, f"the capture changed what the forward allocates: {a}, bare {bare}"
    assert a["hidden_bytes"] == 0, (a, [(r.op, r.saved_as, r.bytes, r.resides, r.via) for r in report.rows])
    out[0].float().sum().backward()


# ---- (b) a dropped graph gives its memory back -------------------------------------------------------
@pytest.mark.parametrize("with_report", [False, True], ids=["no-report", "report"])
def test_dropped_graph_returns_memory_with_gc_disabled(with_report: bool) -> None:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.Tanh()]
    model = nn.Sequential(*layers).cuda()
    x = torch.randn(256, 1024, device="cuda", requires_grad=True)
    warm_up(lambda: model(x), model, x)

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = alloc()
        y = model(x)  # control: a bare graph is freed by reference counting alone
        del y
        assert alloc() == start, "even the bare graph kept memory"

        with capture(verify_allocator=True) as cap:
            y = model(x)
        held = alloc()
        report = cap.report(outputs=y) if with_report else None
        del y
        after_outputs = alloc()
        del cap, report
        after_capture = alloc()
    finally:
        if enabled:
            gc.enable()
    assert held > start  # the graph did hold its saved activations
    assert after_outputs == start, f"{after_outputs - start} bytes still held after del of the outputs"
    assert after_capture == start


# ---- (c) gradients are bitwise a bare run's ----------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gradients_bitwise_identical_under_capture(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = mlp().to(dtype)
    w = torch.randn(D, D, device="cuda", dtype=dtype, requires_grad=True)
    x = torch.randn(B, D, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(B, D, device="cuda", dtype=dtype)

    def forward() -> torch.Tensor:
        return torch.tanh(model(x) @ w)

    def run(captured: bool) -> dict[str, torch.Tensor]:
        clear(model, x, w)
        if captured:
            with capture(verify_allocator=True) as cap:
                y = forward()
            cap.report(outputs=y)  # the graph walk runs between forward and backward
        else:
            y = forward()
        y.backward(g)
        return {**grads(model, x), "w": w.grad.detach().clone()}

    run(False)  # warm-up
    reference = run(False)
    if differ(reference, run(False)):
        pytest.skip("two bare runs already differ bitwise on this device: nothing to compare against")
    bad = differ(reference, run(True))
    assert not bad, f"gradients differ under capture(): {bad}"


# ---- (d) save_on_cpu ------------------------------------------------------------------------------
@pytest.mark.parametrize("pin_memory", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("order", ["save_on_cpu-outside", "save_on_cpu-inside"])
def test_save_on_cpu_keeps_copies_on_the_host(order: str, pin_memory: bool) -> None:
    torch.manual_seed(0)
    model = mlp()
    x = torch.randn(B, D, device="cuda", requires_grad=True)
    warm_up(lambda: model(x), model, x)

    def captured(host: bool) -> tuple[Any, torch.Tensor, int]:
        gc.collect()
        before = alloc()
        if not host:
            with capture(verify_allocator=True) as cap:
                y = model(x)
        elif order == "save_on_cpu-outside":
            with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
                with capture(verify_allocator=True) as cap:
                    y = model(x)
        else:
            with capture(verify_allocator=True) as cap:
                with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
                    y = model(x)
        return cap.report(outputs=y), y, alloc() - before

    plain_report, y, plain_delta = captured(host=False)
    del y, plain_report
    clear(model, x)
    # Ground truth for the gradients: the same save_on_cpu without memaudit (tensors that come
    # back from the host are new allocations, and cuBLAS may pick other kernels for them).
    with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
        y = model(x)
    y.float().sum().backward()
    reference = grads(model, x)
    del y
    clear(model, x)

    report, y, host_delta = captured(host=True)
    # save_on_cpu copies every tensor autograd saves, the input and the (transposed) weights too.
    activations = f32(B, H) + f32(B, H)  # the first Linear's output (GELU's), GELU's output
    copies = f32(B, D) + f32(D, H) + activations + f32(H, D)  # x, W1^T, the two activations, W2^T
    assert len(report.rows) == 5
    assert all(r.resides == "host" for r in report.rows), [(r.op, r.saved_as, r.resides) for r in report.rows]
    assert report.totals.host_bytes > 0
    assert report.totals.host_bytes == copies
    assert report.totals.saved_bytes == 0
    # On the device the activations are gone; only the output stays.
    assert plain_delta - host_delta == blk(f32(B, H)) * 2
    assert host_delta == blk(f32(B, D))
    a = report.allocator
    assert a is not None and a["available"] and a["hidden_bytes"] == 0, a

    y.float().sum().backward()
    assert not differ(reference, grads(model, x)), "save_on_cpu under capture changed the gradients"


# ---- (e) checkpoint -------------------------------------------------------------------------------
def test_checkpoint_rows_are_recomputed_and_not_on_the_device() -> None:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = mlp()
    x = torch.randn(B, D, device="cuda", requires_grad=True)

    def plain() -> torch.Tensor:
        return model(torch.tanh(x))

    def checkpointed() -> torch.Tensor:
        return checkpoint(model, torch.tanh(x), use_reentrant=False)

    warm_up(plain, model, x)
    warm_up(checkpointed, model, x)
    # tanh's output (saved by tanh and as the region's input) and the output; inside the region
    # nothing is kept: the plain forward keeps the two hidden activations more.
    expected = blk(f32(B, D)) * 2
    assert bare_delta(checkpointed) == expected
    assert bare_delta(plain) - expected == blk(f32(B, H)) * 2

    with capture(verify_allocator=True) as cap:
        y = checkpointed()
    report = cap.report(outputs=y)
    region = [r for r in report.rows if r.op in ("AddmmBackward0", "GeluBackward0")]
    assert len(region) == 5, [(r.op, r.saved_as, r.resides) for r in report.rows]
    assert all(r.resides == "recomputed" for r in region), [(r.op, r.saved_as, r.resides) for r in region]
    kept = [r for r in report.rows if r.resides == "device"]
    assert {r.op for r in kept} <= {"checkpoint", "TanhBackward0"}, [(r.op, r.saved_as) for r in kept]
    assert any(r.op == "checkpoint" for r in kept)
    a = report.allocator
    assert a is not None and a["available"], a
    assert a["allocated_delta"] == expected, a
    assert a["hidden_bytes"] == 0, a
    assert a["accounted_bytes"] == expected, a
    y.float().sum().backward()
    assert x.grad is not None
