"""Emulated TE cases, run-time patches of TE's save path, and the injected regressions.

Shared by ``tests/te/test_emulated.py`` and ``bench/mutation/mutation_score.py``. Every patch wraps
``OperationContext.save_for_backward`` (``ops/op.py:50``), the one place every op of the grouped
MLP hands TE's real saved set to autograd, and changes that set as a TE change would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from memaudit.report import CaseReport, Report
from memaudit.runner import run_case
from memaudit.spec import CaseSpec

Mutate = Callable[[list[Any]], list[Any]]

PRODUCTION = {"tokens": 82944, "hidden": 3072, "ffn": 1536}


def emulated_case(
    recipe: str,
    groups: int,
    *,
    tokens: int = 4096,
    hidden: int = 1024,
    ffn: int = 2048,
    fused: bool = True,
    cudnn_frontend: str = "1.28.0",
    kernels: str = "emulated",
) -> CaseReport:
    """One case of the TE target on an emulated sm100, forward only."""
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    target = TEGroupedMLPTarget().configure(
        {"kernels": kernels, "arch": "sm100", "fused": fused, "cudnn_frontend": cudnn_frontend}
    )
    options = dict(target.options)
    spec = CaseSpec.make(target, recipe, groups, tokens=tokens, hidden=hidden, ffn=ffn, device="cuda", options=options)
    return run_case(target, spec, backward=False)


def report_of(*cases: CaseReport) -> Report:
    return Report(cases=list(cases), environment={}, memaudit="test")


@contextmanager
def saving(mutate: Mutate) -> Iterator[None]:
    """TE's ops save ``mutate(tensors)`` instead of ``tensors`` inside the block."""
    from transformer_engine.pytorch.ops.op import OperationContext

    original = OperationContext.save_for_backward

    def save_for_backward(self: Any, *tensors: Any) -> None:
        original(self, *mutate(list(tensors)))

    OperationContext.save_for_backward = save_for_backward
    try:
        yield
    finally:
        OperationContext.save_for_backward = original


def _grouped(t: Any) -> bool:
    from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage

    return isinstance(t, GroupedTensorStorage)


def _is(t: Any, quantizer: str) -> bool:
    return type(getattr(t, "quantizer", None)).__name__ == quantizer


def pr3545(tensors: list[Any]) -> list[Any]:
    """TE PR #3545: the fused save path prunes the NVFP4 inputs' rowwise data and scales as it
    already does for MXFP8 (grouped_mlp.py:1933-1938 drops ``if not use_nvfp4``)."""
    for t in tensors:
        if _grouped(t) and _is(t, "NVFP4Quantizer") and t.columnwise_data is not None:
            t.rowwise_data = None
            t.scale_inv = None
    return tensors


# ---- injected regressions ------------------------------------------------------------------------
def _keeps_rowwise(quantizer: str) -> Mutate:
    """A regression: grouped inputs of ``quantizer`` keep rowwise data and scales (as large as the
    columnwise ones) where TE saves columnwise only."""

    def mutate(tensors: list[Any]) -> list[Any]:
        for t in tensors:
            if _grouped(t) and _is(t, quantizer) and t.rowwise_data is None and t.columnwise_data is not None:
                t.rowwise_data = torch.empty_like(t.columnwise_data)
                t.scale_inv = torch.empty_like(t.columnwise_scale_inv)
        return tensors

    return mutate


def _plain(t: Any) -> bool:
    """A plain tensor (not a parameter, not a TE storage): on fake CUDA, a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    return type(t) in (torch.Tensor, FakeTensor)


def _extra_input_copy(tensors: list[Any]) -> list[Any]:
    x = next((t for t in tensors if _plain(t) and t.dtype == torch.bfloat16 and t.dim() == 2), None)
    return tensors if x is None else [*tensors, torch.empty_like(x, dtype=torch.float32)]


def _weight_twice(tensors: list[Any]) -> list[Any]:
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    from memaudit.te.emulate.standins import empty_quantized

    w = next((t for t in reversed(tensors) if isinstance(t, Float8TensorStorage)), None)
    if w is None:
        return tensors
    data = w._data if w._data is not None else w._transpose
    shape = data.shape if w._data is not None else (data.shape[-1], *data.shape[:-1])
    return [*tensors, empty_quantized(w._quantizer, shape, torch.bfloat16, data.device)]


def _grouped_whole(tensors: list[Any]) -> list[Any]:
    from transformer_engine.pytorch.tensor.grouped_tensor import GroupedTensor

    out = []
    for t in tensors:
        if _grouped(t) and not isinstance(t, GroupedTensor) and t.quantizer is not None:
            kw = {
                k: getattr(t, k)
                for k in (
                    "columnwise_data",
                    "scale_inv",
                    "columnwise_scale_inv",
                    "amax",
                    "columnwise_amax",
                    "scale",
                    "first_dims",
                    "last_dims",
                    "tensor_offsets",
                )
            }
            kw["data"] = t.rowwise_data
            t = GroupedTensor(
                shape=tuple(t.logical_shape),
                dtype=torch.bfloat16,
                num_tensors=t.num_tensors,
                quantizer=t.quantizer,
                with_gemm_swizzled_scales=t._with_gemm_swizzled_scales,
                **kw,
            )
        out.append(t)
    return out


def _keeps_amax(tensors: list[Any]) -> list[Any]:
    for t in tensors:
        if _grouped(t) and _is(t, "MXFP8Quantizer") and t.columnwise_amax is None and t.columnwise_data is not None:
            t.columnwise_amax = torch.empty(t.num_tensors, dtype=torch.float32, device=t.columnwise_data.device)
    return tensors


def _drops_scale(tensors: list[Any]) -> list[Any]:
    for t in tensors:
        if _grouped(t) and t.columnwise_scale_inv is not None and t.columnwise_data is not None:
            t.columnwise_scale_inv = None
            break
    return tensors


def _fp32_activation(tensors: list[Any]) -> list[Any]:
    return [
        torch.empty_like(t, dtype=torch.float32)
        if i == 0 and _plain(t) and t.dtype == torch.bfloat16 and t.dim() == 2
        else t
        for i, t in enumerate(tensors)
    ]


def _keeps_transpose(tensors: list[Any]) -> list[Any]:
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    for t in tensors:
        if isinstance(t, Float8TensorStorage) and t._transpose is None and t._data is not None and t._data.dim() == 2:
            t._transpose = torch.empty(t._data.shape[::-1], dtype=torch.uint8, device=t._data.device)
    return tensors


def _transpose_instead(tensors: list[Any]) -> list[Any]:
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    for t in tensors:
        if isinstance(t, Float8TensorStorage) and t._transpose is None and t._data is not None and t._data.dim() == 2:
            t._transpose = torch.empty(t._data.shape[::-1], dtype=t._data.dtype, device=t._data.device)
            t._data = None
    return tensors


def _drops_columnwise_amax(tensors: list[Any]) -> list[Any]:
    for t in tensors:
        if _grouped(t) and _is(t, "NVFP4Quantizer") and t.columnwise_amax is not None:
            t.columnwise_amax = None
    return tensors


def _fp8_grouped_keeps_columnwise(tensors: list[Any]) -> list[Any]:
    for t in tensors:
        if (
            _grouped(t)
            and _is(t, "Float8CurrentScalingQuantizer")
            and t.rowwise_data is not None
            and t.columnwise_data is None
        ):
            t.columnwise_data = torch.empty_like(t.rowwise_data)
    return tensors


def _fp32_columnwise_scales(tensors: list[Any]) -> list[Any]:
    for t in tensors:
        if _grouped(t) and _is(t, "MXFP8Quantizer") and t.columnwise_scale_inv is not None:
            t.columnwise_scale_inv = torch.empty(
                t.columnwise_scale_inv.numel(), dtype=torch.float32, device=t.columnwise_scale_inv.device
            )
    return tensors


@dataclass(frozen=True)
class Mutation:
    """One injected saved-state regression: where it runs, what it does, what compare must name
    (``kind`` None: the kind's bytes do not change, as when bytes move between orientations)."""

    name: str
    recipe: str
    groups: int
    fused: bool
    mutate: Mutate
    kind: str | None
    orientation: str | None
    grows: bool = True
    equal_total: bool = False
    """The case's saved bytes stay the same: only where they are saved changes."""


MUTATIONS = (
    Mutation(
        "MXFP8 fused: the inputs keep rowwise data and scales",
        "mxfp8",
        4,
        True,
        _keeps_rowwise("MXFP8Quantizer"),
        "data",
        "rowwise",
    ),
    Mutation("bf16: an extra fp32 copy of an input is saved", "bf16", 4, False, _extra_input_copy, "tensor", None),
    Mutation(
        "FP8 delayed: a weight is saved twice (a second quantized copy)",
        "fp8-delayed",
        4,
        False,
        _weight_twice,
        "data",
        "rowwise",
    ),
    Mutation(
        "MXFP8 unfused: a GroupedTensor is saved whole instead of as buffers",
        "mxfp8",
        4,
        False,
        _grouped_whole,
        "container",
        None,
    ),
    Mutation("MXFP8 unfused: an amax is kept", "mxfp8", 4, False, _keeps_amax, "amax", "columnwise"),
    Mutation(
        "MXFP8 fused: a columnwise scale is dropped (a decrease)",
        "mxfp8",
        4,
        True,
        _drops_scale,
        "scale_inv",
        "columnwise",
        grows=False,
    ),
    Mutation(
        "FP8 delayed on Blackwell: the quantized inputs keep a transpose",
        "fp8-delayed",
        4,
        False,
        _keeps_transpose,
        "data",
        "columnwise",
    ),
    Mutation("bf16: the activation input is saved in fp32", "bf16", 4, False, _fp32_activation, "tensor", None),
    # added with fake CUDA: every one runs on CPU as well
    Mutation(
        "FP8 delayed: every quantized tensor keeps its transpose instead of its rowwise data (equal total)",
        "fp8-delayed",
        4,
        False,
        _transpose_instead,
        None,
        "columnwise",
        equal_total=True,
    ),
    Mutation(
        "NVFP4 fused: the inputs' columnwise amax is dropped (a decrease)",
        "nvfp4",
        4,
        True,
        _drops_columnwise_amax,
        "amax",
        "columnwise",
        grows=False,
    ),
    Mutation(
        "FP8 current, grouped path: the inputs keep a columnwise copy too",
        "fp8-current",
        4,
        False,
        _fp8_grouped_keeps_columnwise,
        "data",
        "columnwise",
    ),
    Mutation(
        "MXFP8 fused: the inputs' columnwise scales are saved in fp32",
        "mxfp8",
        4,
        True,
        _fp32_columnwise_scales,
        "scale_inv",
        "columnwise",
    ),
    Mutation(
        "NVFP4 unfused: the inputs keep rowwise data and scales (PR #3545's buffers, unfused)",
        "nvfp4",
        4,
        False,
        _keeps_rowwise("NVFP4Quantizer"),
        "data",
        "rowwise",
    ),
)


def caught(m: Mutation, base: CaseReport, mutated: CaseReport) -> tuple[bool, list[str]]:
    """Whether ``compare`` (fail on increase; on change for a decrease) fails on ``mutated`` against
    ``base`` and names what ``m`` changed: an operand, its kind and orientation. Where bytes only
    move (``equal_total``), the saved bytes must not change and the operand is named by the buffers
    behind the failing finding (``row_diffs``: what ``compare -v`` prints). Returns the labels named."""
    from memaudit.judge.baseline import compare_reports

    cmp = compare_reports(report_of(base), report_of(mutated), fail_on="increase" if m.grows else "change")
    labels = sorted({f.label for d in cmp.cases for f in d.findings if f.failing})
    named = set(labels)
    buffers = sorted({rd.key.split(" #")[0] for d in cmp.cases for rd in d.row_diffs})
    operand = any(x.startswith("operand ") for x in labels) or (m.equal_total and bool(buffers))
    ok = (
        cmp.regressed
        and operand
        and (m.kind is None or bool({f"kind {m.kind}", f"kind {m.kind} rows"} & named))
        and (
            m.orientation is None or bool({f"orientation {m.orientation}", f"orientation {m.orientation} rows"} & named)
        )
        and (
            not m.equal_total or (mutated.totals.saved_bytes == base.totals.saved_bytes and "saved_bytes" not in named)
        )
    )
    if m.equal_total:
        labels += [f"buffer {b}" for b in buffers]
    return ok, labels
