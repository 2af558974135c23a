"""A ``torch.compile``'d model (inductor) under ``capture()`` on CUDA: it runs compiled, with the
graphs and graph breaks of a bare run, its rows are what the compiled program saves (a pack hook of
the test's own), and the caching allocator's growth over the forward is the rows (``hidden_bytes``
0), with gradients bitwise equal to a bare compiled run's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from memaudit.capture import capture

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import torch._dynamo  # noqa: E402
import torch._dynamo.utils  # noqa: E402

B, D, H = 64, 256, 1024  # every activation at most 1 MiB: small-pool blocks, exact rounding


def compiled_mlp() -> tuple[Any, nn.Module, list[str], torch.Tensor]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, D)).cuda()
    graphs: list[str] = []

    def counting(gm: torch.fx.GraphModule, example: Any) -> Any:
        from torch._dynamo.backends.registry import lookup_backend

        graphs.append(gm.code)
        return lookup_backend("inductor")(gm, example)

    x = torch.randn(B, D, device="cuda", requires_grad=True)
    return torch.compile(model, backend=counting), model, graphs, x


def breaks() -> int:
    return sum(torch._dynamo.utils.counters["graph_break"].values())


def test_inductor_on_cuda_runs_compiled_and_the_allocator_agrees() -> None:
    # bare: graphs, breaks, what the compiled program saves, gradients
    fn, model, graphs, x = compiled_mlp()
    fn(x).sum().backward()
    bare_graphs, bare_breaks = list(graphs), breaks()
    bare_grads = [p.grad.clone() for p in model.parameters()]
    packed: list[tuple[tuple[int, ...], int]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append((tuple(t.shape), t.numel() * t.element_size()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(x)
    del y

    # the same program, compiled before the capture (and already warm)
    fn, model, graphs, x = compiled_mlp()
    fn(x).sum().backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    with capture(verify_allocator=True) as cap:
        y = fn(x)
    case = cap.report(outputs=y)
    assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
    y.sum().backward()
    assert graphs == bare_graphs and breaks() == bare_breaks == 0
    assert [torch.equal(a, p.grad) for a, p in zip(bare_grads, model.parameters(), strict=True)] == [True] * 4
    assert {r.op for r in case.rows} == {"CompiledFunctionBackward"}
    assert sorted((tuple(r.shape), r.bytes) for r in case.rows) == sorted(packed)
    a = case.allocator
    assert a is not None and a["available"], a
    assert a["hidden_bytes"] == 0, a
