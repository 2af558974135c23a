"""Kernel stand-ins per TE version family: what differs between TE versions for the emulation.

The stand-ins of :mod:`.standins` are written against TE 2.20.2. Older TE Python (a release, or a
git revision laid over the installed compiled parts, :mod:`memaudit.te.history`) differs in three
ways that matter to the emulation, each detected in the imported TE's own Python (not by version
number, so that a git revision between releases gets what it has):

- **Allocation** (``allocation``): TE 2.19 added a pure-Python mirror of the C++ quantizer
  allocation (``dynamo/tensor_spec.py``: ``TensorSpec``, ``Quantizer.inner_tensor_specs``), which
  the 2.20.2 stand-ins use. Where it is absent (2.18 and older), ``empty_quantized`` builds the
  same buffers with memaudit's own copy of those rules (:func:`quantized_specs`, TE 2.20.2's
  ``inner_tensor_specs`` of the MXFP8, NVFP4 and FP8 quantizers) through the storage and tensor
  classes' constructors, which take the same arguments from 2.14 to 2.20.2 (checked by
  ``tests/test_te_history.py`` against ``TensorSpec`` on the installed TE).
- **Entry points by name**: ``tex.splits_to_offsets(first_dims, logical_last_dim)`` (GroupedLinear
  up to 2.18; csrc/extensions/misc.cpp) next to 2.19's ``splits_to_offsets_multi``.
- **Fused-op modules and their registration** (``forward_grouped_mlp`` / ``backward_grouped_mlp``
  up to 2.16, ``grouped_mlp`` from 2.17): handled in :mod:`.context` by reading each module's own
  import-time registrations.

Each entry point's call sites in a TE tree are checked against its stand-in's signature by
``tests/test_te_history.py`` (:func:`call_sites`): the signature drift test.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def has_tensor_spec() -> bool:
    """The imported TE has the Python allocation mirror (``dynamo/tensor_spec.py``, TE 2.19 on)."""
    try:
        return importlib.util.find_spec("transformer_engine.pytorch.dynamo.tensor_spec") is not None
    except ModuleNotFoundError:
        return False


def family() -> str:
    """The imported TE's allocation family: ``tensor-spec`` (2.19 on) or ``constructors``."""
    return "tensor-spec" if has_tensor_spec() else "constructors"


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
            out["amax_rowwise"] = ((math.prod(shape[:-1]),) if getattr(q, "row_scaled_nvfp4", False) else (1,), torch.float32)
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
        raise NotImplementedError(f"empty_quantized stand-in without TensorSpec: {type(q).__name__} "
                                  "(MXFP8, NVFP4 and FP8 quantizers are modelled)")
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
    "NVFP4TensorStorage": ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv",
                           "amax_rowwise", "amax_columnwise"),
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


# ---- entry points by name ------------------------------------------------------------------------


def splits_to_offsets(first_dims: torch.Tensor, logical_last_dim: int) -> torch.Tensor:
    """``tex.splits_to_offsets`` (TE 2.17-2.18 csrc/extensions/misc.cpp:23-39): int64 [G+1],
    ``[0, cumsum(first_dims) * logical_last_dim]`` on first_dims' device (metadata later Python
    reads, so computed)."""
    offs = torch.cumsum(first_dims.to(torch.int64), 0) * int(logical_last_dim)
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=offs.device), offs])


def swiglu(input: torch.Tensor, quantizer: Any) -> Any:  # noqa: A002 - TE's name
    """``tex.swiglu`` (csrc/extensions/activation.cpp): the GLU output, last dim halved, in the
    input's dtype or quantized with ``quantizer`` (TE 2.15-2.18's ``ScaledSwiGLU._glu_forward``
    calls it with None and scales in Python, ops/basic/swiglu.py:561-562 in 2.17.1)."""
    from memaudit.te.emulate.standins import empty_quantized

    shape = (*input.shape[:-1], input.shape[-1] // 2)
    if quantizer is None:
        return torch.empty(shape, dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, shape, input.dtype, input.device)


def get_device_pointer_for_data_and_scales(data_tensors: list[torch.Tensor], scale_tensors: list[torch.Tensor],
                                           swizzle: bool = False, rowwise: bool = True, data_dtype: Any = None) -> tuple[Any, ...]:
    """``tex.get_device_pointer_for_data_and_scales`` (TE 2.15-2.16 csrc/extensions/utils.cpp:51-162,
    the fused MXFP8 op's discrete weights): int64 [G] data pointers and int64 [G] scale pointers,
    each a device tensor of its own (``collect_pointers_in_device_tensor``), and the swizzled
    scales' keep-alive buffer: one uint8 buffer of every scale tensor's bytes, each start rounded
    up to 16 (an empty uint8 tensor without ``swizzle``)."""
    g = len(data_tensors)
    if g == 0:
        raise ValueError("data_tensors must not be empty.")
    device = data_tensors[0].device
    if swizzle:
        total = 0
        for t in scale_tensors:
            total = -(-total // 16) * 16 + int(t.numel())  # E8M0 / E4M3 scales: one byte each
        keep = torch.empty(total, dtype=torch.uint8, device=device)
    else:
        keep = torch.empty(0, dtype=torch.uint8, device=device)
    return (torch.empty(g, dtype=torch.int64, device=device), torch.empty(g, dtype=torch.int64, device=device), keep)


def transform_and_copy_data_ptrs_to_device(transform_type: str, tensors: list[torch.Tensor], device: Any) -> tuple[Any, Any]:
    """``tex.transform_and_copy_data_ptrs_to_device`` (main between PR #3048 and 2.17,
    csrc/extensions/utils.cpp:41-150 at 920a7db1a): without a transform, the pointers only (int64
    [G]) and None; with a ``uniform_*_swizzle``, the pointers of the swizzled scales and their one
    uint8 buffer, each tensor's scale bytes (one byte per E8M0 / E4M3 scale) rounded up to 16."""
    g = len(tensors)
    ptrs = torch.empty(g, dtype=torch.int64, device=device)
    if not transform_type or g == 0:
        return ptrs, None
    stride = -(-int(tensors[0].numel()) // 16) * 16
    return ptrs, torch.empty(stride * g, dtype=torch.uint8, device=device)


FAMILY_STANDINS: dict[str, Callable[..., Any]] = {
    "transform_and_copy_data_ptrs_to_device": transform_and_copy_data_ptrs_to_device,
    "splits_to_offsets": splits_to_offsets,
    "swiglu": swiglu,
    "get_device_pointer_for_data_and_scales": get_device_pointer_for_data_and_scales,
}
"""Entry points older TE Python reaches that TE 2.20.2's grouped-MLP forward does not."""


def standins(base: dict[str, Callable[..., Any]], tex_names: set[str]) -> dict[str, Callable[..., Any]]:
    """The stand-in table for the imported TE: ``base`` plus the family's, for names ``tex`` has."""
    return {k: v for k, v in {**base, **FAMILY_STANDINS}.items() if k in tex_names}


# ---- the signature drift check -------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    """One call of a ``tex`` entry point in TE's Python: where, how many positional arguments,
    which keywords (``*args`` / ``**kwargs`` at a call site make it unknowable: ``starred``)."""

    name: str
    file: str
    line: int
    positional: int
    keywords: tuple[str, ...]
    starred: bool

    def binds(self, fn: Callable[..., Any]) -> str | None:
        """None where ``fn`` accepts this call's arguments, else why not."""
        if self.starred:
            return None
        try:
            inspect.signature(fn).bind(*range(self.positional), **dict.fromkeys(self.keywords))
        except TypeError as exc:
            return f"{self.file}:{self.line} tex.{self.name}({self.positional} positional, keywords {list(self.keywords)}): {exc}"
        return None


def call_sites(tree: Path, names: set[str]) -> Iterator[CallSite]:
    """Calls ``tex.NAME(...)`` (and of names imported from ``transformer_engine_torch``) in a TE tree's
    torch-side Python, for ``names`` (``sub.name`` for a submodule's function)."""
    root = Path(tree) / "transformer_engine"
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] == "jax":
            continue
        try:
            module = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        aliases = {a.asname or a.name for n in ast.walk(module) if isinstance(n, ast.Import)
                   for a in n.names if a.name == "transformer_engine_torch"}
        imported = {a.asname or a.name: a.name for n in ast.walk(module)
                    if isinstance(n, ast.ImportFrom) and n.module == "transformer_engine_torch" for a in n.names}
        for node in ast.walk(module):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases:
                name = f.attr
            elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
                  and isinstance(f.value.value, ast.Name) and f.value.value.id in aliases):
                name = f"{f.value.attr}.{f.attr}"
            elif isinstance(f, ast.Name) and f.id in imported:
                name = imported[f.id]
            if name in names:
                starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
                yield CallSite(name, rel.as_posix(), node.lineno, len(node.args),
                               tuple(k.arg for k in node.keywords if k.arg is not None), starred)
