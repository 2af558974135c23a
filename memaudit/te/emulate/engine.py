"""A backward engine for fake CUDA, where torch's C++ autograd engine cannot run.

On fake CUDA (:mod:`memaudit.te.emulate.fakecuda`) ``Tensor.backward`` fails before evaluating any
node: the engine asks the CUDA driver for the device's primary context (``RuntimeError:
hasPrimaryContext expects a valid device index``). The graph's nodes themselves run: a C++ node is
called with its incoming gradients (``node(*grads)``), a Python node
(``torch.autograd.function.BackwardCFunction``: TE's fused ops, ``te.ops.Sequential``'s
``_OperationFuserAutogradFunction``) through ``node.apply(*grads)``.

:func:`run_backward` evaluates the graph of a loss as the C++ engine orders it on one device: a
node runs once every node that feeds it has run (Kahn's order over ``next_functions``), and among
the ready ones the most recently created first (highest ``_sequence_nr()``, the engine's
``ReadyQueue`` order). Gradients reaching one input of a node are summed; an input no gradient
reached is None, or zeros of the input's metadata for a Python node that materializes gradients
(``ctx.set_materialize_grads``, on by default), as the engine does. A leaf's ``AccumulateGrad``
node accumulates into ``.grad`` itself. Each node runs inside
:func:`memaudit.capture.reads.evaluating`, so an active read observer counts the reads there.

Used only where the C++ engine cannot run; on a GPU, backward is ``Tensor.backward``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import torch

from memaudit.capture.reads import evaluating
from memaudit.targets.base import sum_loss


def _graph(root: Any) -> dict[Any, int]:
    """Node -> how many edges of the graph under ``root`` point at it."""
    deps: dict[Any, int] = {}
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def _call(node: Any, grads: list[torch.Tensor | None]) -> list[tuple[Any, torch.Tensor | None]]:
    """Evaluate one node with its incoming gradients (one per output of its forward); returns
    (next node, input_nr) and gradient pairs for the nodes it feeds."""
    if not isinstance(node, torch.autograd.function.BackwardCFunction):  # a C++ node
        out = node(*grads)
        out = out if isinstance(out, tuple) else (out,)
        return [(nxt, g) for nxt, g in zip(node.next_functions, out, strict=False) if nxt[0] is not None]
    metadata: Any = getattr(node, "_input_metadata")  # noqa: B009 - the C++ node's, untyped in torch's stubs
    if getattr(node, "materialize_grads", True):
        grads = [
            g if g is not None else torch.zeros(tuple(m.shape), dtype=m.dtype, device=m.device)
            for g, m in zip(grads, metadata, strict=True)
        ]
    out = node.apply(*grads)
    out = out if isinstance(out, tuple) else (out,)
    # A Python backward returns one gradient per forward argument, tensors or not; the C++ engine
    # keeps those of the tensor arguments. The arguments that require grad are exactly those with
    # a next function (``needs_input_grad``), in order; the rest get None and go nowhere.
    needs = node.needs_input_grad
    if len(out) != len(needs):
        raise RuntimeError(
            f"{type(node).__name__}: backward returned {len(out)} gradients for {len(needs)} forward arguments"
        )
    wanted = [g for g, need in zip(out, needs, strict=True) if need]
    edges = [nxt for nxt in node.next_functions if nxt[0] is not None]
    return list(zip(edges, wanted, strict=True))


def run_backward(outputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor | None] | None = None) -> None:
    """Backward from ``outputs`` (each with a ``grad_fn``) with ``grad_outputs`` (default: ones
    for a scalar), evaluating every node of their graph once, in the C++ engine's order."""
    grad_outputs = list(grad_outputs) if grad_outputs is not None else [None] * len(outputs)
    buffers: dict[Any, list[torch.Tensor | None]] = {}
    deps: dict[Any, int] = {}
    roots = []
    for out, grad in zip(outputs, grad_outputs, strict=True):
        node = out.grad_fn
        if node is None:
            raise ValueError("run_backward: an output has no grad_fn (it does not require grad)")
        if grad is None:
            if out.numel() != 1:
                raise ValueError("run_backward: grad can be implied only for a scalar output")
            grad = torch.ones_like(out)
        _add(buffers, node, out.output_nr, grad)
        roots.append(node)
    for root in roots:
        for node, n in _graph(root).items():
            deps[node] = deps.get(node, 0) + n
    # A root that another root's graph feeds waits for it, as in the engine.
    heap = [(-node._sequence_nr(), id(node), node) for node in dict.fromkeys(roots) if deps.get(node, 0) == 0]
    heapq.heapify(heap)
    while heap:
        _, _, node = heapq.heappop(heap)
        got = buffers.pop(node, [])
        width = len(node._input_metadata)
        grads = list(got) + [None] * (width - len(got))
        with evaluating():
            results = _call(node, grads)
        for (nxt, nr), grad in results:
            if grad is not None:
                _add(buffers, nxt, nr, grad)
            deps[nxt] -= 1
            if deps[nxt] == 0:
                heapq.heappush(heap, (-nxt._sequence_nr(), id(nxt), nxt))


def _add(buffers: dict[Any, list[torch.Tensor | None]], node: Any, nr: int, grad: torch.Tensor) -> None:
    slots = buffers.setdefault(node, [])
    while len(slots) <= nr:
        slots.append(None)
    held = slots[nr]
    slots[nr] = grad if held is None else held + grad


def backward_sum(outputs: Any) -> None:
    """Backward through the sum of every floating output that requires grad (what
    ``memaudit.targets.base.backward_sum`` does with ``loss.backward()``), with this engine."""
    loss = sum_loss(outputs)
    if loss is not None:
        run_backward([loss])
