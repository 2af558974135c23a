"""Stand-ins for the TE 2.20.2 kernel entry points the grouped MLP's forward reaches, and those
``te.Linear``, the norms and ``te.LayerNormLinear`` reach (``generic_gemm`` allocating its output,
``layernorm_fwd`` / ``rmsnorm_fwd`` and their backwards).

Each allocates what the C++ entry point allocates (buffers for the usage flags, shapes, dtypes,
padding, one storage per buffer) and returns what the C++ returns; contents are not computed,
except for the small metadata tensors later Python code reads (offsets: computed with torch).
Where TE's Python has a constructor that mirrors the C++ allocation, it is used: the quantizers'
``inner_tensor_specs`` / ``TensorSpec`` pure-Python allocation (``dynamo/tensor_spec.py``,
``quantized_tensor.py:503-560``, "Mirror the C++ quantizer allocation (csrc/quantizer.cpp)").
The rest cite the C++ (``transformer_engine/pytorch/csrc``, v2.20.2).

Which entry points the grouped MLP's forward reaches was measured on the H200
(``bench/device/trace_te_kernels.py``); ``bench/verify/standin_diff.py`` checks every stand-in the
grouped MLP reaches against the real kernel where it runs (the norm stand-ins and ``generic_gemm``'s
own output are not checked on a GPU yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from memaudit.te.emulate.allocation import by_constructor, has_tensor_spec

# ---- quantized tensors -------------------------------------------------------------------------


def _fp8_delayed_specs(quantizer: Any, shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Float8Quantizer (delayed scaling) has no ``inner_tensor_specs`` in 2.20.2; its C++
    ``Float8Quantizer::create_tensor`` allocates as ``Float8CurrentScalingQuantizer``'s Python
    mirror does (csrc/quantizer.cpp): ``_data`` for rowwise use or on non-TN archs, ``_transpose``
    for columnwise use on TN-only archs, and a one-element fp32 ``_scale_inv``."""
    from transformer_engine.pytorch.utils import is_non_tn_fp8_gemm_supported

    non_tn = is_non_tn_fp8_gemm_supported()
    specs: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    if quantizer.rowwise_usage or non_tn:
        specs["_data"] = (shape, torch.uint8)
    if quantizer.columnwise_usage and not non_tn:
        specs["_transpose"] = ((shape[-1], *shape[:-1]), torch.uint8)
    specs["_scale_inv"] = ((1,), torch.float32)
    return specs


def _sm() -> int:
    """The (emulated) SM number the C++ checks read, e.g. 100."""
    from transformer_engine.pytorch.utils import get_device_compute_capability

    major, minor = get_device_compute_capability()
    return 10 * major + minor


def _flat(shape: Sequence[int]) -> tuple[int, int]:
    """(Mf, Kf): the flattened 2-D dims of an N-D shape."""
    return math.prod(shape[:-1]), shape[-1]


def _nvfp4_swizzled(quantizer: Any, shape: Sequence[int]) -> bool:
    """``nvfp4_emits_gemm_swizzled_scales`` (quantizer.cpp:1934-1964)."""
    m, k = _flat(shape)
    if not quantizer.optimize_for_gemm:
        return False
    if quantizer.with_rht:
        return m % 64 == 0 and k % 128 == 0 and 100 <= _sm() <= 110
    return (
        quantizer.with_2d_quantization
        and not _nvfp4_flag(quantizer, "row_scaled_nvfp4")
        and not _nvfp4_flag(quantizer, "nvfp4_use_4over6")
        and m % 128 == 0
        and k % 128 == 0
        and 100 <= _sm() <= 110
    )


NVFP4_OPTIONS = ("row_scaled_nvfp4", "nvfp4_use_4over6", "nvfp4_e4m3_max")
"""NVFP4 quantizer options TE 2.17 on passes to its storage classes (2.16 and older have none)."""


def _nvfp4_flag(q: Any, name: str) -> bool:
    """An NVFP4 quantizer option, False where the TE version has none."""
    return bool(getattr(q, name, False))


def nvfp4_options(q: Any) -> dict[str, Any]:
    """The NVFP4 options the quantizer has, as keyword arguments of TE's storage classes."""
    return {name: getattr(q, name) for name in NVFP4_OPTIONS if hasattr(q, name)}


def empty_quantized(quantizer: Any, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> Any:
    """A quantized tensor of ``shape`` as the quantizer's C++ ``create_tensor`` allocates it
    (quantizer.cpp; storage class or wrapper as ``internal`` says), followed by the post-quantize
    swizzle ``tex.quantize`` applies (cast.cpp:79-84), holding the caller's quantizer."""
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

    shape = tuple(int(s) for s in shape)
    if isinstance(quantizer, Float8Quantizer) and has_tensor_spec():
        specs = _fp8_delayed_specs(quantizer, shape)
        inner = {k: torch.empty(s, dtype=d, device=device) for k, (s, d) in specs.items()}
        meta = {
            "cls": _float8_class(quantizer),
            "is_tensor": not quantizer.internal,
            "requires_grad": False,
            "nontensor_kwargs": {"fp8_dtype": quantizer.dtype, "quantizer": quantizer, "fake_dtype": dtype},
        }
        out = meta["cls"].__tensor_unflatten__(inner, meta, shape, _contiguous_strides(shape))  # type: ignore[attr-defined]
    elif has_tensor_spec():
        from transformer_engine.pytorch.dynamo.tensor_spec import TensorSpec

        out = TensorSpec(shape, dtype, quantizer, device=torch.device(device)).create_tensor()
    else:  # TE 2.18 and older: no Python mirror; the same rules through the constructors
        out = by_constructor(quantizer, shape, dtype, device)
    if isinstance(quantizer, NVFP4Quantizer):
        # C++ differs from the Python mirror (nvfp4_tensor.py:354-400) in two ways: the swizzle
        # flag follows the kernel rule, and a row-scaled columnwise amax has K entries.
        out._with_gemm_swizzled_scales = _nvfp4_swizzled(quantizer, shape)
        if _nvfp4_flag(quantizer, "row_scaled_nvfp4") and out._amax_columnwise is not None:
            out._amax_columnwise = torch.empty(shape[-1], dtype=torch.float32, device=device)
        if quantizer.optimize_for_gemm and not out._with_gemm_swizzled_scales:
            swizzle_scales_for_gemm_(out)
    out._quantizer = quantizer  # the C++ result holds the caller's quantizer, not a copy
    return out


def _float8_class(quantizer: Any) -> type:
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Tensor
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    return Float8TensorStorage if quantizer.internal else Float8Tensor


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def quantize(tensor: torch.Tensor, quantizer: Any, output: Any = None, noop: Any = None) -> Any:
    """``tex.quantize`` (csrc/extensions/cast.cpp): fills ``output`` when given, else allocates
    with the quantizer's ``create_tensor``."""
    if output is not None:
        return output
    if quantizer is None:
        return torch.empty_like(tensor)
    return empty_quantized(quantizer, tensor.shape, tensor.dtype, tensor.device)


def split_quantize(
    tensor: torch.Tensor,
    split_sections: Sequence[int],
    quantizer_list: Sequence[Any],
    disable_bulk_allocation: bool = False,
) -> list[Any]:
    """``tex.split_quantize`` (cast.cpp:1895-2059): one quantized tensor per split of dim 0.

    Float8 delayed/current scaling (or ``disable_bulk_allocation``): per split ``create_tensor``
    (cast.cpp:2025-2033). All-MXFP8, all-block-scaling and all-NVFP4 lists are bulk-allocated
    (cast.cpp:1945-1975): each buffer is a ``from_blob`` view with a Storage of its own, so a
    separate tensor of the same shape and dtype stands in for it; the storage class is built
    without ``fake_dtype`` (its ``_dtype`` is float32) and copies the quantizer.
    """
    from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

    rest = tuple(tensor.shape[1:])
    shapes = [(int(n), *rest) for n in split_sections]
    kinds = {type(q) for q in quantizer_list}
    bulk = None if disable_bulk_allocation or len(kinds) != 1 else next(iter(kinds))
    if bulk not in (MXFP8Quantizer, Float8BlockQuantizer, NVFP4Quantizer):
        return [empty_quantized(q, s, tensor.dtype, tensor.device) for s, q in zip(shapes, quantizer_list, strict=True)]
    return [_bulk_storage(q, s, tensor.device) for s, q in zip(shapes, quantizer_list, strict=True)]


def _bulk_storage(q: Any, shape: tuple[int, ...], device: torch.device) -> Any:
    """One split of a bulk ``split_quantize``: BULK_MXFP8 (cast.cpp:1096-1204),
    BULK_FP8_BLOCKWISE (cast.cpp:986-1094) or BULK_NVFP4 (cast.cpp:1206-1441)."""
    from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.storage.float8_blockwise_tensor_storage import (
        Float8BlockwiseQTensorStorage,
    )
    from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage
    from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage

    def empty(s: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(s), dtype=dtype, device=device)

    row, col = q.rowwise_usage, q.columnwise_usage
    m, k = _flat(shape)
    if isinstance(q, MXFP8Quantizer):
        return MXFP8TensorStorage(
            empty(shape, torch.uint8) if row else None,
            empty(q.get_scale_shape(shape, False), torch.uint8) if row else None,
            empty(shape, torch.uint8) if col else None,
            empty(q.get_scale_shape(shape, True), torch.uint8) if col else None,
            q.dtype,
            q,
            q.optimize_for_gemm,
        )
    if isinstance(q, Float8BlockQuantizer):
        return Float8BlockwiseQTensorStorage(
            empty(shape, torch.uint8) if row else None,
            empty(q.get_scale_shape(shape, False), torch.float32) if row else None,
            empty((shape[-1], *shape[:-1]), torch.uint8) if col else None,
            empty(q.get_scale_shape(shape, True), torch.float32) if col else None,
            q.dtype,
            q,
            q.block_scaling_dim == 2,
        )
    swizzled = q.optimize_for_gemm and q.with_rht and m % 128 == 0 and k % 128 == 0 and 100 <= _sm() <= 110
    return NVFP4TensorStorage(
        empty((*shape[:-1], shape[-1] // 2), torch.uint8) if row else None,
        empty(q.get_scale_shape(shape, False), torch.uint8) if row else None,
        empty((shape[-1], *shape[:-2], shape[-2] // 2), torch.uint8) if col else None,
        empty(q.get_scale_shape(shape, True), torch.uint8) if col else None,
        empty((m if _nvfp4_flag(q, "row_scaled_nvfp4") else 1,), torch.float32) if row else None,
        empty((k if _nvfp4_flag(q, "row_scaled_nvfp4") else 1,), torch.float32) if col else None,
        q.dtype,
        q,
        swizzled,
        **nvfp4_options(q),
    )


def group_quantize(
    tensor: torch.Tensor,
    quantizer: Any,
    num_tensors: int,
    first_dims: torch.Tensor | None,
    last_dims: torch.Tensor | None = None,
    tensor_offsets: torch.Tensor | None = None,
    noop_flag: Any = None,
    output: Any = None,
) -> Any:
    """``tex.group_quantize`` (cast.cpp:277-427) via ``create_grouped_tensor`` (quantizer.cpp):
    separate 1-D buffers sized from the logical totals (not per member)."""
    if output is not None:
        return output
    return grouped_empty(tensor, quantizer, int(num_tensors), first_dims, last_dims, tensor_offsets)


def grouped_empty(
    tensor: torch.Tensor,
    q: Any,
    g: int,
    first_dims: torch.Tensor | None,
    last_dims: torch.Tensor | None,
    tensor_offsets: torch.Tensor | None,
) -> Any:
    """``Quantizer::create_grouped_tensor`` for current scaling (quantizer.cpp:770-873: one fp32
    [G] scale_inv, set as the scale of each usage that has data, 798-814), block
    scaling (1170-1280), MXFP8 (1615-1723) and NVFP4 (2129-2244)."""
    from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer
    from transformer_engine.pytorch.tensor.grouped_tensor import GroupedTensor
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer
    from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage
    from transformer_engine.pytorch.utils import is_non_tn_fp8_gemm_supported

    dev = tensor.device
    l0, l1 = int(tensor.shape[0]), int(tensor.shape[1])
    total = l0 * l1
    both_vary = first_dims is not None and last_dims is not None
    row, col = q.rowwise_usage, q.columnwise_usage

    def empty(n: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(int(n), dtype=dtype, device=dev)

    bufs: dict[str, Any] = {}
    swizzled = False
    extra: dict[str, Any] = {}
    if isinstance(q, Float8CurrentScalingQuantizer):
        non_tn = is_non_tn_fp8_gemm_supported()
        bufs["scale"], bufs["amax"] = empty(g, torch.float32), empty(g, torch.float32)
        with_row, with_col = row or non_tn, col and not non_tn
        shared = empty(g, torch.float32) if with_row or with_col else None  # one tensor for both usages
        if with_row:
            bufs["data"], bufs["scale_inv"] = empty(total, torch.uint8), shared
        if with_col:
            bufs["columnwise_data"], bufs["columnwise_scale_inv"] = empty(total, torch.uint8), shared
    elif isinstance(q, Float8BlockQuantizer):
        if row:
            bufs["data"] = empty(total, torch.uint8)
            bufs["scale_inv"] = empty(math.prod(q.get_scale_shape((l0, l1), False)), torch.float32)
        if col:
            slack = math.ceil(l1 / 128) * 4 * (g - 1) if q.block_scaling_dim == 2 and g > 1 else 0
            bufs["columnwise_data"] = empty(total, torch.uint8)
            bufs["columnwise_scale_inv"] = empty(math.prod(q.get_scale_shape((l0, l1), True)) + slack, torch.float32)
    elif isinstance(q, MXFP8Quantizer):
        if row:
            bufs["data"] = empty(total, torch.uint8)
            bufs["scale_inv"] = empty(total // 32 if both_vary else _ru(l0, 128) * _ru(l1 // 32, 4), torch.uint8)
        if col:
            bufs["columnwise_data"] = empty(total, torch.uint8)
            bufs["columnwise_scale_inv"] = empty(
                total // 32 if both_vary else _ru(l0 // 32, 4) * _ru(l1, 128), torch.uint8
            )
        swizzled = q.optimize_for_gemm
    elif isinstance(q, NVFP4Quantizer):
        if row:
            bufs["data"] = empty(total // 2, torch.uint8)
            bufs["scale_inv"] = empty(_ru(l0, 128) * _ru(l1 // 16, 4), torch.uint8)
            bufs["amax"] = empty(l0 if _nvfp4_flag(q, "row_scaled_nvfp4") else g, torch.float32)
        if col:
            bufs["columnwise_data"] = empty(total // 2, torch.uint8)
            bufs["columnwise_scale_inv"] = empty(_ru(l1, 128) * _ru(l0 // 16, 4), torch.uint8)
            bufs["columnwise_amax"] = empty(g, torch.float32)
        swizzled = q.optimize_for_gemm
        extra = nvfp4_options(q)
    else:
        raise NotImplementedError(
            f"group_quantize stand-in: {type(q).__name__} (TE's group_quantize supports MXFP8, NVFP4, current and "
            "block scaling)"
        )
    if tensor_offsets is None and first_dims is not None and last_dims is None:
        # quantizer.cpp:118-180: nvte_splits_to_offsets(first_dims, stride=L1), int64 [G+1]
        tensor_offsets = torch.cat(
            [
                torch.zeros(1, dtype=torch.int64, device=first_dims.device),
                torch.cumsum(first_dims.to(torch.int64), 0) * l1,
            ]
        )
    cls = GroupedTensorStorage if q.internal else GroupedTensor
    return cls(
        shape=(l0, l1),
        dtype=tensor.dtype,
        num_tensors=g,
        quantizer=q,
        stride=[l1, 1],
        first_dims=first_dims,
        last_dims=last_dims,
        tensor_offsets=tensor_offsets,
        with_gemm_swizzled_scales=swizzled,
        **bufs,
        **extra,
    )


def _ru(x: int, a: int) -> int:
    return -(-int(x) // a) * a


def nvfp4_group_quantize_with_amax(
    tensor: torch.Tensor,
    quantizer: Any,
    num_tensors: int,
    first_dims: Any,
    *args: Any,
    rowwise_amax: torch.Tensor | None = None,
    columnwise_amax: torch.Tensor | None = None,
    tensor_offsets: Any = None,
) -> Any:
    """``tex.nvfp4_group_quantize_with_amax`` (cast.cpp:429-503): as group_quantize, then the
    caller's amaxes replace the allocated ones. TE 2.19 on: ``(..., first_dims, last_dims=None, *,
    rowwise_amax, columnwise_amax, tensor_offsets)``; TE 2.17-2.18: ``(..., first_dims,
    rowwise_amax, columnwise_amax, tensor_offsets=None)`` (grouped_mlp.py:200-208 in 2.17.1)."""
    last_dims = None
    if len(args) == 2 and rowwise_amax is None and columnwise_amax is None:
        rowwise_amax, columnwise_amax = args
    elif len(args) <= 1:
        last_dims = args[0] if args else None
    else:
        raise TypeError(
            f"nvfp4_group_quantize_with_amax: {4 + len(args)} positional arguments fit no TE version's signature"
        )
    if rowwise_amax is None or columnwise_amax is None:
        raise TypeError("nvfp4_group_quantize_with_amax: rowwise_amax and columnwise_amax are required")
    out = grouped_empty(tensor, quantizer, int(num_tensors), first_dims, last_dims, tensor_offsets)
    out.amax, out.columnwise_amax = rowwise_amax, columnwise_amax
    return out


def nvfp4_quantize_with_amax(
    tensor: torch.Tensor, quantizer: Any, rowwise_amax: torch.Tensor, columnwise_amax: torch.Tensor
) -> Any:
    """``tex.nvfp4_quantize_with_amax`` (cast.cpp:91-134): create_tensor, the caller's amaxes
    replace the allocated ones, then the post-quantize swizzle."""
    out = empty_quantized(quantizer, tensor.shape, tensor.dtype, tensor.device)
    out._amax_rowwise, out._amax_columnwise = rowwise_amax, columnwise_amax
    return out


def splits_to_offsets_multi(
    split_sizes: torch.Tensor,
    device: Any,
    *,
    strides: Sequence[int],
    include_leading_zero: Sequence[bool],
    dtypes: Sequence[torch.dtype],
    bulk_allocate: bool = False,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``tex.splits_to_offsets_multi``: ``split_sizes`` on ``device``, and per stride the
    cumulative offsets ``cumsum(split_sizes) * stride`` (with a leading 0 where asked), each in
    its dtype. These are metadata later Python reads, so their values are computed."""
    sizes = split_sizes.to(device=device)
    out = []
    for stride, lead, dtype in zip(strides, include_leading_zero, dtypes, strict=True):
        offs = torch.cumsum(sizes.to(torch.int64), 0) * int(stride)
        if lead:
            offs = torch.cat([torch.zeros(1, dtype=torch.int64, device=offs.device), offs])
        out.append(offs.to(dtype))
    return sizes, out


def scaled_swiglu(input: torch.Tensor, act_scales: torch.Tensor, quantizer: Any, glu_interleave_size: int = 0) -> Any:  # noqa: A002 - TE's name
    """``tex.scaled_swiglu``: the activation output, last dim halved, in the input's dtype or
    quantized with ``quantizer``."""
    shape = (*input.shape[:-1], input.shape[-1] // 2)
    if quantizer is None:
        return torch.empty(shape, dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, shape, input.dtype, input.device)


def activation(input: torch.Tensor, quantizer: Any, *args: Any, shape_divisor: int = 1) -> Any:  # noqa: A002 - TE's name
    """``tex.gelu`` and the other unscaled activations (csrc/extensions/activation.cpp:17-126,
    ``activation_helper``): the output is the quantizer's ``create_tensor`` (a plain tensor for
    no quantizer, ``NoneQuantizer``, quantizer.cpp:225-233) of the input's shape with the last
    dim divided by ``shape_divisor`` (:29-32; 2 for the gated ones, :243-346), in the input's
    dtype. The unfused path's high-precision scratch (:58-68) does not outlive the call."""
    shape = (*input.shape[:-1], input.shape[-1] // shape_divisor)
    if quantizer is None:
        return torch.empty(shape, dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, shape, input.dtype, input.device)


def dactivation(grad: torch.Tensor, input: torch.Tensor, quantizer: Any, *args: Any) -> Any:  # noqa: A002 - TE's name
    """``tex.dgelu`` and the other unscaled activation backwards (activation.cpp:128-239,
    ``dactivation_helper``): ``grad_input`` is the quantizer's ``create_tensor`` of the input's
    shape in its dtype (:141-145)."""
    if quantizer is None:
        return torch.empty(tuple(input.shape), dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, input.shape, input.dtype, input.device)


def _gated(*args: Any) -> Any:
    """The gated activations (``glu``, ``geglu``, ``swiglu``, ...): last dim halved
    (activation.cpp:251-346, ``shape_divisor`` 2)."""
    return activation(*args[:2], shape_divisor=2)


def clamped_swiglu(input: torch.Tensor, quantizer: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    """``tex.clamped_swiglu`` (activation.cpp:340-346): as the gated activations, last dim halved;
    ``limit`` and ``alpha`` (by keyword in TE 2.14, by position later, with more options) change
    values only."""
    return activation(input, quantizer, shape_divisor=2)


def clamped_dswiglu(grad: torch.Tensor, input: torch.Tensor, quantizer: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    """``tex.clamped_dswiglu`` (activation.cpp:348-351): as ``dactivation``; ``limit``, ``alpha`` and
    the later options change values only."""
    return dactivation(grad, input, quantizer)


ACTIVATIONS = ("gelu", "qgelu", "relu", "srelu", "silu")
"""Unscaled activations whose output has the input's shape (activation.cpp:243-322)."""
GATED_ACTIVATIONS = ("glu", "geglu", "qgeglu", "reglu", "sreglu", "swiglu", "situglu", "clamped_swiglu")
"""Gated activations whose output halves the last dim (activation.cpp:251-346); the last one's
backward is ``clamped_dswiglu`` (:348-351), the others' ``d`` + name."""


def scaled_dactivation(
    grad: torch.Tensor,
    input: torch.Tensor,
    act_scales: torch.Tensor,
    quantizer: Any,  # noqa: A002 - TE's name
    *args: Any,
) -> tuple[Any, torch.Tensor | None]:
    """``tex.scaled_dswiglu`` and the other scaled activation backwards (activation.cpp:
    ``scaled_dactivation_helper`` and ``scaled_dactivation_compute``; the last positional argument
    is ``compute_scale_grad``): ``grad_input`` is ``empty_like`` the (contiguous) input, quantized
    with ``quantizer`` when one is given (``maybe_quantize``); ``grad_scales`` is ``empty_like``
    the scales when asked for, else None."""
    if not args or not isinstance(args[-1], bool):
        raise TypeError("scaled dactivation stand-in: compute_scale_grad (bool) must be the last positional argument")
    grad_scales = (
        torch.empty(tuple(act_scales.shape), dtype=act_scales.dtype, device=act_scales.device) if args[-1] else None
    )
    if quantizer is None:
        grad_input = torch.empty(tuple(input.shape), dtype=input.dtype, device=input.device)
    else:
        grad_input = empty_quantized(quantizer, input.shape, input.dtype, input.device)
    return grad_input, grad_scales


def _none(*args: Any, **kwargs: Any) -> None:
    return None


def _return_d(*args: Any) -> Any:
    """``tex.te_general_grouped_gemm_for_discrete_in`` / ``_for_grouped_tensor`` /
    ``_for_discrete_out`` (gemm.cpp:639-836): write the preallocated ``D`` (``args[4]``: a grouped
    tensor, or for ``_discrete_out`` the list of wgrad tensors) and return it; they allocate
    nothing that outlives the call."""
    return args[4]


def te_general_grouped_gemm(*args: Any) -> Any:
    """``tex.te_general_grouped_gemm``: writes the preallocated outputs (``args[4]``), returns
    the bias list it was given (``args[7]``; gemm.py:504 reads it)."""
    return args[7]


def _torch_dtype(te_dtype: Any) -> torch.dtype:
    """A ``tex.DType`` as the torch dtype TE maps it to (``constants.py``: ``TE_DType_To_Torch``)."""
    from transformer_engine.pytorch.constants import TE_DType_To_Torch

    return TE_DType_To_Torch[te_dtype]


def _logical_shape(t: Any) -> tuple[int, ...]:
    """The logical shape the C++ reads of a GEMM operand: a tensor's shape, a storage's ``size()``."""
    return tuple(int(d) for d in (t.shape if isinstance(t, torch.Tensor) else t.size()))


def gemm_output_shape(a: Sequence[int], transa: bool, b: Sequence[int], transb: bool) -> tuple[int, ...]:
    """``getGemmOutputShape`` (csrc/extensions/gemm.cpp:41-82) without comm+GEMM overlap: B's
    leading dims (B1 when B is transposed), then A0 (A transposed) or A1."""
    a0, a1 = _flat(a)
    b0, b1 = _flat(b)
    if (a1 if transa else a0) != (b0 if transb else b1):
        raise RuntimeError(f"Invalid matrix dimensions for GEMM (A=({a0},{a1}), transa={transa}, B=({b0},{b1}))")
    lead = (b1,) if transb else tuple(b[:-1])
    return (*lead, a0 if transa else a1)


def generic_gemm(
    A: Any, transA: bool, B: Any, transB: bool, D: Any, quantizer: Any, output_dtype: Any, *args: Any, **kwargs: Any
) -> Any:
    """``tex.generic_gemm`` (csrc/extensions/gemm.cpp:144-413): returns (D, bias_grad,
    pre_gelu_out, extra_output). A preallocated D is written and returned. Otherwise D is
    ``createOutputTensor`` (gemm.cpp:201-203, 138-142): the quantizer's ``create_tensor`` of the
    output shape (gemm.cpp:181-182) in ``out_dtype`` (else A's dtype, gemm.cpp:198). With a bias
    and ``grad``, bias_grad is a new [B's last dim] tensor in the output's dtype (gemm.cpp:233-240);
    with ``gelu`` and not ``grad``, pre_gelu_out is a new tensor of the output shape in the bias
    dtype for quantized operands, else the output's (gemm.cpp:248-259); extra_output is returned
    as given (gemm.cpp:408-412). The unquantized scratch output (gemm.cpp:227-230) does not
    outlive the call."""
    bias, bias_type, gelu, _gelu_in, grad = (list(args) + [None] * 5)[:5]
    low_precision = _is_quantized(A, B)
    shape = gemm_output_shape(_logical_shape(A), transA, _logical_shape(B), transB)
    device = B.device
    if output_dtype is not None:
        out_dtype = _torch_dtype(output_dtype)
    elif isinstance(A, torch.Tensor) and not _is_quantized(A):
        out_dtype = A.dtype
    else:
        raise NotImplementedError("generic_gemm stand-in: a quantized A with no out_dtype is not emulated")
    if D is None and quantizer is None:
        D = torch.empty(shape, dtype=out_dtype, device=device)
    elif D is None:
        D = empty_quantized(quantizer, shape, out_dtype, device)
    bias_grad = None
    if bias is not None and grad:
        bias_grad = torch.empty((_logical_shape(B)[-1],), dtype=out_dtype, device=device)
    pre_gelu = None
    if gelu and not grad:
        gelu_dtype = _torch_dtype(bias_type) if low_precision else out_dtype
        pre_gelu = torch.empty(shape, dtype=gelu_dtype, device=device)
    return D, bias_grad, pre_gelu, kwargs.get("extra_output")


def _is_quantized(*ts: Any) -> bool:
    from transformer_engine.pytorch.quantized_tensor import QuantizedTensorStorage

    return any(isinstance(t, QuantizedTensorStorage) for t in ts)


def _norm_output(x: Any, out: Any, quantizer: Any, out_dtype: Any) -> Any:
    """The normalization's output (csrc/extensions/normalization.cpp:133-143 / 370-380): ``out``
    when given, else the quantizer's ``create_tensor`` of the input's shape in ``out_dtype`` (a
    plain tensor with no quantizer); the unquantized scratch copy and amax buffer of the unfused
    paths (:146-168) do not outlive the call."""
    if out is not None:
        return out
    dtype = _torch_dtype(out_dtype)
    if quantizer is None:
        return torch.empty(tuple(x.shape), dtype=dtype, device=x.device)
    return empty_quantized(quantizer, x.shape, dtype, x.device)


def layernorm_fwd(
    input: torch.Tensor,  # noqa: A002 - TE's name
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    out: Any,
    quantizer: Any,
    out_dtype: Any,
    sm_margin: int = 0,
    zero_centered_gamma: bool = False,
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """``tex.layernorm_fwd`` (csrc/extensions/normalization.cpp:61-214): (out, mu, rsigma); mu and
    rsigma are new fp32 [outer] tensors, outer the product of the input's leading dims (:86-87)."""
    outer = _flat(input.shape)[0]
    mu = torch.empty((outer,), dtype=torch.float32, device=input.device)
    rsigma = torch.empty((outer,), dtype=torch.float32, device=input.device)
    return _norm_output(input, out, quantizer, out_dtype), mu, rsigma


def rmsnorm_fwd(
    input: torch.Tensor,  # noqa: A002 - TE's name
    weight: torch.Tensor,
    eps: float,
    out: Any,
    quantizer: Any,
    out_dtype: Any,
    sm_margin: int = 0,
    zero_centered_gamma: bool = False,
) -> tuple[Any, None, torch.Tensor]:
    """``tex.rmsnorm_fwd`` (csrc/extensions/normalization.cpp:305-451): (out, None, rsigma); rsigma
    a new fp32 [outer] tensor (:325)."""
    outer = _flat(input.shape)[0]
    rsigma = torch.empty((outer,), dtype=torch.float32, device=input.device)
    return _norm_output(input, out, quantizer, out_dtype), None, rsigma


def layernorm_bwd(
    dz: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, rsigma: torch.Tensor, gamma: torch.Tensor, *args: Any
) -> list[torch.Tensor]:
    """``tex.layernorm_bwd`` (normalization.cpp:13-59): dx ``empty_like`` x, dgamma and dbeta
    ``empty_like`` gamma (:23-25)."""
    return [torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(gamma)]


def rmsnorm_bwd(dz: torch.Tensor, x: torch.Tensor, rsigma: torch.Tensor, gamma: torch.Tensor, *args: Any) -> list[Any]:
    """``tex.rmsnorm_bwd`` (normalization.cpp:216-257): dx ``empty_like`` x, dgamma ``empty_like``
    gamma (:224-225)."""
    return [torch.empty_like(x), torch.empty_like(gamma)]


def copy_data_ptrs_to_device(tensors: Sequence[torch.Tensor], device: Any) -> torch.Tensor:
    """``tex.copy_data_ptrs_to_device``: one int64 pointer per tensor, on ``device``."""
    return torch.empty(len(tensors), dtype=torch.int64, device=device)


def swizzle_scales_for_gemm_(tensor: Any) -> None:
    """``tex.swizzle_scales_for_gemm_`` (swizzle.cpp:609-665): MXFP8/NVFP4 scales not yet
    swizzled are replaced by new tensors of the same shape (uint8 for MXFP8's E8M0,
    float8_e4m3fn for NVFP4), and the flag is set."""
    from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage

    if getattr(tensor, "_with_gemm_swizzled_scales", False):
        return
    dtype = torch.float8_e4m3fn if isinstance(tensor, NVFP4TensorStorage) else torch.uint8
    for attr in ("_rowwise_scale_inv", "_columnwise_scale_inv"):
        old = getattr(tensor, attr, None)
        if old is not None:
            setattr(tensor, attr, torch.empty(old.shape, dtype=dtype, device=old.device))
    tensor._with_gemm_swizzled_scales = True


def grouped_swizzle_for_gemm(tensor: Any, rowwise: bool, columnwise: bool) -> None:
    """``tex.grouped_swizzle_for_gemm`` (swizzle.cpp:358-508): MXFP8 grouped only (NVFP4: no-op),
    skipped if swizzled; new uint8 scales (2-D for uniform members, else the input's 1-D shape),
    ``None`` for a usage not asked for."""
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

    if not isinstance(tensor.quantizer, MXFP8Quantizer) or tensor._with_gemm_swizzled_scales:
        return
    g = tensor.num_tensors
    uniform = tensor.first_dims is None and tensor.last_dims is None
    l0, l1 = (int(d) for d in tensor.logical_shape)
    m = l0 // g

    def new(old: torch.Tensor | None, shape2d: tuple[int, int]) -> torch.Tensor | None:
        if old is None:
            return None
        return torch.empty(shape2d if uniform else tuple(old.shape), dtype=torch.uint8, device=old.device)

    tensor.scale_inv = new(tensor.scale_inv, (g * _ru(m, 128), _ru(-(-l1 // 32), 4))) if rowwise else None
    tensor.columnwise_scale_inv = (
        new(tensor.columnwise_scale_inv, (g * _ru(l1, 128), _ru(-(-m // 32), 4))) if columnwise else None
    )
    tensor._with_gemm_swizzled_scales = True


def swizzle_scales_and_pack_ptrs_for_discrete_weights(
    data_tensors: Sequence[torch.Tensor], scale_tensors: Sequence[torch.Tensor], swizzle_type: str, device: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``tex.grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights``
    (grouped_mlp_experimental.cpp:23-153): (data_ptrs, scale_ptrs) are views of one int64 [2G]
    buffer; the swizzled scales one uint8 [G * ru(numel(scale_0), 16)]."""
    g = len(data_tensors)
    if g == 0:
        ptrs = torch.empty(0, dtype=torch.int64, device=device)
        return ptrs, ptrs.clone(), torch.empty(0, dtype=torch.uint8, device=device)
    ptrs = torch.empty(2 * g, dtype=torch.int64, device=device)
    swizzled = torch.empty(g * _ru(scale_tensors[0].numel(), 16), dtype=torch.uint8, device=device)
    return ptrs.narrow(0, 0, g), ptrs.narrow(0, g, g), swizzled


STANDINS: dict[str, Callable[..., Any]] = {
    "quantize": quantize,
    "split_quantize": split_quantize,
    "splits_to_offsets_multi": splits_to_offsets_multi,
    "scaled_swiglu": scaled_swiglu,
    **{name: activation for name in ACTIVATIONS},
    **{name: _gated for name in GATED_ACTIVATIONS[:-1]},
    "clamped_swiglu": clamped_swiglu,
    **{f"d{name}": dactivation for name in (*ACTIVATIONS, *GATED_ACTIVATIONS[:-1])},
    "clamped_dswiglu": clamped_dswiglu,
    "scaled_dswiglu": scaled_dactivation,
    "scaled_clamped_dswiglu": scaled_dactivation,
    "scaled_dsrelu": scaled_dactivation,
    "fused_amax_and_scale_update_after_reduction": _none,  # updates recipe state in place
    "te_general_grouped_gemm": te_general_grouped_gemm,
    "te_general_grouped_gemm_for_discrete_in": _return_d,
    "te_general_grouped_gemm_for_grouped_tensor": _return_d,
    "te_general_grouped_gemm_for_discrete_out": _return_d,
    "generic_gemm": generic_gemm,
    "layernorm_fwd": layernorm_fwd,
    "rmsnorm_fwd": rmsnorm_fwd,
    "layernorm_bwd": layernorm_bwd,
    "rmsnorm_bwd": rmsnorm_bwd,
    "copy_data_ptrs_to_device": copy_data_ptrs_to_device,
    "swizzle_scales_for_gemm_": swizzle_scales_for_gemm_,
    "grouped_swizzle_for_gemm": grouped_swizzle_for_gemm,
    "group_quantize": group_quantize,
    "nvfp4_group_quantize_with_amax": nvfp4_group_quantize_with_amax,
    "nvfp4_quantize_with_amax": nvfp4_quantize_with_amax,
    "grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights": (
        swizzle_scales_and_pack_ptrs_for_discrete_weights
    ),
}
"""``tex`` entry point -> stand-in."""

NEVER_REAL = frozenset({
    "te_general_grouped_gemm", "te_general_grouped_gemm_for_discrete_in",
    "te_general_grouped_gemm_for_grouped_tensor", "te_general_grouped_gemm_for_discrete_out", "generic_gemm",
})  # fmt: skip
"""Always stand-ins: the GEMMs write outputs TE's Python preallocated (so they add no saved
state), and cuBLAS refuses some of them off Blackwell (te-internals §10)."""
