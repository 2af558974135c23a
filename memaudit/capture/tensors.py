"""Plain PyTorch tensors: format, kind, storage identity, and generic subclass unwrapping.

Nothing here reads tensor data or syncs a device: only metadata (shape, dtype, storage object
and size) is touched.

Storage identity is the storage *object*: PyTorch keeps one Python ``UntypedStorage`` per C++
storage for as long as that storage lives, and ``weakref.ref`` returns the same reference object
for it every time. A :class:`Buffer` holds that reference, so two buffers share a storage exactly
when they hold the same reference object. This works where addresses do not: on ``meta`` (every
storage has address 0) and after an address was freed and reused.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
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
    names, _ctx = t.__tensor_flatten__()  # type: ignore[attr-defined]
    return [(n, getattr(t, n)) for n in names if isinstance(getattr(t, n, None), torch.Tensor)]


def is_parameter(t: torch.Tensor) -> bool:
    """A Parameter, or a view of one (``nn.Linear`` saves ``weight.t()`` for backward)."""
    if isinstance(t, torch.nn.Parameter):
        return True
    try:
        return isinstance(t._base, torch.nn.Parameter)
    except (AttributeError, RuntimeError):  # pragma: no cover - exotic subclasses
        return False


def storage_ref(t: torch.Tensor) -> tuple[Any, int] | None:
    """(weak reference to the untyped storage, storage nbytes), or None if ``t`` has no storage."""
    try:
        st = t.untyped_storage()
        return weakref.ref(st), st.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def has_real_storage(t: torch.Tensor) -> bool:
    """False for a tensor whose storage is a placeholder (a wrapper subclass that is not traceable).

    ``data_ptr()`` of the untyped storage is metadata (no device access); a wrapper made with
    ``_make_wrapper_subclass`` has a storage object whose data pointer raises. ``meta`` tensors
    have real (zero-address) storages.
    """
    try:
        t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


_NAMES: dict[tuple[torch.dtype, torch.device], tuple[str, str, str, str]] = {}
"""(dtype, device) -> (kind, format, dtype name, device name): row fields computed once per pair."""


@dataclass(slots=True)
class Buffer:
    """Metadata of one saved buffer, taken when it was packed (no reference to the tensor)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    sref: Any  # weak reference to the storage object, or None
    storage_bytes: int
    offset: int  # bytes
    bytes: int
    is_parameter: bool
    fields: Any = None  # classifier fields (dict), or a function of the dtype returning them

    def row_fields(self) -> dict[str, Any]:
        """The row fields this buffer defines (classifier fields last, so they win)."""
        key = (self.dtype, self.device)
        names = _NAMES.get(key)
        if names is None:
            names = _NAMES[key] = (kind_of(self.dtype), format_of(self.dtype), dtype_name(self.dtype), str(self.device))
        row: dict[str, Any] = {
            "kind": names[0],
            "format": names[1],
            "shape": list(self.shape),
            "dtype": names[2],
            "bytes": self.bytes,
            "device": names[3],
            "is_parameter": self.is_parameter,
        }
        if self.sref is not None:
            row["storage_bytes"] = self.storage_bytes
            row["storage_offset"] = self.offset
        f = self.fields
        if f:
            row.update(f(self.dtype) if callable(f) else f)
        return row


def buffer_of(t: torch.Tensor, fields: Any = None, *, is_param: bool | None = None) -> Buffer:
    """A :class:`Buffer` for a dense tensor (any subclass); storage-less tensors get ``sref=None``."""
    info = storage_ref(t)
    elt = t.element_size()
    sref, nbytes = info if info is not None else (None, 0)
    return Buffer(
        shape=tuple(t.shape),
        dtype=t.dtype,
        device=t.device,
        sref=sref,
        storage_bytes=nbytes,
        offset=t.storage_offset() * elt if sref is not None else 0,  # type: ignore[arg-type]
        bytes=t.numel() * elt,
        is_parameter=is_parameter(t) if is_param is None else is_param,
        fields=fields,
    )


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are views of one storage."""
    ra, rb = storage_ref(a), storage_ref(b)
    return ra is not None and rb is not None and ra[0] is rb[0]


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj`` (a tensor, or nested lists, tuples and dict values)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from iter_tensors(v)
