"""Analytic model of what TE 2.20.2 saves for backward in the grouped MLP (``memaudit estimate``).

``te.ops.Sequential(GroupedLinear(G, H, 2F), ScaledSwiGLU, GroupedLinear(G, F, H))`` saves, per
path, a set of buffers whose shapes follow from (T, H, F, G, splits) and TE's layout rules alone.
This module computes that set as :class:`~memaudit.report.Row` s in the format ``memaudit run``
measures, so budgets and ``compare`` work on estimates too. It is pure arithmetic: no torch, no TE.

Every rule cites TE 2.20.2 source (paths relative to ``transformer_engine/pytorch/``; C++ from the
``transformer_engine_torch`` sdist ``csrc/``) and docs/te-internals.md (shared docs) sections.
Where TE and this module disagree, TE is right: ``tests/test_estimate_te.py`` checks the shape
rules against TE's own classes on CPU.

Paths (te-internals §1, §2):

* ``fused``: the CuTeDSL fused grouped MLP (``ops/fused/grouped_mlp.py``), SM100 only, MXFP8/NVFP4.
* ``unfused-grouped``: ``GroupedLinear._fuser_forward_grouped_tensor`` (graph-safe grouped tensors).
* ``unfused-split``: ``GroupedLinear._fuser_forward_split_quantize`` (``tex.split_quantize``), what
  an H200 with cuBLASLt < 13.4 runs for BF16 / FP8 delayed / FP8 current.

Variants: ``te-2.20`` (what 2.20.2 saves), ``pr3545`` (NVFP4 fused-path rowwise input data and
scales pruned, amax kept), ``ideal`` (only what the backward GEMMs read: columnwise copies of
quantized inputs and weights, their scales and columnwise amax, plus activations and metadata).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import CaseReport, Row, Totals, compute_totals
from memaudit.spec import ALIGNMENT, RECIPES, CaseSpec, default_splits, validate_splits
from memaudit.te.layout import BUFFER_SLOTS, GROUPED_SLOTS

TARGET = "te-grouped-mlp"
TE_VERSION = "2.20.2"
PATHS = ("fused", "unfused-grouped", "unfused-split")
VARIANTS = ("te-2.20", "pr3545", "ideal")
ARCHS = ("sm90", "sm100")
"""sm90: Hopper (H100/H200; FP8 GEMMs are TN-only, so FP8 keeps a transpose). sm100: Blackwell."""
QUANTIZED = ("fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")
FUSABLE = ("mxfp8", "nvfp4")
DEVICE = "cuda:0"

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

# Dimension rules: (multiple, why). TE raises (or its tests skip) otherwise.
DIM_MULTIPLE = {
    "fp8-delayed": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "fp8-current": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "fp8-block": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "mxfp8": (32, "MXFP8 requires tensor dims divisible by 32 (csrc/quantizer.cpp MXFP8Quantizer::create_tensor)"),
    "nvfp4": (16, "NVFP4 requires tensor dims divisible by 16 (csrc/quantizer.cpp NVFP4Quantizer::create_tensor)"),
}
FUSED_DIM_MULTIPLE = 64  # validate_grouped_mlp_dims, ops/fused/grouped_mlp.py:911-941
FUSED_TOKEN_MULTIPLE = 128  # ops/fused/grouped_mlp.py:1203-1204 raises ValueError

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


# ---------------------------------------------------------------------------------------------
# Shape rules (te-internals §5.3): mirror TE's Python get_scale_shape / make_empty / grouped alloc.
# ---------------------------------------------------------------------------------------------
def _rup(x: int, m: int) -> int:
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
            return (_rup(m // 32, 4), _rup(k, 128))
        return (_rup(m, 128), _rup(k // 32, 4))
    if recipe == "nvfp4":
        if columnwise:
            return (_rup(k, 128), _rup(_cdiv(m, 16), 4))
        return (_rup(m, 128), _rup(_cdiv(k, 16), 4))
    if recipe == "fp8-block":
        if block_dim == 2:
            if columnwise:
                return (_cdiv(k, 128), _rup(_cdiv(m, 128), 4))
            return (_cdiv(m, 128), _rup(_cdiv(k, 128), 4))
        if columnwise:
            return (_cdiv(m, 128), _rup(k, 4))
        return (_cdiv(k, 128), _rup(m, 4))
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


def grouped_buffers_py(
    recipe: str,
    shapes: Sequence[tuple[int, int]],
    *,
    rowwise: bool = True,
    columnwise: bool = True,
    arch: str = "sm90",
    block_dim: int = 1,
) -> dict[str, tuple[int, str]]:
    """``GroupedTensorStorage.make_grouped_tensor_with_shapes`` (``tensor/storage/grouped_tensor_storage.py``).

    Returns ``{slot: (numel, dtype)}`` for the non-None slots. Python-side grouped allocation sizes
    scales as the **sum over members** of each member's padded scale shape (used for single grouped
    weight parameters); compare :func:`grouped_buffers_cpp`.
    """
    g = len(shapes)
    firsts = [s[0] for s in shapes]
    lasts = [s[1] for s in shapes]
    uni_first = all(f == firsts[0] for f in firsts)
    uni_last = all(v == lasts[0] for v in lasts)
    out: dict[str, tuple[int, str]] = {}
    if not uni_first:
        out["first_dims"] = (g, "int64")
    if not uni_last:
        out["last_dims"] = (g, "int64")
    if not uni_first or not uni_last:
        out["tensor_offsets"] = (g + 1, "int64")
    if not uni_first and not uni_last:
        lf, ll = 1, sum(f * v for f, v in shapes)
    else:
        lf = firsts[0] if uni_first and not uni_last else sum(firsts)
        ll = sum(lasts) if not uni_last else lasts[0]
    # Scale sizes are summed over the member shapes; uniform groups are split evenly from the totals.
    members = [(lf // g, ll)] * g if uni_first and uni_last else list(shapes)
    total = lf * ll
    if recipe == "bf16":
        out["rowwise_data"] = (total, "bfloat16")
        return out
    if recipe in ("mxfp8", "nvfp4", "fp8-block"):
        data = total // 2 if recipe == "nvfp4" else total
        sd = _scale_dtype(recipe)
        if rowwise:
            out["rowwise_data"] = (data, "uint8")
            out["scale_inv"] = (sum(_prod(scale_shape(recipe, m, k, False, block_dim=block_dim)) for m, k in members), sd)
        if columnwise:
            out["columnwise_data"] = (data, "uint8")
            out["columnwise_scale_inv"] = (
                sum(_prod(scale_shape(recipe, m, k, True, block_dim=block_dim)) for m, k in members),
                sd,
            )
        if recipe == "nvfp4":
            if rowwise:
                out["amax"] = (g, "float32")
            if columnwise:
                out["columnwise_amax"] = (g, "float32")
        return out
    if recipe == "fp8-delayed":
        if rowwise:
            out["rowwise_data"] = (total, "uint8")
            out["scale_inv"] = (g, "float32")
        if columnwise:
            out["columnwise_data"] = (total, "uint8")
            out["columnwise_scale_inv"] = (g, "float32")
        out["amax"] = (g, "float32")
        return out
    if recipe == "fp8-current":
        non_tn = arch == "sm100"
        row = rowwise or non_tn
        col = columnwise and not non_tn
        if row:
            out["rowwise_data"] = (total, "uint8")
            out["scale_inv"] = (g, "float32")
        if col:
            out["columnwise_data"] = (total, "uint8")
            out["columnwise_scale_inv"] = (g, "float32")
        out["scale"] = (g, "float32")
        out["amax"] = (g, "float32")
        return out
    raise ValueError(f"unknown recipe {recipe!r}")


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
            out["scale_inv"] = (_prod(scale_shape(recipe, tokens, k, False, block_dim=block_dim)), sd)
        if columnwise:
            slack = _cdiv(k, 128) * 4 * (groups - 1) if recipe == "fp8-block" and block_dim == 2 and groups > 1 else 0
            out["columnwise_data"] = (data, "uint8")
            out["columnwise_scale_inv"] = (_prod(scale_shape(recipe, tokens, k, True, block_dim=block_dim)) + slack, sd)
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


def bulk_layout(items: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """Byte offsets and base size of TE's ``bulk_allocate`` (``csrc/extensions/allocate.cpp``).

    ``items`` are ``(nbytes, alignment)``. Each view starts at the running size rounded up to its
    alignment; the base buffer adds the largest alignment as slack for an unaligned base pointer.
    """
    offs: list[int] = []
    end = 0
    align = 1
    for nbytes, a in items:
        o = -(-end // a) * a
        offs.append(o)
        end = o + nbytes
        if a > align:
            align = a
    return offs, end + (align if align > 1 else 0)


def _prod(shape: Iterable[int]) -> int:
    p = 1
    for d in shape:
        p *= d
    return p


# ---------------------------------------------------------------------------------------------
# Row accumulation
# ---------------------------------------------------------------------------------------------
class _Buf:
    __slots__ = (
        "operand",
        "group",
        "container",
        "slot",
        "fmt",
        "kind",
        "orient",
        "shape",
        "dtype",
        "nbytes",
        "storage",
        "soff",
        "ideal",
        "param",
        "note",
        "cref",
        "is_container",
        "prune",
    )

    def __init__(self, operand: str, group: int | None, container: str | None, slot: str | None, fmt: str,
                 kind: str, orient: str | None, shape: tuple[int, ...], dtype: str, nbytes: int,
                 storage: int | None, soff: int, ideal: int, param: bool, note: str | None,
                 cref: int | None, is_container: bool, prune: str | None) -> None:
        self.operand = operand
        self.group = group
        self.container = container
        self.slot = slot
        self.fmt = fmt
        self.kind = kind
        self.orient = orient
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.storage = storage
        self.soff = soff
        self.ideal = ideal
        self.param = param
        self.note = note
        self.cref = cref
        self.is_container = is_container
        self.prune = prune


class _Acc:
    """Collects buffers in pack-hook order and the sizes of the storages they live in."""

    __slots__ = ("bufs", "sizes", "ncont")

    def __init__(self) -> None:
        self.bufs: list[_Buf] = []
        self.sizes: list[int] = []
        self.ncont = 0

    def storage(self, nbytes: int) -> int:
        self.sizes.append(nbytes)
        return len(self.sizes) - 1

    def plain(self, operand: str, shape: tuple[int, ...], dtype: str, *, storage: int | None = None,
              soff: int = 0, kind: str | None = None, param: bool = False, note: str | None = None,
              group: int | None = None) -> None:
        nbytes = _prod(shape) * ITEMSIZE[dtype]
        if storage is None:
            storage = self.storage(nbytes)
        if kind is None:
            kind = "metadata" if dtype in ("int64", "int32") else "tensor"
        self.bufs.append(_Buf(operand, group, None, None, PLAIN_FORMAT[dtype], kind, None, shape, dtype,
                              nbytes, storage, soff, nbytes, param, note, None, False, None))

    def te(self, operand: str, group: int | None, container: str, slot: str, fmt: str,
           shape: tuple[int, ...], dtype: str, *, storage: int | None = None, soff: int = 0,
           ideal: int | None = None, note: str | None = None,
           cref: int | None = None, prune: str | None = None) -> None:
        nbytes = _prod(shape) * ITEMSIZE[dtype]
        if storage is None:
            storage = self.storage(nbytes)
        kind, orient = SLOT_INFO[slot]
        if kind == "metadata":
            fmt = PLAIN_FORMAT[dtype]  # as memaudit.te.classify: metadata keeps its dtype's format
        self.bufs.append(_Buf(operand, group, container, slot, fmt, kind,
                              orient, shape, dtype, nbytes, storage,
                              soff, nbytes if ideal is None else ideal, False, note, cref, False, prune))

    def container(self, operand: str, container: str, fmt: str, shape: tuple[int, ...], dtype: str,
                  note: str | None = None) -> int:
        ref = self.ncont
        self.ncont += 1
        self.bufs.append(_Buf(operand, None, container, None, fmt, "container", None, shape, dtype, 0,
                              None, 0, 0, False, note, ref, True, None))
        return ref


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One fully resolved estimate input (validated; see :func:`resolve`)."""

    recipe: str
    tokens: int
    hidden: int
    ffn: int
    groups: int
    splits: tuple[int, ...]
    path: str
    arch: str
    dtype: str = "bf16"
    dense_single_group: bool = True
    probs_dtype: str = "float32"
    split_sizes_dtype: str = "int64"

    @property
    def fused(self) -> bool:
        return self.path == "fused"


def default_path(recipe: str, hidden: int, ffn: int) -> str:
    """The path TE takes by default: Blackwell fused for MXFP8/NVFP4 when the dims allow it (else the
    Blackwell grouped-tensor path); the H200's split-quantize path for BF16 and FP8 (cuBLASLt < 13.4)."""
    if recipe in FUSABLE:
        if hidden % FUSED_DIM_MULTIPLE == 0 and ffn % FUSED_DIM_MULTIPLE == 0:
            return "fused"
        return "unfused-grouped"
    return "unfused-split"


def default_arch(recipe: str, path: str) -> str:
    """SM100 for the fused path and MXFP8/NVFP4 (they need compute capability 10.x), else SM90."""
    return "sm100" if path == "fused" or recipe in FUSABLE else "sm90"


def resolve(
    recipe: str,
    tokens: int,
    hidden: int,
    ffn: int,
    groups: int,
    *,
    splits: Sequence[int] | None = None,
    path: str | None = None,
    arch: str | None = None,
    dtype: str = "bf16",
    dense_single_group: bool = True,
    probs_dtype: str = "float32",
    split_sizes_dtype: str = "int64",
) -> Config:
    """Validate the inputs as TE would and pick defaults; every problem is a UsageError naming its flag."""
    if recipe not in RECIPES:
        raise UsageError(f"unknown recipe {recipe!r}; use one of {', '.join(RECIPES)}", key="--recipe")
    for value, flag in ((tokens, "--tokens"), (hidden, "--hidden"), (ffn, "--ffn"), (groups, "--groups")):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"must be an integer >= 1, got {value!r}", key=flag)
    if path is None:
        path = default_path(recipe, hidden, ffn)
    if path not in PATHS:
        raise UsageError(f"unknown path {path!r}; use one of {', '.join(PATHS)}", key="--path")
    if arch is None:
        arch = default_arch(recipe, path)
    if arch not in ARCHS:
        raise UsageError(f"unknown arch {arch!r}; use one of {', '.join(ARCHS)}", key="--arch")
    if dtype not in HP_DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(HP_DTYPES)}", key="--dtype")
    if probs_dtype not in ("float32", "bfloat16"):
        raise UsageError(f"unknown probs dtype {probs_dtype!r}; use float32 or bfloat16", key="--probs-dtype")
    if split_sizes_dtype not in ("int64", "int32"):
        raise UsageError(f"unknown split-sizes dtype {split_sizes_dtype!r}; use int64 or int32", key="--split-dtype")
    if recipe in FUSABLE and arch != "sm100":
        raise UsageError(f"{recipe} needs compute capability 10.x (sm100); got {arch}", key="--arch")
    if path == "fused":
        if recipe not in FUSABLE:
            raise UsageError(
                f"TE never fuses {recipe}: the fused grouped MLP needs an MXFP8 or NVFP4 recipe "
                "(ops/fused/grouped_mlp.py:970); use --path unfused-split or unfused-grouped",
                key="--path",
            )
        if arch != "sm100":
            raise UsageError(f"the fused grouped MLP runs on sm100 only, got {arch}", key="--arch")
        for value, flag in ((hidden, "--hidden"), (ffn, "--ffn")):
            if value % FUSED_DIM_MULTIPLE:
                raise UsageError(
                    f"{value} is not a multiple of {FUSED_DIM_MULTIPLE}: TE does not fuse then "
                    "(validate_grouped_mlp_dims, ops/fused/grouped_mlp.py:911-941); use --path unfused-grouped",
                    key=flag,
                )
        if tokens % FUSED_TOKEN_MULTIPLE:
            raise UsageError(
                f"{tokens} tokens: the fused grouped MLP raises unless total tokens % {FUSED_TOKEN_MULTIPLE} == 0 "
                "(ops/fused/grouped_mlp.py:1203); use a multiple of 128 or --path unfused-grouped",
                key="--tokens",
            )
        if dtype != "bf16":
            raise UsageError("the fused grouped MLP is modelled for bf16 only", key="--dtype")
    if path == "unfused-grouped":
        if recipe == "fp8-delayed":
            raise UsageError(
                "DelayedScaling always takes the split-quantize path "
                "(is_op_fuser_grouped_tensor_path_supported, ops/basic/grouped_linear.py:74-132)",
                key="--path",
            )
        if recipe == "fp8-block" and arch != "sm90":
            raise UsageError("block-FP8 grouped tensors are used on sm90 only (grouped_linear.py:74-132)", key="--arch")
        if dtype != "bf16":
            raise UsageError("the grouped-tensor path needs bf16/fp16 (grouped_linear.py:74-132)", key="--dtype")
    if recipe in DIM_MULTIPLE:
        mult, why = DIM_MULTIPLE[recipe]
        for value, flag in ((hidden, "--hidden"), (ffn, "--ffn")):
            if value % mult:
                raise UsageError(f"{value} is not a multiple of {mult} for {recipe}: {why}", key=flag)
    align = ALIGNMENT[recipe]
    if splits is None:
        split_list = default_splits(tokens, groups, align)
    else:
        split_list = [int(s) for s in splits]
        validate_splits(split_list, tokens, groups, align, key="--splits")
    return Config(
        recipe=recipe,
        tokens=tokens,
        hidden=hidden,
        ffn=ffn,
        groups=groups,
        splits=tuple(split_list),
        path=path,
        arch=arch,
        dtype=dtype,
        dense_single_group=dense_single_group,
        probs_dtype=probs_dtype,
        split_sizes_dtype=split_sizes_dtype,
    )


# Source notes (TE 2.20.2 file:line) attached to rows.
_SRC = {
    "split_bf16_x": "torch.split views of the input (grouped_linear.py:1246)",
    "split_q_x": "tex.split_quantize, then update_usage(rowwise=False) (grouped_linear.py:1244,1293)",
    "split_bulk_x": "tex.split_quantize bulk-allocates columnwise data+scales (csrc/extensions/cast.cpp split_quantize), update_usage(rowwise=False) (grouped_linear.py:1293)",
    "split_q_w": "weight quantized on the fly, update_usage(rowwise=False) (grouped_linear.py:938,1286)",
    "param_w": "weight Parameter saved as is (grouped_linear.py:935)",
    "split_sizes": "split_sizes as int64 on the device (grouped_linear.py:1042)",
    "fused_split_sizes": "split_sizes as int64 on the device (tex.splits_to_offsets_multi, grouped_mlp.py:1311)",
    "grouped_meta": "tex.splits_to_offsets_multi bulk views, 16-B aligned (grouped_linear.py:1326)",
    "grouped_bf16_x": "GroupedTensorStorage over the input, no copy (grouped_linear.py:1381)",
    "grouped_q_x": "tex.group_quantize, scales sized from totals (grouped_linear.py:1372; csrc/quantizer.cpp create_grouped_tensor)",
    "grouped_prune": "rowwise pruned when columnwise exists (grouped_linear.py:1464-1469)",
    "grouped_q_w": "weight quantized on the fly with both usages, no update_usage (grouped_linear.py:938)",
    "swiglu_in": "ScaledSwiGLU saves its input, the FC1 output (ops/basic/swiglu.py:552)",
    "swiglu_scales": "ScaledSwiGLU saves scales = maybe_dequantize(probs, FC1 dtype) (swiglu.py:541,552)",
    "fused_meta": "tex.splits_to_offsets_multi bulk views, 16-B aligned (ops/fused/grouped_mlp.py:1311)",
    "fused_save": "fc1_ctx.save_for_backward (ops/fused/grouped_mlp.py:1960)",
    "fused_x": "tex.group_quantize, scales sized from totals (grouped_mlp.py:326; csrc/quantizer.cpp create_grouped_tensor)",
    "fused_dense_x": "single-group dense path wraps tex.quantize output as a GroupedTensor (grouped_mlp.py:259-307)",
    "fused_nvfp4_keep": "kept: NVFP4 skips the rowwise prune (`if not use_nvfp4`, ops/fused/grouped_mlp.py:1934-1938); PR #3545 drops it",
    "fused_mxfp8_prune": "rowwise pruned for MXFP8 (ops/fused/grouped_mlp.py:1934-1938)",
    "fused_w": "per-expert quantizer(weight), rowwise+columnwise (ops/fused/grouped_mlp.py:1370,1408)",
    "fused_act_in": "cuDNN c_tensor, pre-activation FC1 output (grouped_mlp.py:1711)",
    "fused_scales": "the caller's probs extra input, as passed (grouped_mlp.py:1261)",
    "fused_mxfp8_fc2x": "GroupedTensorStorage over cuDNN d_col/sfd_col outputs (grouped_mlp.py:1799); dtype from cuDNN (unsure)",
    "dup_split": "same tensor as fc1.split_sizes",
    "dup_offsets": "same tensor as the offsets row of this operand",
}


class _Model:
    """Builds the te-2.20 buffer list for one Config."""

    def __init__(self, c: Config) -> None:
        self.c = c
        self.acc = _Acc()
        self.fmt = FORMAT[c.recipe]
        self.hp = HP_DTYPES[c.dtype]

    # ---- shared pieces ------------------------------------------------------------------------
    def split_sizes_storage(self, op: str, shared: int | None) -> int:
        """Row for an op's int64 split sizes; returns its storage (shared when the caller passed int64)."""
        c = self.c
        if shared is not None and c.split_sizes_dtype == "int64":
            self.acc.plain(f"{op}.split_sizes", (c.groups,), "int64", storage=shared, note=_SRC["dup_split"])
            return shared
        note = _SRC["fused_split_sizes"] if c.fused else _SRC["split_sizes"]
        self.acc.plain(f"{op}.split_sizes", (c.groups,), "int64", note=note)
        return self.acc.bufs[-1].storage  # type: ignore[return-value]

    def weight_param(self, op: str, g: int, n: int, k: int) -> None:
        self.acc.plain(f"{op}.weight[{g}]", (n, k), self.hp, param=True, group=g, note=_SRC["param_w"])

    def quantized_single(self, operand: str, group: int | None, m: int, k: int, *, rowwise: bool,
                         columnwise: bool, block_dim: int, note: str) -> None:
        """One quantized tensor's buffers, each in its own allocation (``Quantizer::create_tensor``)."""
        c = self.c
        cont = SINGLE_CONTAINER[c.recipe]
        for slot, shape, dtype in single_buffers(c.recipe, m, k, rowwise=rowwise, columnwise=columnwise,
                                                 arch=c.arch, block_dim=block_dim):
            ideal = None
            if "scale_inv" in slot and c.recipe in ("mxfp8", "nvfp4", "fp8-block"):
                ideal = unpadded_scale_elems(c.recipe, m, k, "columnwise" in slot, block_dim=block_dim) * ITEMSIZE[dtype]
            self.acc.te(operand, group, cont, slot, self.fmt, shape, dtype, ideal=ideal, note=note)

    def activation(self, act_in_storage: int | None = None) -> None:
        c = self.c
        if c.fused:
            self.acc.plain("activation.activation_in", (c.tokens, 2 * c.ffn), "bfloat16", note=_SRC["fused_act_in"])
            self.acc.plain("activation.scales", (c.tokens,), c.probs_dtype, note=_SRC["fused_scales"])
            return
        self.acc.plain("activation.activation_in", (c.tokens, 2 * c.ffn), self.hp, storage=act_in_storage,
                       note=_SRC["swiglu_in"])
        self.acc.plain("activation.scales", (c.tokens,), self.hp, note=_SRC["swiglu_scales"]
                       + ("" if c.probs_dtype == self.hp else f"; a {self.hp} copy of {c.probs_dtype} probs"))

    # ---- unfused-split -------------------------------------------------------------------------
    def split_linear(self, op: str, k: int, n: int, x_storage: int | None, shared_sizes: int | None) -> int:
        """Rows of one GroupedLinear on the split-quantize path; returns the split-sizes storage."""
        c, acc = self.c, self.acc
        sizes = self.split_sizes_storage(op, shared_sizes)
        operand = f"{op}.input"
        if c.recipe == "bf16":
            off = 0
            item = ITEMSIZE[self.hp]
            for g, m in enumerate(c.splits):
                acc.plain(operand, (m, k), self.hp, storage=x_storage, soff=off, group=g, note=_SRC["split_bf16_x"])
                off += m * k * item
        elif c.recipe in ("fp8-delayed", "fp8-current"):
            for g, m in enumerate(c.splits):
                self.quantized_single(operand, g, m, k, rowwise=False, columnwise=True, block_dim=1,
                                      note=_SRC["split_q_x"])
        else:
            self.split_bulk_inputs(operand, k)
        for g in range(c.groups):
            if c.recipe == "bf16":
                self.weight_param(op, g, n, k)
            else:
                self.quantized_single(f"{op}.weight[{g}]", g, n, k, rowwise=False, columnwise=True,
                                      block_dim=2, note=_SRC["split_q_w"])
        return sizes

    def split_bulk_inputs(self, operand: str, k: int) -> None:
        """Block-FP8 / MXFP8 / NVFP4 ``tex.split_quantize``: one bulk buffer for all groups' columnwise views."""
        c, acc = self.c, self.acc
        per_group = [single_buffers(c.recipe, m, k, rowwise=False, columnwise=True, arch=c.arch, block_dim=1)
                     for m in c.splits]
        nslots = len(per_group[0])
        items: list[tuple[int, int]] = []
        for j in range(nslots):  # layout: all data, then all scales (then all amaxes)
            align = 256 if j == 0 else 16
            for bufs in per_group:
                _, shape, dtype = bufs[j]
                items.append((_prod(shape) * ITEMSIZE[dtype], align))
        offs, base = bulk_layout(items)
        bulk = acc.storage(base)
        cont = SINGLE_CONTAINER[c.recipe]
        for g, bufs in enumerate(per_group):
            m = c.splits[g]
            for j, (slot, shape, dtype) in enumerate(bufs):
                i = j * c.groups + g
                nbytes = items[i][0]
                ideal = None
                if "scale_inv" in slot:
                    ideal = unpadded_scale_elems(c.recipe, m, k, True) * ITEMSIZE[dtype]
                if nbytes == 0:  # bulk_allocate gives empty views their own at::empty
                    acc.te(operand, g, cont, slot, self.fmt, shape, dtype, ideal=ideal, note=_SRC["split_bulk_x"])
                else:
                    acc.te(operand, g, cont, slot, self.fmt, shape, dtype, storage=bulk, soff=offs[i], ideal=ideal,
                           note=_SRC["split_bulk_x"])

    # ---- unfused-grouped -----------------------------------------------------------------------
    def offsets_bulk(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """splits_to_offsets_multi views: split_points int32 (G), the rest int64 (G+1), 16-B aligned."""
        c, acc = self.c, self.acc
        g = c.groups
        sizes = [4 * g] + [8 * (g + 1)] * (len(names) - 1)
        offs, base = bulk_layout([(s, 16) for s in sizes])
        bulk = acc.storage(base)
        return {n: (bulk, o) for n, o in zip(names, offs, strict=True)}

    def grouped_input(self, operand: str, k: int, x_storage: int | None, sizes_storage: int,
                      offsets: tuple[int, int], *, fused: bool, prune_rowwise: bool, prune_note: str) -> None:
        """A GroupedTensorStorage input reaching the hook as its 10 raw slots (None slots skipped)."""
        c, acc = self.c, self.acc
        cont = "GroupedTensorStorage"
        g = c.groups
        if c.recipe == "bf16":
            acc.te(operand, None, cont, "rowwise_data", "bf16", (c.tokens * k,), self.hp, storage=x_storage,
                   note=_SRC["grouped_bf16_x"])
        else:
            bufs = grouped_buffers_cpp(c.recipe, c.tokens, k, g, arch=c.arch, block_dim=1)
            src = _SRC["fused_x"] if fused else _SRC["grouped_q_x"]
            has_col = "columnwise_data" in bufs
            for slot in SLOTS[cont][:7]:
                if slot not in bufs:
                    continue
                if c.recipe == "fp8-current" and slot == "scale_inv" and has_col:
                    continue  # the same tensor as columnwise_scale_inv, and pruned with the rowwise data
                numel, dtype = bufs[slot]
                ideal = None
                if "scale_inv" in slot and c.recipe in ("mxfp8", "nvfp4", "fp8-block"):
                    colw = slot == "columnwise_scale_inv"
                    ideal = sum(unpadded_scale_elems(c.recipe, m, k, colw) for m in c.splits) * ITEMSIZE[dtype]
                prune = None
                note = src
                if has_col and slot in ("rowwise_data", "scale_inv"):
                    if prune_rowwise:
                        continue
                    prune = "rowwise"
                    note = prune_note
                acc.te(operand, None, cont, slot, self.fmt, (numel,), dtype, ideal=ideal, note=note, prune=prune)
        acc.te(operand, None, cont, "first_dims", self.fmt, (g,), "int64", storage=sizes_storage,
               note=_SRC["dup_split"])
        acc.te(operand, None, cont, "tensor_offsets", self.fmt, (g + 1,), "int64", storage=offsets[0],
               soff=offsets[1], note=_SRC["dup_offsets"])

    def grouped_linear(self, op: str, k: int, n: int, x_storage: int | None, shared_sizes: int | None) -> int:
        c = self.c
        sizes = self.split_sizes_storage(op, shared_sizes)
        names = ("split_points", "base_split_offsets", "input_offsets", "output_offsets")
        meta = self.offsets_bulk(names)
        g = c.groups
        for name, shape, dtype in (
            ("base_split_offsets", (g + 1,), "int64"),
            ("split_points", (g,), "int32"),
            ("input_offsets", (g + 1,), "int64"),
            ("output_offsets", (g + 1,), "int64"),
        ):
            st, off = meta[name]
            self.acc.plain(f"{op}.{name}", shape, dtype, storage=st, soff=off, note=_SRC["grouped_meta"])
        self.grouped_input(f"{op}.input", k, x_storage, sizes, meta["input_offsets"], fused=False,
                           prune_rowwise=True, prune_note=_SRC["grouped_prune"])
        for gi in range(g):
            if c.recipe == "bf16":
                self.weight_param(op, gi, n, k)
            else:
                self.quantized_single(f"{op}.weight[{gi}]", gi, n, k, rowwise=True, columnwise=True,
                                      block_dim=2, note=_SRC["grouped_q_w"])
        return sizes

    # ---- fused ---------------------------------------------------------------------------------
    def fused_input(self, op: str, k: int, sizes: int, offsets: tuple[int, int], *, explicit_mxfp8: bool) -> None:
        c, acc = self.c, self.acc
        operand = f"{op}.input"
        nvfp4 = c.recipe == "nvfp4"
        prune_note = _SRC["fused_nvfp4_keep"]
        if explicit_mxfp8:
            # fc2_x on MXFP8: GroupedTensorStorage built over cuDNN's columnwise outputs, rowwise pruned.
            cont = "GroupedTensorStorage"
            cs = scale_shape("mxfp8", c.tokens, k, True)
            ideal = sum(unpadded_scale_elems("mxfp8", m, k, True) for m in c.splits)
            acc.te(operand, None, cont, "columnwise_data", self.fmt, (c.tokens * k,), "float8_e4m3fn",
                   note=_SRC["fused_mxfp8_fc2x"])
            acc.te(operand, None, cont, "columnwise_scale_inv", self.fmt, (_prod(cs),), "float8_e8m0fnu",
                   ideal=ideal, note=_SRC["fused_mxfp8_fc2x"])
            acc.te(operand, None, cont, "first_dims", self.fmt, (c.groups,), "int64", storage=sizes,
                   note=_SRC["dup_split"])
            acc.te(operand, None, cont, "tensor_offsets", self.fmt, (c.groups + 1,), "int64",
                   storage=offsets[0], soff=offsets[1], note=_SRC["dup_offsets"])
            return
        if c.groups == 1 and c.dense_single_group:
            # Whole GroupedTensor wrapper: a container row, then its inner buffers.
            ref = acc.container(operand, "GroupedTensor", self.fmt, (c.tokens, k), "bfloat16",
                                note=_SRC["fused_dense_x"])
            bufs = dict((s, (sh, dt)) for s, sh, dt in single_buffers(c.recipe, c.tokens, k, arch=c.arch))
            mapping = (
                ("rowwise_data", "_rowwise_data"),
                ("columnwise_data", "_columnwise_data"),
                ("scale_inv", "_rowwise_scale_inv"),
                ("columnwise_scale_inv", "_columnwise_scale_inv"),
                ("amax", "_amax_rowwise"),
                ("columnwise_amax", "_amax_columnwise"),
            )
            for gslot, sslot in mapping:
                if sslot not in bufs:
                    continue
                shape, dtype = bufs[sslot]
                prune = None
                note = _SRC["fused_dense_x"]
                if gslot in ("rowwise_data", "scale_inv"):
                    if not nvfp4:
                        continue  # MXFP8: pruned in 2.20.2
                    prune, note = "rowwise", prune_note
                ideal = None
                if "scale_inv" in gslot:
                    ideal = unpadded_scale_elems(c.recipe, c.tokens, k, gslot.startswith("columnwise")) * ITEMSIZE[dtype]
                acc.te(operand, None, "GroupedTensor", gslot, self.fmt, (_prod(shape),), dtype, ideal=ideal,
                       note=note, cref=ref, prune=prune)
            acc.te(operand, None, "GroupedTensor", "first_dims", self.fmt, (1,), "int64", storage=sizes,
                   note=_SRC["dup_split"], cref=ref)
            acc.te(operand, None, "GroupedTensor", "tensor_offsets", self.fmt, (2,), "int64",
                   storage=offsets[0], soff=offsets[1], note=_SRC["dup_offsets"], cref=ref)
            return
        self.grouped_input(operand, k, None, sizes, offsets, fused=True, prune_rowwise=not nvfp4,
                           prune_note=prune_note)

    def fused(self) -> None:
        c, acc = self.c, self.acc
        h, f, g = c.hidden, c.ffn, c.groups
        sizes = self.split_sizes_storage("fc1", None)
        names = ("split_points", "base_split_offsets", "fc1_x", "fc1_out", "fc2_x", "fc2_out")
        meta = self.offsets_bulk(names)
        for operand, name, shape, dtype in (
            ("fc1.base_split_offsets", "base_split_offsets", (g + 1,), "int64"),
            ("fc1.split_points", "split_points", (g,), "int32"),
            ("fc1.input_offsets", "fc1_x", (g + 1,), "int64"),
            ("fc1.output_offsets", "fc1_out", (g + 1,), "int64"),
            ("fc2.input_offsets", "fc2_x", (g + 1,), "int64"),
            ("fc2.output_offsets", "fc2_out", (g + 1,), "int64"),
        ):
            st, off = meta[name]
            acc.plain(operand, shape, dtype, storage=st, soff=off, note=_SRC["fused_meta"])
        self.fused_input("fc1", h, sizes, meta["fc1_x"], explicit_mxfp8=False)
        for gi in range(g):
            self.quantized_single(f"fc1.weight[{gi}]", gi, 2 * f, h, rowwise=True, columnwise=True, block_dim=2,
                                  note=_SRC["fused_w"])
        self.activation()
        self.fused_input("fc2", f, sizes, meta["fc2_x"], explicit_mxfp8=c.recipe == "mxfp8")
        for gi in range(g):
            self.quantized_single(f"fc2.weight[{gi}]", gi, h, f, rowwise=True, columnwise=True, block_dim=2,
                                  note=_SRC["fused_w"])

    # ---- entry ---------------------------------------------------------------------------------
    def build(self) -> _Acc:
        c, acc = self.c, self.acc
        if c.fused:
            self.fused()
            return acc
        item = ITEMSIZE[self.hp]
        x = acc.storage(c.tokens * c.hidden * item)  # the caller's input
        fc1_out = acc.storage(c.tokens * 2 * c.ffn * item)
        act_out = acc.storage(c.tokens * c.ffn * item)  # ScaledSwiGLU output = FC2 input
        linear = self.split_linear if c.path == "unfused-split" else self.grouped_linear
        sizes = linear("fc1", c.hidden, 2 * c.ffn, x, None)
        self.activation(fc1_out)
        linear("fc2", c.ffn, c.hidden, act_out, sizes)
        return acc


# ---------------------------------------------------------------------------------------------
# Variants and finalisation
# ---------------------------------------------------------------------------------------------
def _keep(b: _Buf, variant: str, recipe: str, fused: bool) -> bool:
    if variant == "te-2.20":
        return True
    if b.prune == "rowwise" and recipe == "nvfp4" and fused:
        return False  # PR #3545: NVFP4 fused-path rowwise input data and scales are pruned
    if variant == "pr3545":
        return True
    # ideal: only the orientation the backward GEMMs read (te-internals §2.3).
    if b.is_container or b.kind in ("metadata", "tensor") or b.fmt == "bf16":
        return True
    if b.prune == "rowwise":
        return False
    if recipe in ("fp8-delayed", "fp8-current"):
        return b.kind not in ("amax", "scale")  # _data vs _transpose: see _ideal_fp8
    return b.orient in ("columnwise", "both")


def _finalize(acc: _Acc, c: Config, variant: str) -> tuple[list[Row], list[int]]:
    """Filter by variant, number storages s0.. in first-seen order, mark duplicate views."""
    fused = c.fused
    bufs = [b for b in acc.bufs if _keep(b, variant, c.recipe, fused)]
    if variant == "ideal" and c.recipe in ("fp8-delayed", "fp8-current"):
        bufs = _ideal_fp8(bufs)
    names: dict[int, str] = {}
    first_view: dict[tuple[int, int, tuple[int, ...]], int] = {}
    cont_index: dict[int, int] = {}
    rows: list[Row] = []
    ideals: list[int] = []
    for i, b in enumerate(bufs):
        storage = None
        dup = None
        sbytes = 0
        if b.storage is not None:
            storage = names.get(b.storage)
            if storage is None:
                storage = names[b.storage] = f"s{len(names)}"
            sbytes = acc.sizes[b.storage]
            view = (b.storage, b.soff, b.shape)
            dup = first_view.setdefault(view, i)
            dup = None if dup == i else dup
        ci = None
        if b.is_container:
            cont_index[b.cref] = i  # type: ignore[index]
        elif b.cref is not None:
            ci = cont_index.get(b.cref)
        rows.append(
            Row(
                index=i,
                kind=b.kind,
                format=b.fmt,
                shape=list(b.shape),
                dtype=b.dtype,
                bytes=b.nbytes,
                op=None,
                slot=b.slot,
                operand=b.operand,
                group=b.group,
                container=b.container,
                container_index=ci,
                orientation=b.orient,
                storage=storage,
                storage_offset=b.soff,
                storage_bytes=sbytes,
                device=DEVICE,
                is_parameter=b.param,
                duplicate_of=dup,
                note=b.note,
            )
        )
        ideals.append(b.ideal)
    return rows, ideals


def _ideal_fp8(bufs: list[_Buf]) -> list[_Buf]:
    """Per-tensor FP8: keep ``_transpose`` where it exists (SM90), else the single ``_data`` copy (SM100)."""
    with_t = {(b.operand, b.group) for b in bufs if b.slot == "_transpose"}
    return [b for b in bufs if not (b.slot == "_data" and (b.operand, b.group) in with_t)]


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------
def case_id(c: Config) -> str:
    """Stable id: the run-style id plus the estimate's path and arch. The variant is left out so
    that ``memaudit compare`` matches the same case across two variants' reports."""
    return f"{TARGET}/{c.recipe}/g{c.groups}/t{c.tokens}-h{c.hidden}-f{c.ffn}/{c.dtype}/estimate,path={c.path},arch={c.arch}"


def estimate_config(c: Config, variant: str = "te-2.20") -> CaseReport:
    """The saved set of a resolved :class:`Config` under ``variant`` as a CaseReport."""
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}", key="--variant")
    acc = _Model(c).build()
    rows, ideals = _finalize(acc, c, variant)
    padded = [
        {"index": r.index, "ideal_bytes": ideal, "padded_bytes": r.bytes}
        for r, ideal in zip(rows, ideals, strict=True)
        if ideal != r.bytes
    ]
    slack = _bulk_slack(rows)
    case = CaseReport(
        id=case_id(c),
        target=TARGET,
        recipe=c.recipe,
        groups=c.groups,
        tokens=c.tokens,
        hidden=c.hidden,
        ffn=c.ffn,
        dtype=c.dtype,
        device=DEVICE,
        splits=list(c.splits),
        options={"estimate": True, "variant": variant, "path": c.path, "arch": c.arch, "te": TE_VERSION},
        path={
            "estimated": True,
            "name": c.path,
            "fused": c.fused,
            "arch": c.arch,
            "dense_single_group": c.fused and c.groups == 1 and c.dense_single_group,
            "padding": {
                "ideal_bytes": sum(ideals),
                "padded_bytes": sum(r.bytes for r in rows),
                "bulk_slack_bytes": slack,
                "rows": padded,
            },
        },
        rows=rows,
    )
    case.totals = compute_totals(rows)
    return case


def _bulk_slack(rows: list[Row]) -> int:
    """Bytes of shared storages not covered by any view (alignment gaps and base-pointer slack)."""
    used: dict[str, int] = {}
    size: dict[str, int] = {}
    for r in rows:
        if r.storage is None or r.duplicate_of is not None:
            continue
        used[r.storage] = used.get(r.storage, 0) + r.bytes
        size[r.storage] = r.storage_bytes
    return sum(size[s] - used[s] for s in size if size[s] > used[s])


def estimate(
    spec: CaseSpec,
    *,
    path: str | None = None,
    variant: str = "te-2.20",
    arch: str | None = None,
    dense_single_group: bool = True,
    probs_dtype: str | None = None,
    split_sizes_dtype: str | None = None,
) -> CaseReport:
    """Estimate the saved set of ``spec`` (a CaseSpec or anything with its fields) on ``path``.

    ``probs_dtype`` / ``split_sizes_dtype`` default to ``spec.options`` keys of the same name,
    else float32 probs and int64 split sizes (one tensor passed to FC1 and FC2).
    """
    options = getattr(spec, "options", None) or {}
    splits = getattr(spec, "splits", None)
    c = resolve(
        spec.recipe,
        spec.tokens,
        spec.hidden,
        spec.ffn,
        spec.groups,
        splits=splits,
        path=path,
        arch=arch,
        dtype=getattr(spec, "dtype", "bf16"),
        dense_single_group=dense_single_group,
        probs_dtype=probs_dtype or options.get("probs_dtype", "float32"),
        split_sizes_dtype=split_sizes_dtype or options.get("split_sizes_dtype", "int64"),
    )
    return estimate_config(c, variant)


def make_spec(recipe: str, tokens: int, hidden: int, ffn: int, groups: int,
              splits: Sequence[int] | None = None, **options: Any) -> CaseSpec:
    """A CaseSpec for the TE grouped-MLP target (for callers without one)."""
    return CaseSpec(target=TARGET, recipe=recipe, groups=groups, tokens=tokens, hidden=hidden, ffn=ffn,
                    options=dict(options), splits=tuple(splits) if splits is not None else None)


EXPECTED_RECIPES = ("bf16", "fp8-delayed", "fp8-current")


def expected_rows(spec: CaseSpec) -> list[Row] | None:
    """Rows the H200 (SM90, cuBLASLt < 13.4: split-quantize path) should measure for ``spec``.

    None where the estimator does not cover the case: another target, recipe or activation, a
    single grouped weight, or specs the estimator rejects. Assumes the target passes int64 split
    sizes on the device (one tensor for FC1 and FC2) and float32 probs unless ``spec.options``
    says otherwise (``split_sizes_dtype``, ``probs_dtype``).
    """
    if spec.target != TARGET or spec.recipe not in EXPECTED_RECIPES:
        return None
    opts = spec.options or {}
    if opts.get("single_grouped_weight") or opts.get("activation", "swiglu") != "swiglu":
        return None
    try:
        case = estimate(spec, path="unfused-split", arch="sm90")
    except UsageError:
        return None
    device = spec.device if ":" in spec.device or spec.device == "cpu" else f"{spec.device}:0"
    for r in case.rows:
        r.device = device
    return case.rows


# ---------------------------------------------------------------------------------------------
# Differences and summaries
# ---------------------------------------------------------------------------------------------
@dataclass
class DiffEntry:
    """One buffer present in one variant and not (or with other bytes) in the other."""

    operand: str | None
    group: int | None
    container: str | None
    slot: str | None
    kind: str
    orientation: str | None
    shape: list[int]
    dtype: str
    bytes_a: int
    bytes_b: int
    note: str | None

    @property
    def delta(self) -> int:
        return self.bytes_b - self.bytes_a


def _row_key(r: Row) -> tuple[Any, ...]:
    return (r.operand, r.group, r.container, r.slot, r.kind)


def diff_cases(a: CaseReport, b: CaseReport) -> tuple[list[DiffEntry], Totals, Totals]:
    """Rows that differ between two estimates (``b`` minus ``a``), with both totals."""
    def index(rows: list[Row]) -> dict[tuple[Any, ...], Row]:
        out: dict[tuple[Any, ...], Row] = {}
        for r in rows:
            if r.duplicate_of is None:
                out.setdefault(_row_key(r), r)
        return out

    ia, ib = index(a.rows), index(b.rows)
    entries = []
    for key in list(ia) + [k for k in ib if k not in ia]:
        ra, rb = ia.get(key), ib.get(key)
        ba = ra.bytes if ra is not None else 0
        bb = rb.bytes if rb is not None else 0
        if ra is not None and rb is not None and ba == bb:
            continue
        r = ra if ra is not None else rb
        assert r is not None
        entries.append(DiffEntry(r.operand, r.group, r.container, r.slot, r.kind, r.orientation, r.shape,
                                 r.dtype, ba, bb, r.note))
    return entries, a.totals, b.totals


def bytes_by_kind(case: CaseReport) -> dict[str, int]:
    """Saved bytes per kind: every non-parameter, non-duplicate row's bytes (views counted once)."""
    out: dict[str, int] = {}
    for r in case.rows:
        if r.is_parameter or r.duplicate_of is not None or r.kind == "container":
            continue
        out[r.kind] = out.get(r.kind, 0) + r.bytes
    return out


def parse_range(text: str, flag: str) -> list[int]:
    """``N``, ``A,B,C``, ``A:B:xK`` (geometric) or ``A:B:+K`` (arithmetic), inclusive of B when hit."""
    text = text.strip()
    if ":" not in text:
        out = []
        for part in text.split(","):
            try:
                v = int(part.strip())
            except ValueError:
                raise UsageError(f"expected an integer, a list A,B or a range A:B:xK / A:B:+K, got {text!r}",
                                 key=flag) from None
            if v < 1:
                raise UsageError(f"must be >= 1, got {v}", key=flag)
            out.append(v)
        return out
    parts = text.split(":")
    bad = UsageError(f"malformed range {text!r}; use A:B:xK (multiply) or A:B:+K (add)", key=flag)
    if len(parts) != 3 or len(parts[2]) < 2 or parts[2][0] not in "x+":
        raise bad
    try:
        a, b, k = int(parts[0]), int(parts[1]), int(parts[2][1:])
    except ValueError:
        raise bad from None
    if a < 1 or b < a:
        raise UsageError(f"range {text!r} needs 1 <= A <= B", key=flag)
    if (parts[2][0] == "x" and k < 2) or (parts[2][0] == "+" and k < 1):
        raise UsageError(f"range {text!r} needs a step of x2 or more / +1 or more", key=flag)
    out = []
    v = a
    while v <= b:
        out.append(v)
        v = v * k if parts[2][0] == "x" else v + k
        if len(out) > 100_000:
            raise UsageError(f"range {text!r} has more than 100000 points", key=flag)
    return out


# ---------------------------------------------------------------------------------------------
# Fast totals (sweeps, plots, the bench): the same rules in closed form, no rows built.
# tests/test_estimate.py checks that they equal compute_totals() of the rows over a grid.
# ---------------------------------------------------------------------------------------------
@dataclass
class FastTotals:
    """Byte totals of one estimate without its rows (same meaning as :class:`Totals`)."""

    logical_bytes: int
    physical_bytes: int
    parameter_bytes: int
    by_kind: dict[str, int]

    @property
    def saved_bytes(self) -> int:
        return self.physical_bytes - self.parameter_bytes


def _keep_single(slots: list[tuple[str, tuple[int, ...], str]], ideal: bool) -> list[tuple[str, tuple[int, ...], str]]:
    """Single-tensor slots the ``ideal`` variant keeps (columnwise copies, their scales and amax)."""
    if not ideal:
        return slots
    has_t = any(s == "_transpose" for s, _, _ in slots)
    out = []
    for s, shape, dtype in slots:
        if s == "_data":
            if not has_t:
                out.append((s, shape, dtype))
            continue
        if SLOT_INFO[s][1] in ("columnwise", "both"):
            out.append((s, shape, dtype))
    return out


def estimate_totals(c: Config, variant: str = "te-2.20") -> FastTotals:
    """Totals of :func:`estimate_config` in closed form (no rows): for sweeps and plots."""
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}", key="--variant")
    ideal = variant == "ideal"
    recipe, t, h, f, g = c.recipe, c.tokens, c.hidden, c.ffn, c.groups
    b = ITEMSIZE[HP_DTYPES[c.dtype]]
    kinds: dict[str, int] = {}
    logical = physical = params = 0

    def add(kind: str, nbytes: int, phys: int | None = None, dup: bool = False) -> None:
        nonlocal logical, physical
        logical += nbytes
        physical += nbytes if phys is None else phys
        if not dup:
            kinds[kind] = kinds.get(kind, 0) + nbytes

    def weights(n: int, k: int, rowwise: bool) -> None:
        nonlocal logical, physical, params
        if recipe == "bf16":
            nbytes = g * n * k * b
            logical += nbytes
            physical += nbytes
            params += nbytes
            return
        for slot, shape, dtype in _keep_single(
            single_buffers(recipe, n, k, rowwise=rowwise, columnwise=True, arch=c.arch, block_dim=2), ideal
        ):
            add(SLOT_INFO[slot][0], g * _prod(shape) * ITEMSIZE[dtype])

    def grouped_q_input(k: int, keep_row: bool, prune: bool) -> None:
        bufs = grouped_buffers_cpp(recipe, t, k, g, arch=c.arch, block_dim=1)
        has_col = "columnwise_data" in bufs
        for slot, (numel, dtype) in bufs.items():
            if recipe == "fp8-current" and slot == "scale_inv" and has_col:
                continue
            if has_col and slot in ("rowwise_data", "scale_inv") and (prune or not keep_row):
                continue
            if ideal and recipe != "fp8-current" and SLOT_INFO[slot][1] == "rowwise":
                continue
            if ideal and recipe == "fp8-current" and slot in ("amax", "scale"):
                continue
            add(SLOT_INFO[slot][0], numel * ITEMSIZE[dtype])
        add("metadata", 8 * g, 0, dup=True)  # first_dims
        add("metadata", 8 * (g + 1), 0, dup=True)  # tensor_offsets

    def offsets(n_int64: int) -> None:
        _, base = bulk_layout([(4 * g, 16)] + [(8 * (g + 1), 16)] * n_int64)
        add("metadata", 4 * g + 8 * (g + 1) * n_int64, base)

    def split_sizes(second: bool) -> None:
        if second and c.split_sizes_dtype == "int64":
            add("metadata", 8 * g, 0, dup=True)
        else:
            add("metadata", 8 * g)

    def activation() -> None:
        if c.fused:
            add("tensor", t * 2 * f * 2)
            add("tensor", t * ITEMSIZE[c.probs_dtype])
        else:
            add("tensor", t * 2 * f * b)
            add("tensor", t * b)

    if c.path == "unfused-split":
        splits = c.splits
        if recipe == "fp8-block":
            s_scale = sum(-(-m // 128) for m in splits)
        elif recipe == "mxfp8":
            s_scale = sum(-(-(m // 32) // 4) * 4 for m in splits)
        elif recipe == "nvfp4":
            s_scale = sum(-((-m // 16) // 4) * 4 for m in splits)
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            split_sizes(op == "fc2")
            if recipe == "bf16":
                add("tensor", t * k * b)
            elif recipe in ("fp8-delayed", "fp8-current"):
                add("data", t * k)
                add("scale_inv", 4 * g)
            else:
                data = t * k // 2 if recipe == "nvfp4" else t * k
                if recipe == "fp8-block":
                    scales = 4 * _rup(k, 4) * s_scale
                else:
                    scales = _rup(k, 128) * s_scale
                amax = 4 * g if recipe == "nvfp4" else 0
                amax_region = 16 * (g - 1) + 4 if amax else 0
                add("data", data, 0)
                add("scale_inv", scales, 0)
                if amax:
                    add("amax", amax, 0)
                physical += data + scales + amax_region + 256
            weights(n, k, rowwise=False)
            if op == "fc1":
                activation()
    elif c.path == "unfused-grouped":
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            split_sizes(op == "fc2")
            offsets(3)
            if recipe == "bf16":
                add("data", t * k * b)
                add("metadata", 8 * g, 0, dup=True)  # first_dims
                add("metadata", 8 * (g + 1), 0, dup=True)  # tensor_offsets
            else:
                grouped_q_input(k, keep_row=False, prune=True)
            weights(n, k, rowwise=True)
            if op == "fc1":
                activation()
    else:  # fused
        nvfp4 = recipe == "nvfp4"
        keep_row = nvfp4 and variant == "te-2.20"
        split_sizes(False)
        offsets(5)
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            if op == "fc2" and recipe == "mxfp8":
                add("data", t * k)
                add("scale_inv", _prod(scale_shape("mxfp8", t, k, True)))
                add("metadata", 8 * g, 0, dup=True)
                add("metadata", 8 * (g + 1), 0, dup=True)
            elif g == 1 and c.dense_single_group:
                for slot, shape, dtype in single_buffers(recipe, t, k, arch=c.arch):
                    orient = SLOT_INFO[slot][1]
                    if slot in ("_rowwise_data", "_rowwise_scale_inv") and not keep_row:
                        continue
                    if ideal and orient == "rowwise":
                        continue
                    add(SLOT_INFO[slot][0], _prod(shape) * ITEMSIZE[dtype])
                add("metadata", 8, 0, dup=True)
                add("metadata", 16, 0, dup=True)
            else:
                grouped_q_input(k, keep_row=keep_row, prune=not nvfp4)
            weights(n, k, rowwise=True)
            if op == "fc1":
                activation()
    return FastTotals(logical, physical, params, kinds)
