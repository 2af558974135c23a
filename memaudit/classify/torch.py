"""Plain PyTorch tensors: format, kind, storage identity, and generic subclass unwrapping.

Nothing here reads tensor data or syncs a device: only metadata (shape, dtype, storage pointer
and size) is touched.
"""

from __future__ import annotations

from typing import Any

import torch

_FORMATS = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
for _name, _short in (
    ("float8_e4m3fn", "fp8_e4m3"),
    ("float8_e5m2", "fp8_e5m2"),
    ("float8_e8m0fnu", "e8m0"),
    ("float4_e2m1fn_x2", "fp4_e2m1x2"),
):
    if hasattr(torch, _name):
        _FORMATS[getattr(torch, _name)] = _short


def dtype_name(dtype: torch.dtype) -> str:
    """'torch.bfloat16' -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def format_of(dtype: torch.dtype) -> str:
    """Short format name of a plain dtype (bf16, fp32, int64, ...)."""
    return _FORMATS.get(dtype, dtype_name(dtype))


def kind_of(dtype: torch.dtype) -> str:
    """Integer and bool tensors are metadata (split sizes, offsets); floating ones are tensors."""
    return "tensor" if (dtype.is_floating_point or dtype.is_complex) else "metadata"


def is_wrapper_subclass(t: torch.Tensor) -> bool:
    """A traceable wrapper subclass (``__tensor_flatten__``) holds its bytes in inner tensors."""
    return type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter and hasattr(t, "__tensor_flatten__")


def inner_tensors(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Inner tensors of a traceable wrapper subclass, by attribute name."""
    names, _ctx = t.__tensor_flatten__()
    return [(n, getattr(t, n)) for n in names if isinstance(getattr(t, n, None), torch.Tensor)]


def storage_info(t: torch.Tensor) -> tuple[Any, int, int] | None:
    """(storage key, storage nbytes, byte offset) of a dense tensor, or None if it has no storage."""
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    ptr = st.data_ptr()
    nbytes = st.nbytes()
    offset = t.storage_offset() * t.element_size()
    if ptr == 0 or nbytes == 0:
        # Empty or meta storage: no address to share, so key it by the storage object itself.
        key: Any = ("noptr", id(t))
    else:
        key = (t.device.type, t.device.index, ptr)
    return key, nbytes, offset


def describe(t: torch.Tensor) -> dict[str, Any]:
    """Row fields of a plain tensor (no storage id yet)."""
    return {
        "kind": kind_of(t.dtype),
        "format": format_of(t.dtype),
        "shape": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "bytes": t.numel() * t.element_size(),
        "device": str(t.device),
        "is_parameter": is_parameter(t),
    }


def is_parameter(t: torch.Tensor) -> bool:
    """A Parameter, or a view of one (``nn.Linear`` saves ``weight.t()`` for backward)."""
    if isinstance(t, torch.nn.Parameter):
        return True
    try:
        return isinstance(t._base, torch.nn.Parameter)
    except (AttributeError, RuntimeError):  # pragma: no cover - exotic subclasses
        return False
