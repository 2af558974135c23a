"""The expert-parallel layer: a seeded router, Megatron's all-to-all dispatch, local experts, combine.

The dispatch follows Megatron-LM's ``MoEAlltoAllTokenDispatcher`` with its unfused helpers
(``megatron/core/transformer/moe/moe_utils.py``: ``permute``, ``sort_chunks_by_idxs``,
``unpermute``; ``tensor_parallel.all_to_all``), so that what it saves for backward is what
Megatron's saves:

1. preprocess: tokens per expert (``routing_map.sum(0)``), then an all-to-all of those counts over
   the expert-parallel group, so that each rank learns what every peer sends its experts (Megatron
   gathers the whole count matrix with an all-gather; the rows a rank needs are the same numbers);
2. permute: ``routing_map.T`` selects, per expert, the tokens routed to it (``masked_select``: saves
   the transposed probabilities and the mask) and ``index_select`` gathers them (saves the indices);
3. an all-to-all of the tokens and one of the probabilities (``AllToAll``: saves no tensor);
4. sort the received chunks by local expert (``split`` + ``cat``: saves no tensor);
5. the local experts (the backend's grouped MLP, probabilities scaling the activation as TE's
   ``ScaledSwiGLU`` does), then the way back: unsort, all-to-all, ``scatter_add_`` into the token
   order (saves the indices again: a second view of the same storage).

The collectives run in forward and backward, never in a saved-tensor hook. With one expert-parallel
rank nothing is exchanged.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from memaudit.ranks import coords_of, rank_of
from memaudit.spec import CaseSpec
from memaudit.targets.base import Built, backward_sum
from memaudit.te.targets.reference_model import DTYPES

if TYPE_CHECKING:
    from memaudit.capture import Capture
    from memaudit.te.targets.ep import EPGroupedMLPTarget
    from memaudit.te.targets.routing import RoutingPlan


class AllToAll(torch.autograd.Function):
    """``torch.distributed.all_to_all_single`` with autograd, as Megatron's ``tensor_parallel.all_to_all``:
    the group and split lists on ``ctx``, no tensor saved; backward is the reverse exchange."""

    @staticmethod
    def forward(
        ctx: Any, group: Any, x: torch.Tensor, output_splits: list[int], input_splits: list[int]
    ) -> torch.Tensor:
        ctx.group, ctx.output_splits, ctx.input_splits = group, output_splits, input_splits
        if group is None:
            return x
        x = x.contiguous()
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x, output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return None, AllToAll.apply(ctx.group, grad, ctx.input_splits, ctx.output_splits), None, None


def permute(
    tokens: torch.Tensor, routing_map: torch.Tensor, probs: torch.Tensor, label: Any
) -> tuple[torch.Tensor, ...]:
    """Megatron's ``permute`` (unfused, no drop and pad): the tokens and probabilities grouped by
    expert, and the token index of each (``sorted_indices``)."""
    num_tokens = tokens.shape[0]
    num_experts = routing_map.shape[1]
    mask = routing_map.bool().T.contiguous()  # [E, T]
    token_indices = torch.arange(num_tokens, device=routing_map.device).unsqueeze(0).expand(num_experts, -1)
    sorted_indices = token_indices.masked_select(mask)
    probs_t = probs.T.contiguous()
    permuted_probs = probs_t.masked_select(mask)
    permuted = tokens.index_select(0, sorted_indices)
    label(mask, "dispatch.routing_map")
    label(probs_t, "dispatch.probs")
    label(sorted_indices, "dispatch.sorted_indices")
    return permuted, permuted_probs, sorted_indices


def unpermute(permuted: torch.Tensor, sorted_indices: torch.Tensor, restore_shape: torch.Size) -> torch.Tensor:
    """Megatron's ``unpermute`` (probabilities already applied by the experts): scatter-add back to token order."""
    hidden = restore_shape[1]
    out = torch.zeros(restore_shape, dtype=permuted.dtype, device=permuted.device)
    out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), permuted)
    return out


def sort_chunks_by_idxs(x: torch.Tensor, split_sizes: list[int], order: list[int]) -> torch.Tensor:
    """Megatron's ``sort_chunks_by_idxs``: split by ``split_sizes``, concatenate in ``order``."""
    chunks = torch.split(x, split_sizes, dim=0)
    return torch.cat([chunks[i] for i in order], dim=0)


_GROUPS: dict[tuple[int, ...], Any] = {}
_WORLD: list[Any] = [None]


def ep_group(layout: dict[str, int], coords: dict[str, int]) -> Any:
    """This rank's expert-parallel process group (None with one expert-parallel rank). Every rank
    makes every group, in the same order, as ``new_group`` requires; made once per process group."""
    if layout["ep"] == 1:
        return None
    if _WORLD[0] is not dist.group.WORLD:
        _GROUPS.clear()
        _WORLD[0] = dist.group.WORLD
    others = {a: n for a, n in layout.items() if a != "ep"}
    mine = None
    for flat in range(max(1, _prod(others.values()))):
        where = coords_of(flat, others)
        ranks = tuple(rank_of({**where, "ep": e}, layout) for e in range(layout["ep"]))
        if ranks not in _GROUPS:
            _GROUPS[ranks] = dist.new_group(list(ranks))
        if all(coords[a] == v for a, v in where.items()):
            mine = _GROUPS[ranks]
    return mine


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def route(plan: RoutingPlan, ep_rank: int, hidden: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    """The tokens of expert-parallel rank ``ep_rank`` and the router's decision for them: ``x``
    (T, H) with grad; ``routing_map`` (T, E) bool with ``topk`` experts per token, each expert
    chosen by the plan's count of tokens; ``probs`` (T, E) fp32 with grad, the top-k weights of each
    token summing to 1, zero elsewhere. Seeded by the plan's seed and ``ep_rank`` alone, so
    data-parallel replicas route the same tokens."""
    gen = torch.Generator().manual_seed(plan.seed * 1_000_003 + ep_rank)
    x = torch.randn(plan.tokens, hidden, generator=gen).to(device, dtype).requires_grad_()
    counts = torch.tensor(plan.counts(), dtype=torch.int64)
    # the copies sorted by expert, laid out column-major: an expert has at most T copies, so a
    # token never gets one expert twice
    copies = torch.repeat_interleave(torch.arange(plan.experts), counts).reshape(plan.topk, plan.tokens).T
    choices = copies[torch.randperm(plan.tokens, generator=gen)]
    routing_map = torch.zeros(plan.tokens, plan.experts, dtype=torch.bool).scatter_(1, choices, True)
    weights = torch.rand(plan.tokens, plan.topk, generator=gen) + 0.1
    probs = torch.zeros(plan.tokens, plan.experts).scatter_(1, choices, weights / weights.sum(1, keepdim=True))
    return x, routing_map.to(device), probs.to(device).requires_grad_()


class FromEmulation(torch.autograd.Function):
    """The experts' fake CUDA output as a real host tensor of its shape and dtype (zeros: an emulated
    forward computes no values), for the way back on real tensors; saves no tensor. Its backward
    (never run: emulated experts run no backward) hands the gradient back to fake CUDA."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
        from memaudit.te.emulate import fakecuda

        ctx.device = y.device
        with fakecuda.outside():
            return torch.zeros(y.shape, dtype=y.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.to(ctx.device)


def build(target: EPGroupedMLPTarget, spec: CaseSpec) -> Built:
    """The layer for ``spec`` as this rank runs it (``spec`` placed for this rank: ``ep`` set, its
    local split sizes from the routing plan).

    On fake CUDA (emulated TE experts, no GPU) tensors hold no values, and the router and the
    dispatch read them (counts, ``masked_select``, ``tolist``): they run on real host tensors,
    outside the fake mode (:func:`memaudit.te.emulate.fakecuda.outside`), and only the experts'
    forward runs on fake CUDA, on fake copies of the tokens, split sizes and probabilities the
    dispatch brought them (the split sizes keep their values, which TE reads where fake CUDA
    answers). The experts' output comes back as a host tensor of its shape (:class:`FromEmulation`)
    for the way back. The dispatch's rows are then host tensors (``device`` ``cpu``), of the
    sizes they have on a GPU."""
    from memaudit.te.emulate import fakecuda

    fake = fakecuda.active() is not None and spec.device.startswith("cuda")
    routed = "cpu" if fake else spec.device  # where the router and the dispatch run
    real = fakecuda.outside if fake else contextlib.nullcontext
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    ep = int(spec.options.get("ep") or world)
    placed, info = target.place(spec, rank, world)
    if tuple(spec.splits or ()) != placed.splits:
        raise RuntimeError(
            f"the case was placed for other split sizes ({list(spec.splits or ())}) than rank {rank}'s "
            f"routing gives ({list(placed.splits or ())})"
        )
    layout, coords = info.layout, info.coords
    plan = target.plan(spec, ep)
    group = ep_group(layout, coords)
    experts = target.backend.build(target.local_spec(spec))
    with real():
        x, routing_map, probs = route(plan, coords["ep"], spec.hidden, DTYPES[spec.dtype], routed)
    local = spec.groups
    want = plan.local_splits(coords["ep"])

    def forward(cap: Capture) -> torch.Tensor:
        with real():
            tokens, scales, tokens_per_expert, back = dispatch(cap)
        if fake:  # fake CUDA copies for the experts (autograd records the copies; they save nothing)
            tokens, scales = tokens.to(spec.device), scales.to(spec.device)
        y = experts.run(tokens, tokens_per_expert.to(spec.device), scales, cap)
        if fake:
            y = FromEmulation.apply(y)
        with real():
            return back(y)

    def dispatch(cap: Capture) -> tuple[Any, ...]:
        # preprocess: counts first
        per_expert = routing_map.sum(0)  # [E] int64: what this rank sends each expert
        input_splits = per_expert.reshape(ep, local).sum(1).tolist()
        if group is not None:
            received = torch.empty_like(per_expert)
            dist.all_to_all_single(received, per_expert, group=group)
        else:
            received = per_expert
        from_peers = received.reshape(ep, local)  # [source rank, local expert]
        output_splits = from_peers.sum(1).tolist()
        tokens_per_expert = from_peers.sum(0)
        if tokens_per_expert.tolist() != want:
            raise RuntimeError(
                f"the all-to-all of counts brought {tokens_per_expert.tolist()} tokens per local expert; "
                f"the routing plan says {want}"
            )
        # then the tokens
        permuted, permuted_probs, sorted_indices = permute(x, routing_map, probs, cap.label)
        tokens = AllToAll.apply(group, permuted, output_splits, input_splits)
        scales = AllToAll.apply(group, permuted_probs, output_splits, input_splits)
        chunks = from_peers.ravel().tolist()
        by_expert = [s * local + g for g in range(local) for s in range(ep)]  # [source][expert] -> [expert][source]
        if local > 1:
            tokens = sort_chunks_by_idxs(tokens, chunks, by_expert)
            scales = sort_chunks_by_idxs(scales, chunks, by_expert)
        unsort = from_peers.T.ravel().tolist()

        def back(y: torch.Tensor) -> torch.Tensor:
            if local > 1:
                order = [e * ep + s for s in range(ep) for e in range(local)]  # [expert][source] -> [source][expert]
                y = sort_chunks_by_idxs(y, unsort, order)
            y = AllToAll.apply(group, y, input_splits, output_splits)
            return unpermute(y, sorted_indices, x.shape)

        return tokens, scales, tokens_per_expert, back

    warnings = list(experts.warnings)
    return Built(
        forward=forward,
        backward=backward_sum if experts.backward else (lambda outputs: None),
        annotate=experts.annotate,
        options=dict(experts.options),
        model=experts.model,
        inputs=(x, probs),
        warnings=warnings,
        emulation=experts.emulation,
    )
