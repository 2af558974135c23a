"""Quantized-tensor allocation across TE versions: whether the imported TE has the Python
allocation mirror (``dynamo/tensor_spec.py``, TE 2.19 on), and, where it does not (2.18 and
older), the same buffers built with memaudit's own copy of those rules through the storage and
tensor classes' constructors (:func:`by_constructor`). Used by :func:`memaudit.te.emulate.standins.empty_quantized`;
:mod:`.families` says what else differs between TE versions."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch


def has_tensor_spec() -> bool:
    """The imported TE has the Python allocation mirror (``dynamo/tensor_spec.py``, TE 2.19 on)."""
    try:
        return importlib.util.find_spec("transformer_engine.pytorch.dynamo.tensor_spec") is not None
    except ModuleNotFoundError:
        return False


# ---- allocation without TensorSpec ---------------------------------------------------------------


def quantized_specs(q: Any, shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The buffers a quantizer's C++ ``create_tensor`` allocates (constructor argument -> (shape,
    dtype)): TE 2.20.2's ``inner_tensor_specs`` (mxfp8_tensor.py, nvfp4_tensor.py,
    float8_tensor.py: "Mirror the C++ quantizer allocation (csrc/quantizer.cpp)"), for quantizers
    that lack it."""
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer, Float8Quantizer
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer
    from transformer_engine.pytorch.utils import is_non_tn_fp8_gemm_supported

    row, col = q.rowwise_usage, q.columnwise_usage
    out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    if isinstance(q, MXFP8Quantizer):
        if row:
            out["rowwise_data"] = (shape, torch.uint8)
            out["rowwise_scale_inv"] = (tuple(q.get_scale_shape(shape, columnwise=False)), torch.uint8)
        if col:
            out["columnwise_data"] = (shape, torch.uint8)
            out["columnwise_scale_inv"] = (tuple(q.get_scale_shape(shape, columnwise=True)), torch.uint8)
    elif isinstance(q, NVFP4Quantizer):
        if row:
            out["rowwise_data"] = ((*shape[:-1], shape[-1] // 2), torch.uint8)
            out["rowwise_scale_inv"] = (tuple(q.get_scale_shape(shape, columnwise=False)), torch.uint8)
        if col:
            colshape = (shape[-1], *shape[:-1])
            out["columnwise_data"] = ((*colshape[:-1], colshape[-1] // 2), torch.uint8)
            out["columnwise_scale_inv"] = (tuple(q.get_scale_shape(shape, columnwise=True)), torch.uint8)
        if row:
            out["amax_rowwise"] = (
                (math.prod(shape[:-1]),) if getattr(q, "row_scaled_nvfp4", False) else (1,),
                torch.float32,
            )
        if col:
            out["amax_columnwise"] = ((1,), torch.float32)
    elif isinstance(q, Float8Quantizer | Float8CurrentScalingQuantizer):
        non_tn = is_non_tn_fp8_gemm_supported()
        if row or non_tn:
            out["data"] = (shape, torch.uint8)
        if col and not non_tn:
            out["data_transpose"] = ((shape[-1], *shape[:-1]), torch.uint8)
        out["fp8_scale_inv"] = ((1,), torch.float32)
    else:
        raise NotImplementedError(
            f"empty_quantized stand-in without TensorSpec: {type(q).__name__} "
            "(MXFP8, NVFP4 and FP8 quantizers are modelled)"
        )
    return out


def _nontensor(q: Any) -> dict[str, Any]:
    """The constructor's non-buffer arguments, as TE 2.20.2's ``storage_metadata`` gives them."""
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

    if isinstance(q, MXFP8Quantizer):
        return {"fp8_dtype": q.dtype, "quantizer": q, "with_gemm_swizzled_scales": q.optimize_for_gemm}
    if isinstance(q, NVFP4Quantizer):
        kw = {"fp4_dtype": q.dtype, "quantizer": q, "with_gemm_swizzled_scales": q.optimize_for_gemm}
        for name in ("row_scaled_nvfp4", "nvfp4_use_4over6", "nvfp4_e4m3_max"):
            if hasattr(q, name):
                kw[name] = getattr(q, name)
        return kw
    return {"fp8_dtype": q.dtype, "quantizer": q}


def _classes(q: Any) -> tuple[type, type]:
    """(storage class, tensor class) of a quantizer's output."""
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer, MXFP8Tensor
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer, NVFP4Tensor
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage
    from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage
    from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage

    if isinstance(q, MXFP8Quantizer):
        return MXFP8TensorStorage, MXFP8Tensor
    if isinstance(q, NVFP4Quantizer):
        return NVFP4TensorStorage, NVFP4Tensor
    return Float8TensorStorage, Float8Tensor


BUFFERS = {
    "MXFP8TensorStorage": ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv"),
    "NVFP4TensorStorage": (
        "rowwise_data",
        "rowwise_scale_inv",
        "columnwise_data",
        "columnwise_scale_inv",
        "amax_rowwise",
        "amax_columnwise",
    ),
    "Float8TensorStorage": ("data", "fp8_scale_inv", "data_transpose"),
}
"""Every buffer argument of the storage classes' constructors (None where not allocated)."""


def by_constructor(q: Any, shape: tuple[int, ...], dtype: torch.dtype, device: Any) -> Any:
    """A quantizer's ``create_tensor`` output built with its classes' constructors (the storage
    class when the quantizer is ``internal``, else the tensor class), with a copy of the quantizer
    as TensorSpec holds (the caller sets the caller's own)."""
    specs = quantized_specs(q, shape)
    storage, tensor = _classes(q)
    names = BUFFERS[storage.__name__]
    buffers = {k: torch.empty(specs[k][0], dtype=specs[k][1], device=device) if k in specs else None for k in names}
    copy = q.copy() if hasattr(q, "copy") else q
    kw = {**_nontensor(q), "quantizer": copy}
    if q.internal:
        return storage(**buffers, **kw, fake_dtype=dtype)
    return tensor(shape=shape, dtype=dtype, requires_grad=False, device=torch.device(device), **buffers, **kw)
