"""The reference target's model: TE's grouped MLP written in plain PyTorch.

``GroupedLinear(G, H, 2F) -> ScaledSwiGLU -> GroupedLinear(G, F, H)`` with the call signature of
TE's ``te.ops.Sequential``: ``model(x, split_sizes, probs)``. Each stage is an
``autograd.Function`` that saves what TE's unfused split path saves (te-internals §2.4):
GroupedLinear saves ``[split_sizes, *xs, *ws]`` (the xs are views of its input), ScaledSwiGLU
saves ``(input, scales)``. Every saved tensor is therefore known exactly, which makes this target
the ground truth for memaudit's own tests.

On ``meta`` nothing is allocated (an audit at production shape on CPU): the parameters and inputs
are made on meta directly, and the split sizes, which a meta tensor cannot hold, travel beside it
(:func:`split_list`). Forward and backward both run; every tensor they make is a meta tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from memaudit.spec import CaseSpec

Labeler = Callable[..., None]

META_SIZES = "memaudit_split_sizes"
"""The attribute :func:`make_inputs` sets on a meta ``split_sizes`` tensor: its values as a list."""


def split_list(split_sizes: torch.Tensor) -> list[int]:
    """The values of ``split_sizes``; a meta tensor has none, so it carries them (:data:`META_SIZES`)."""
    if split_sizes.is_meta:
        sizes = getattr(split_sizes, META_SIZES, None)
        if sizes is None:
            raise RuntimeError(
                f"a meta split_sizes tensor holds no values: set its {META_SIZES!r} attribute to the list"
            )
        return list(sizes)
    return split_sizes.tolist()


class GroupedLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, split_sizes: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        sizes = split_list(split_sizes)
        xs = torch.split(x, sizes)
        out = torch.cat([xg @ w.t() for xg, w in zip(xs, weights, strict=True)])
        ctx.save_for_backward(split_sizes, *xs, *weights)
        ctx.groups = len(weights)
        return out

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        split_sizes, *rest = ctx.saved_tensors
        g = ctx.groups
        xs, ws = rest[:g], rest[g:]
        dys = torch.split(dy, split_list(split_sizes))
        dx = torch.cat([d @ w for d, w in zip(dys, ws, strict=True)])
        dws = [d.t() @ x for d, x in zip(dys, xs, strict=True)]
        return (dx, None, *dws)


class ScaledSwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        a, b = h.chunk(2, dim=-1)
        out = torch.nn.functional.silu(a) * b * scales.unsqueeze(-1).to(h.dtype)
        ctx.save_for_backward(h, scales)
        return out

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, scales = ctx.saved_tensors
        a, b = h.float().chunk(2, dim=-1)
        s = scales.float().unsqueeze(-1)
        sig = torch.sigmoid(a)
        silu = a * sig
        dyf = dy.float()
        da = dyf * b * s * (sig * (1 + a * (1 - sig)))
        db = dyf * silu * s
        dscales = (dyf * silu * b).sum(-1)
        return torch.cat([da, db], dim=-1).to(h.dtype), dscales.to(scales.dtype)


class ReferenceGroupedMLP(torch.nn.Module):
    """G experts: FC1 (2F x H), SwiGLU scaled by routing probabilities, FC2 (H x F)."""

    def __init__(self, groups: int, hidden: int, ffn: int, *, dtype: torch.dtype, device: str | torch.device) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1234)

        def weight(n: int, k: int) -> torch.nn.Parameter:
            if torch.device(device).type == "meta":  # no values: nothing allocated, nowhere
                return torch.nn.Parameter(torch.empty(n, k, dtype=dtype, device="meta"))
            return torch.nn.Parameter((torch.randn(n, k, generator=gen) / k**0.5).to(device, dtype))

        self.fc1_weight = torch.nn.ParameterList(weight(2 * ffn, hidden) for _ in range(groups))
        self.fc2_weight = torch.nn.ParameterList(weight(hidden, ffn) for _ in range(groups))
        self.labeler: Labeler | None = None

    def forward(self, x: torch.Tensor, split_sizes: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        h = GroupedLinearFunction.apply(x, split_sizes, *self.fc1_weight)
        act = ScaledSwiGLUFunction.apply(h, probs)
        y = GroupedLinearFunction.apply(act, split_sizes, *self.fc2_weight)
        if self.labeler is not None:
            self._label(x, h, act, split_sizes, probs)
        return y

    def _label(
        self, x: torch.Tensor, h: torch.Tensor, act: torch.Tensor, split_sizes: torch.Tensor, probs: torch.Tensor
    ) -> None:
        lab = self.labeler
        assert lab is not None
        lab(split_sizes, "split_sizes")
        lab(probs, "activation.scales")
        lab(h, "fc1.output")
        sizes = split_list(split_sizes)
        for name, t in (("fc1.input", x), ("fc2.input", act)):
            for g, part in enumerate(torch.split(t, sizes)):
                lab(part, name, group=g)
            lab(t, name)
        for g, (w1, w2) in enumerate(zip(self.fc1_weight, self.fc2_weight, strict=True)):
            lab(w1, f"fc1.weight[{g}]", group=g)
            lab(w2, f"fc2.weight[{g}]", group=g)


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def make_inputs(spec: CaseSpec, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` (T, H) with grad, int64 ``split_sizes`` on the device, ``probs`` (T,) fp32 with grad.

    On ``meta`` the three are made there directly (no values, no allocation) and ``split_sizes``
    carries its values as :data:`META_SIZES`.
    """
    if torch.device(spec.device).type == "meta":
        x = torch.empty(spec.tokens, spec.hidden, dtype=DTYPES[spec.dtype], device="meta").requires_grad_()
        split_sizes = torch.empty(spec.groups, dtype=torch.int64, device="meta")
        setattr(split_sizes, META_SIZES, spec.split_sizes())
        probs = torch.empty(spec.tokens, dtype=torch.float32, device="meta").requires_grad_()
        return x, split_sizes, probs
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(spec.tokens, spec.hidden, generator=gen).to(spec.device, DTYPES[spec.dtype]).requires_grad_()
    split_sizes = torch.tensor(spec.split_sizes(), dtype=torch.int64, device=spec.device)
    probs = torch.rand(spec.tokens, generator=gen).to(spec.device).requires_grad_()
    return x, split_sizes, probs
