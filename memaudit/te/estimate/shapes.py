"""TE 2.20.2's shape, padding and allocation rules per recipe (te-internals §5.2-§5.4).

Dtype sizes and formats, ``prepare_for_saving`` slot orders, scale-inverse shapes with and without
TE's tile padding, the buffers of one quantized tensor, the C++ grouped allocation and the layout
of ``bulk_allocate``. ``tests/te/test_estimate_te.py`` checks them against TE's own classes on CPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from memaudit.te.capture.layout import BUFFER_SLOTS, GROUPED_SLOTS

FORMAT = {
    "bf16": "bf16",
    "fp8-delayed": "fp8",
    "fp8-current": "fp8",
    "fp8-block": "fp8-block",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",
}
ITEMSIZE = {
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e8m0fnu": 1,
    "bfloat16": 2,
    "float32": 4,
    "int32": 4,
    "int64": 8,
}
HP_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
PLAIN_FORMAT = {"bfloat16": "bf16", "float32": "fp32", "int64": "int64", "int32": "int32"}

# prepare_for_saving slot orders (te-internals §5.4).
SLOTS: dict[str, tuple[str, ...]] = {
    "Float8TensorStorage": ("_data", "_transpose", "_scale_inv"),
    "MXFP8TensorStorage": ("_rowwise_data", "_columnwise_data", "_rowwise_scale_inv", "_columnwise_scale_inv"),
    "Float8BlockwiseQTensorStorage": (
        "_rowwise_data",
        "_columnwise_data",
        "_rowwise_scale_inv",
        "_columnwise_scale_inv",
    ),
    "NVFP4TensorStorage": (
        "_rowwise_data",
        "_columnwise_data",
        "_rowwise_scale_inv",
        "_columnwise_scale_inv",
        "_amax_rowwise",
        "_amax_columnwise",
    ),
    "GroupedTensorStorage": GROUPED_SLOTS,
}
SINGLE_CONTAINER = {
    "fp8-delayed": "Float8TensorStorage",
    "fp8-current": "Float8TensorStorage",
    "fp8-block": "Float8BlockwiseQTensorStorage",
    "mxfp8": "MXFP8TensorStorage",
    "nvfp4": "NVFP4TensorStorage",
}
SLOT_INFO = BUFFER_SLOTS  # slot -> (kind, orientation), shared with the classifier


def rup(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m``."""
    return -(-x // m) * m


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_shape(recipe: str, m: int, k: int, columnwise: bool, *, block_dim: int = 1) -> tuple[int, int]:
    """Scale-inverse shape of an (M, K) tensor, as TE's ``Quantizer.get_scale_shape``.

    MXFP8 (``tensor/mxfp8_tensor.py``): 1x32 blocks, 128x4 padding. NVFP4 (``tensor/nvfp4_tensor.py``):
    1x16 blocks, 128x4 padding. Block FP8 (``tensor/float8_blockwise_tensor.py``): 128-blocks, compact
    layout, inner dim padded to 4; ``block_dim`` 1 (1x128, inputs) or 2 (128x128, weights).
    """
    if recipe == "mxfp8":
        if columnwise:
            return (rup(m // 32, 4), rup(k, 128))
        return (rup(m, 128), rup(k // 32, 4))
    if recipe == "nvfp4":
        if columnwise:
            return (rup(k, 128), rup(_cdiv(m, 16), 4))
        return (rup(m, 128), rup(_cdiv(k, 16), 4))
    if recipe == "fp8-block":
        if block_dim == 2:
            if columnwise:
                return (_cdiv(k, 128), rup(_cdiv(m, 128), 4))
            return (_cdiv(m, 128), rup(_cdiv(k, 128), 4))
        if columnwise:
            return (_cdiv(m, 128), rup(k, 4))
        return (_cdiv(k, 128), rup(m, 4))
    raise ValueError(f"no block scales for recipe {recipe!r}")


def unpadded_scale_elems(recipe: str, m: int, k: int, columnwise: bool, *, block_dim: int = 1) -> int:
    """Scale elements an (M, K) tensor needs without TE's tile padding (for the padding breakdown)."""
    if recipe == "mxfp8":
        return _cdiv(m, 32) * k if columnwise else m * _cdiv(k, 32)
    if recipe == "nvfp4":
        return k * _cdiv(m, 16) if columnwise else m * _cdiv(k, 16)
    if recipe == "fp8-block":
        if block_dim == 2:
            return _cdiv(m, 128) * _cdiv(k, 128)
        return _cdiv(m, 128) * k if columnwise else _cdiv(k, 128) * m
    raise ValueError(f"no block scales for recipe {recipe!r}")


def _scale_dtype(recipe: str) -> str:
    return "float32" if recipe in ("fp8-delayed", "fp8-current", "fp8-block") else "uint8"


def single_buffers(
    recipe: str,
    m: int,
    k: int,
    *,
    rowwise: bool = True,
    columnwise: bool = True,
    arch: str = "sm90",
    block_dim: int = 1,
) -> list[tuple[str, tuple[int, ...], str]]:
    """Buffers of one quantized (M, K) tensor as TE allocates it, in ``prepare_for_saving`` order.

    Each entry is ``(slot, shape, dtype)``; absent slots are left out. Per-tensor FP8 follows
    ``Float8CurrentScalingQuantizer.inner_tensor_specs`` (``tensor/float8_tensor.py``): ``_data``
    when rowwise or on a non-TN arch (SM100), ``_transpose`` when columnwise on a TN-only arch (SM90).
    """
    if recipe in ("fp8-delayed", "fp8-current"):
        non_tn = arch == "sm100"
        out: list[tuple[str, tuple[int, ...], str]] = []
        if rowwise or non_tn:
            out.append(("_data", (m, k), "uint8"))
        if columnwise and not non_tn:
            out.append(("_transpose", (k, m), "uint8"))
        out.append(("_scale_inv", (1,), "float32"))
        return out
    sd = _scale_dtype(recipe)
    if recipe == "mxfp8":
        row_d, col_d = (m, k), (m, k)
    elif recipe == "fp8-block":
        row_d, col_d = (m, k), (k, m)
    elif recipe == "nvfp4":
        row_d, col_d = (m, k // 2), (k, m // 2)
    else:
        raise ValueError(f"recipe {recipe!r} is not quantized")
    bufs: list[tuple[str, tuple[int, ...], str]] = []
    if rowwise:
        bufs.append(("_rowwise_data", row_d, "uint8"))
    if columnwise:
        bufs.append(("_columnwise_data", col_d, "uint8"))
    if rowwise:
        bufs.append(("_rowwise_scale_inv", scale_shape(recipe, m, k, False, block_dim=block_dim), sd))
    if columnwise:
        bufs.append(("_columnwise_scale_inv", scale_shape(recipe, m, k, True, block_dim=block_dim), sd))
    if recipe == "nvfp4":
        if rowwise:
            bufs.append(("_amax_rowwise", (1,), "float32"))
        if columnwise:
            bufs.append(("_amax_columnwise", (1,), "float32"))
    return bufs


def grouped_buffers_cpp(
    recipe: str,
    tokens: int,
    k: int,
    groups: int,
    *,
    rowwise: bool = True,
    columnwise: bool = True,
    arch: str = "sm100",
    block_dim: int = 1,
) -> dict[str, tuple[int, str]]:
    """C++ ``create_grouped_tensor`` (``tex.group_quantize``) for a (T, K) input split along T.

    Scale buffers are sized from the **totals** (``get_scale_shape((T, K))``), not per group
    (``csrc/quantizer.cpp``; te-internals §5.2), plus ``ceil(K/128)*4*(G-1)`` slack for 2-D block
    FP8 columnwise. ``first_dims`` and ``tensor_offsets`` are the caller's tensors and not included.
    """
    total = tokens * k
    out: dict[str, tuple[int, str]] = {}
    if recipe in ("mxfp8", "nvfp4", "fp8-block"):
        data = total // 2 if recipe == "nvfp4" else total
        sd = _scale_dtype(recipe)
        if rowwise:
            out["rowwise_data"] = (data, "uint8")
            out["scale_inv"] = (prod(scale_shape(recipe, tokens, k, False, block_dim=block_dim)), sd)
        if columnwise:
            slack = _cdiv(k, 128) * 4 * (groups - 1) if recipe == "fp8-block" and block_dim == 2 and groups > 1 else 0
            out["columnwise_data"] = (data, "uint8")
            out["columnwise_scale_inv"] = (prod(scale_shape(recipe, tokens, k, True, block_dim=block_dim)) + slack, sd)
        if recipe == "nvfp4":
            if rowwise:
                out["amax"] = (groups, "float32")
            if columnwise:
                out["columnwise_amax"] = (groups, "float32")
        return out
    if recipe == "fp8-current":
        non_tn = arch == "sm100"
        if rowwise or non_tn:
            out["rowwise_data"] = (total, "uint8")
            out["scale_inv"] = (groups, "float32")
        if columnwise and not non_tn:
            out["columnwise_data"] = (total, "uint8")
            out["columnwise_scale_inv"] = (groups, "float32")
        out["amax"] = (groups, "float32")
        out["scale"] = (groups, "float32")
        return out
    raise ValueError(f"recipe {recipe!r} has no grouped-quantize allocation modelled")


def prod(shape: Iterable[int]) -> int:
    """Number of elements of ``shape``."""
    p = 1
    for d in shape:
        p *= d
    return p
