"""What each TE kernel entry point reads: the read sets behind ``--unread``'s observed reads.

A ``tex`` function (or a cuDNN-frontend wrapper the fused grouped MLP calls) reads some buffers of
its arguments; which ones is TE's C++ (TE 2.20.2 torch extension, and the git snapshot
``te-internals §0`` names for ``common/``), cited per entry point below. A GEMM given a quantized
tensor reads its rowwise **or** its columnwise buffers by TE's layout rules (:func:`gemm_side`),
never both. An entry point with no read set here is not guessed: the buffers it receives are
``unknown`` (:func:`memaudit.capture.reads.entry_point` with ``reads=None``).

Two ways calls get here:

- under emulation, the kernel guard (:mod:`memaudit.te.emulate.kernels`) and the cuDNN stand-ins
  (:mod:`memaudit.te.emulate.context`) route every call through :func:`routed` with
  ``answers=True``: a stand-in's torch ops are not reads, its read set is;
- with real kernels, :func:`watch` (the plugin's ``reads`` watcher) wraps every ``tex`` function
  for the block the same way (``answers=False``), and does nothing while an emulation's table is
  in place (that table routes the calls itself).

Pointer tables: a kernel given a tensor of device pointers (``b_ptrs``, ``wgrad_ptrs``) reads or
writes the buffers they point at. The entry points that pack them
(``copy_data_ptrs_to_device``, ``swizzle_scales_and_pack_ptrs_for_discrete_weights``) read only
the pointers; :func:`routed` remembers which tensors each table points at, and the kernel that
receives the table reads those.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from memaudit.capture import reads as core
from memaudit.te.emulate.kernels import kernel_table, tex_functions

ROW, COL = "rowwise", "columnwise"


# ---- a TE tensor's buffers by orientation ------------------------------------------------------
@dataclass(frozen=True)
class Buffers:
    """One tensor argument as TE's C++ sees it (``makeTransformerEngineTensor`` /
    ``GroupedTensorFromPyTorchGroupedTensor``): data, scale_inv and amax per orientation, the
    scaling kind, and (grouped) the metadata tensors."""

    kind: str
    """``plain`` (unquantized), ``fp8`` (tensor scaling: delayed or current), ``mxfp8``, ``nvfp4``, ``block``."""
    row: tuple[Any, Any, Any]
    col: tuple[Any, Any, Any]
    meta: tuple[Any, ...] = ()

    @property
    def has_row(self) -> bool:
        return self.row[0] is not None

    @property
    def has_col(self) -> bool:
        return self.col[0] is not None

    def side(self, which: str) -> list[Any]:
        """The buffers of one orientation a kernel reads: data, scale_inv, and amax for NVFP4
        (the only kind whose GEMMs read it, te-internals §11.3)."""
        data, scale_inv, amax = self.row if which == ROW else self.col
        return [data, scale_inv] + ([amax] if self.kind == "nvfp4" else [])


def _kind_of_quantizer(q: Any) -> str:
    from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

    if q is None:
        return "plain"
    if isinstance(q, MXFP8Quantizer):
        return "mxfp8"
    if isinstance(q, NVFP4Quantizer):
        return "nvfp4"
    if isinstance(q, Float8BlockQuantizer):
        return "block"
    return "fp8"


def buffers(t: Any) -> Buffers | None:
    """``t``'s buffers as the C++ sees them, or None for something that is not a tensor TE's
    C++ converts (a list, None, a number)."""
    import torch
    from transformer_engine.pytorch.tensor.storage.float8_blockwise_tensor_storage import (
        Float8BlockwiseQTensorStorage,
    )
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage
    from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage
    from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage
    from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage

    if isinstance(t, GroupedTensorStorage):
        return Buffers(
            _kind_of_quantizer(t.quantizer),
            (t.rowwise_data, t.scale_inv, t.amax),
            (t.columnwise_data, t.columnwise_scale_inv, t.columnwise_amax),
            (t.first_dims, t.last_dims, t.tensor_offsets),
        )
    if isinstance(t, Float8TensorStorage):  # one scale_inv for both (the transpose is the data's)
        return Buffers("fp8", (t._data, t._scale_inv, None), (t._transpose, t._scale_inv, None))
    if isinstance(t, MXFP8TensorStorage):
        return Buffers(
            "mxfp8", (t._rowwise_data, t._rowwise_scale_inv, None), (t._columnwise_data, t._columnwise_scale_inv, None)
        )
    if isinstance(t, NVFP4TensorStorage):
        return Buffers(
            "nvfp4",
            (t._rowwise_data, t._rowwise_scale_inv, t._amax_rowwise),
            (t._columnwise_data, t._columnwise_scale_inv, t._amax_columnwise),
        )
    if isinstance(t, Float8BlockwiseQTensorStorage):
        return Buffers(
            "block", (t._rowwise_data, t._rowwise_scale_inv, None), (t._columnwise_data, t._columnwise_scale_inv, None)
        )
    if isinstance(t, torch.Tensor):
        return Buffers("plain", (t, None, None), (None, None, None))
    return None


def every_buffer(t: Any) -> list[Any]:
    """Every tensor ``t`` holds (a TE tensor's buffers of both orientations and metadata; a list's
    members): what an entry point that received it could read."""
    if isinstance(t, list | tuple):
        return [b for m in t for b in every_buffer(m)]
    if isinstance(t, dict):
        return [b for m in t.values() for b in every_buffer(m)]
    bufs = buffers(t)
    if bufs is None:
        return []
    return [b for b in (*bufs.row, *bufs.col, *bufs.meta) if b is not None]


# ---- GEMM orientation ------------------------------------------------------------------------------
def _non_tn_fp8() -> bool:
    from transformer_engine.pytorch.utils import is_non_tn_fp8_gemm_supported

    return bool(is_non_tn_fp8_gemm_supported())


def gemm_side(b: Buffers, trans: bool, is_a: bool, *, grouped: bool) -> str:
    """Which orientation a GEMM reads of operand ``b`` (te-internals §11.1):
    ``CanonicalizeGemmInput`` (common/gemm/cublaslt_gemm.cu:102-260) for one GEMM,
    ``choose_grouped_operand_storage`` (common/gemm/cublaslt_grouped_gemm.cu:486-560) for the
    grouped ones. MXFP8, NVFP4 and FP8 block scaling: A transposed and B not transposed read
    rowwise, the other two columnwise. FP8 tensor scaling: rowwise, except on a TN-only
    architecture (Hopper) for A not transposed or B transposed, which read the columnwise
    transpose (grouped: only that; one GEMM: where it is FP8); where rowwise is missing and the
    layout allows, columnwise. Unquantized: rowwise."""
    if b.kind == "plain":
        return ROW
    rowwise_wanted = trans if is_a else not trans
    if b.kind in ("mxfp8", "nvfp4", "block"):
        return ROW if rowwise_wanted else COL
    # FP8 tensor scaling (a layout the C++ refuses reads nothing: rowwise stands for it)
    if not _non_tn_fp8() and not rowwise_wanted:
        return COL if b.has_col else ROW
    if not b.has_row and b.has_col:
        return COL
    return ROW


def _operand(t: Any, trans: bool, is_a: bool, *, grouped: bool) -> list[Any]:
    if isinstance(t, list | tuple):
        return [x for m in t for x in _operand(m, trans, is_a, grouped=grouped)]
    b = buffers(t)
    if b is None:
        return []
    return b.side(gemm_side(b, trans, is_a, grouped=grouped)) + list(b.meta)


# ---- read sets -------------------------------------------------------------------------------------
ReadSet = Callable[..., list[Any] | None]
"""(entry point's args, kwargs) -> the tensors it reads (their storages), or None: it cannot say."""

READ_SETS: dict[str, ReadSet] = {}
"""``tex`` entry point (or ``cudnn.NAME``) -> its read set."""


def _reads(*names: str) -> Callable[[ReadSet], ReadSet]:
    def put(fn: ReadSet) -> ReadSet:
        for name in names:
            READ_SETS[name] = fn
        return fn

    return put


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


@_reads(
    "te_general_grouped_gemm_for_grouped_tensor",
    "te_general_grouped_gemm_for_discrete_in",
    "te_general_grouped_gemm_for_discrete_out",
)
def _grouped_gemm(*args: Any, **kwargs: Any) -> list[Any]:
    """(A, transa, B, transb, D, bias, bias_scale, alpha, beta, ...) (extensions/gemm.cpp:639-836):
    A and B by :func:`gemm_side` (a list A member by member, the same rule,
    ``build_grouped_gemm_multi_inputA_args``, cublaslt_grouped_gemm.cu:600-650), each grouped
    operand's first_dims, last_dims and tensor_offsets (the setup kernel reads them,
    cublaslt_grouped_gemm.cu:59-110), NVFP4's amax of the chosen side (the per-group alpha,
    cublaslt_grouped_gemm.cu:1400-1417), alpha, beta, bias and bias_scale; D as C (D is C, read
    when beta is nonzero: counted as read, te-internals §11.3)."""
    a, transa, b, transb, d = args[:5]
    out = _operand(a, bool(transa), True, grouped=True) + _operand(b, bool(transb), False, grouped=True)
    out += every_buffer(d)
    out += [x for x in args[6:9] if hasattr(x, "untyped_storage")]
    out += every_buffer(args[5]) if len(args) > 5 else []
    return out


@_reads("te_general_grouped_gemm")
def _multi_gemm(*args: Any, **kwargs: Any) -> list[Any]:
    """(A list, transa, B list, transb, D list, D_type, m_splits, bias list, bias_type,
    single_output, pre_gelu_out, grad, workspace, workspaceSize, accumulate, ...)
    (extensions/gemm.cpp:468-565): one GEMM per member (``nvte_multi_tensor_gemm``), each operand
    by :func:`gemm_side` (``CanonicalizeGemmInput``); the bias list; D when ``accumulate``. A member
    whose A or B is empty (a group that got no tokens) runs no GEMM: its D, bias and pre-GELU output
    are zeroed and the loop goes on (``te_A.numel() == 0 || te_B.numel() == 0``), so none of its
    operands is read (te-internals §11.4)."""
    a, transa, b, transb, d = args[:5]
    running = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if _numel(x) and _numel(y)]
    out = _operand([a[i] for i in running], bool(transa), True, grouped=False)
    out += _operand([b[i] for i in running], bool(transb), False, grouped=False)
    bias = args[7] if len(args) > 7 else None
    out += [bias[i] for i in running if bias and i < len(bias) and bias[i] is not None and _numel(bias[i])]
    accumulate = args[14] if len(args) > 14 else kwargs.get("accumulate", False)
    if accumulate and d is not None:
        out += every_buffer([d[i] for i in running if i < len(d)])
    return out


def _numel(t: Any) -> int:
    """Elements of a plain or quantized tensor (its logical shape)."""
    numel = getattr(t, "numel", None)
    if callable(numel):
        return int(numel())
    shape = getattr(t, "shape", None) or getattr(t, "size", lambda: ())()
    n = 1
    for s in shape:
        n *= int(s)
    return n


@_reads("generic_gemm")
def _generic_gemm(*args: Any, **kwargs: Any) -> list[Any]:
    """(A, transA, B, transB, D, quantizer, output_dtype, bias, bias_type, gelu, gelu_in, grad,
    workspace, workspace_size, accumulate, ...) (extensions/gemm.cpp:144-413): A and B by
    :func:`gemm_side` (NVFP4's amax of the chosen side: ``nvte_nvfp4_compute_per_tensor_scale``,
    cublaslt_gemm.cu:376-384); bias; gelu_in when ``grad`` (dgelu epilogue); D when
    ``accumulate``."""
    a, transa, b, transb, d = args[:5]
    out = _operand(a, bool(transa), True, grouped=False) + _operand(b, bool(transb), False, grouped=False)
    bias = _arg(args, kwargs, 7, "bias")
    if bias is not None:
        out += every_buffer(bias)
    if _arg(args, kwargs, 11, "grad", False) and _arg(args, kwargs, 10, "gelu_in") is not None:
        out += every_buffer(_arg(args, kwargs, 10, "gelu_in"))
    if _arg(args, kwargs, 14, "accumulate", False) and d is not None:
        out += every_buffer(d)
    return out


@_reads("quantize")
def _quantize(*args: Any, **kwargs: Any) -> list[Any]:
    """(tensor, quantizer, output, noop) (extensions/cast.cpp ``quantize``): the input and the
    noop flag (``output`` is written)."""
    return [_arg(args, kwargs, 0, "tensor"), _arg(args, kwargs, 3, "noop")]


@_reads("split_quantize")
def _split_quantize(*args: Any, **kwargs: Any) -> list[Any]:
    """(tensor, split_sections, quantizers, ...) (cast.cpp:1895-2059): the input."""
    return [_arg(args, kwargs, 0, "tensor")]


@_reads("group_quantize", "nvfp4_group_quantize_with_amax", "nvfp4_quantize_with_amax")
def _group_quantize(*args: Any, **kwargs: Any) -> list[Any]:
    """``group_quantize`` (tensor, quantizer, num_tensors, first_dims, last_dims, tensor_offsets,
    noop_flag, output) (cast.cpp:277-427): the input, the split metadata it sizes members from,
    the noop flag; the ``_with_amax`` variants (cast.cpp:91-134, 429-503) also the amaxes they
    are given (the global scales)."""
    out = [args[0]] + [x for x in args[3:] if hasattr(x, "untyped_storage")]
    out += [v for k, v in kwargs.items() if k != "output" and hasattr(v, "untyped_storage")]
    if len(args) > 2 and hasattr(args[2], "untyped_storage"):  # nvfp4_quantize_with_amax(tensor, q, row_amax, col_amax)
        out.append(args[2])
    return out


@_reads("scaled_dswiglu", "scaled_clamped_dswiglu", "scaled_dsrelu", "scaled_dsituglu")
def _scaled_dact(*args: Any, **kwargs: Any) -> list[Any]:
    """(grad, input, act_scales, quantizer, ...) (extensions/activation.cpp
    ``scaled_dactivation_compute``): the kernel reads the gradient, the forward input and the
    scales."""
    return list(args[:3])


@_reads("scaled_swiglu", "scaled_clamped_swiglu", "scaled_srelu", "scaled_situglu")
def _scaled_act(*args: Any, **kwargs: Any) -> list[Any]:
    """(input, act_scales, quantizer, ...) (activation.cpp ``scaled_activation_helper``): input and scales."""
    return list(args[:2])


@_reads("splits_to_offsets_multi")
def _splits(*args: Any, **kwargs: Any) -> list[Any]:
    """(split_sizes, device, ...): the split sizes."""
    return [args[0]]


@_reads("dswiglu")
def _dact(*args: Any, **kwargs: Any) -> list[Any]:
    """(grad, input, quantizer) (TE 2.16-2.17 extensions/activation.cpp ``dactivation_helper``):
    the kernel reads the gradient and the forward input."""
    return list(args[:2])


@_reads("bulk_allocate")
def _allocates(*args: Any, **kwargs: Any) -> list[Any]:
    """(shapes, dtypes, device, alignments) (TE 2.16-2.17 extensions/allocate.cpp:15-90): allocates
    new buffers, reads none."""
    return []


@_reads("copy_data_ptrs_to_device")
def _pointers_only(*args: Any, **kwargs: Any) -> list[Any]:
    """(tensors, device): only the tensors' addresses (no contents); the table goes to a kernel,
    which reads or writes what it points at (:func:`routed` remembers it)."""
    return []


@_reads("grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights")
def _swizzle_and_pack(*args: Any, **kwargs: Any) -> list[Any]:
    """(data_tensors, scale_tensors, swizzle_type, device) (grouped_mlp_experimental.cpp:23-153):
    copies every scale into the swizzled buffer (reads them); packs the data tensors' addresses
    only (the kernel given the table reads them)."""
    return list(args[1])


@_reads("swizzle_scales_for_gemm_")
def _swizzle(*args: Any, **kwargs: Any) -> list[Any]:
    """(tensor) (swizzle.cpp:609-665): reads the scales of each orientation it holds, when not
    yet swizzled."""
    t = args[0]
    if getattr(t, "_with_gemm_swizzled_scales", False):
        return []
    b = buffers(t)
    return (
        []
        if b is None
        else [x for x in (b.row[1] if b.has_row else None, b.col[1] if b.has_col else None) if x is not None]
    )


@_reads("grouped_swizzle_for_gemm")
def _grouped_swizzle(*args: Any, **kwargs: Any) -> list[Any]:
    """(tensor, rowwise, columnwise) (swizzle.cpp:358-508): MXFP8 only, when not yet swizzled:
    the scales of the orientations asked for."""
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

    t, rowwise, columnwise = args[0], _arg(args, kwargs, 1, "rowwise"), _arg(args, kwargs, 2, "columnwise")
    if not isinstance(t.quantizer, MXFP8Quantizer) or t._with_gemm_swizzled_scales:
        return []
    return [x for x, want in ((t.scale_inv, rowwise), (t.columnwise_scale_inv, columnwise)) if want and x is not None]


@_reads("fused_amax_and_scale_update_after_reduction")
def _amax_update(*args: Any, **kwargs: Any) -> list[Any]:
    """(amax_reduction_buffer, amax_histories, scales, ...) (recipe.cpp): the delayed-scaling
    state, every tensor it is given."""
    return every_buffer(list(args) + list(kwargs.values()))


# ---- the cuDNN-frontend wrappers -------------------------------------------------------------------
CUDNN_OUTPUTS = frozenset({"d_tensor", "wgrad_tensor", "wgrad_ptrs", "descriptor_workspace"})
"""Keyword arguments the wrappers write (``wgrad_*`` are read too with ``accumulate_on_output``)."""


def _cudnn(**kwargs: Any) -> list[Any]:
    """The fused grouped MLP's cuDNN-frontend wrappers (``grouped_gemm_{glu,dglu,srelu,dsrelu,
    quant,wgrad}_wrapper_sm100``; cudnn-frontend 1.23.0 ``grouped_gemm_*/api.py``, their argument
    lists): every input tensor keyword (A, B, C: the forward's activation input for a dactivation,
    their scales, alpha, beta, prob, norm_const, offsets, global scales) and ``dprob_tensor`` (added
    into), the buffers ``b_ptrs``/``sfb_ptrs`` point at; ``d_tensor`` is written; ``wgrad_tensor``
    and what ``wgrad_ptrs`` points at are read only with ``accumulate_on_output``. TE's Python
    chose the orientation already: it passes the columnwise or rowwise views
    (ops/fused/grouped_mlp.py:639-700, 2150-2400)."""
    out: list[Any] = []
    accumulate = bool(kwargs.get("accumulate_on_output", False))
    for key, value in kwargs.items():
        if key in CUDNN_OUTPUTS and not (accumulate and key.startswith("wgrad")):
            continue
        if key.endswith("_ptrs"):
            out += pointees(value)
        if hasattr(value, "untyped_storage"):
            out.append(value)
    return out


# ---- pointer tables --------------------------------------------------------------------------------
_POINTEES: Any = None


def _pointee_table() -> Any:
    global _POINTEES
    if _POINTEES is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _POINTEES = WeakIdKeyDictionary()
    return _POINTEES


def pointees(table: Any) -> list[Any]:
    """The tensors a pointer table (or a view of it) points at, as far as :func:`routed` saw it made."""
    if not hasattr(table, "untyped_storage"):
        return []
    found: list[Any] = []
    key = table.untyped_storage()._cdata
    for t, targets in list(_pointee_table().items()):
        if t.untyped_storage()._cdata == key:
            found += targets
    return found


def _remember_tables(name: str, args: tuple[Any, ...], result: Any) -> None:
    if name == "copy_data_ptrs_to_device" and hasattr(result, "untyped_storage"):
        _pointee_table()[result] = [t for t in args[0] if t is not None]
    elif name == "grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights" and isinstance(
        result, tuple
    ):
        _pointee_table()[result[0]] = [t for t in args[0] if t is not None]
        _pointee_table()[result[1]] = [result[2]]  # the scale pointers address the swizzled copy


# ---- routing ---------------------------------------------------------------------------------------
def reads_of(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
    """The buffers entry point ``name`` reads given these arguments, or None where there is no
    read set (``cudnn.NAME`` for a cuDNN-frontend wrapper)."""
    if name.startswith("cudnn."):
        return _cudnn(**kwargs)
    fn = READ_SETS.get(name)
    if fn is None:
        return None
    found = fn(*args, **kwargs)
    return None if found is None else [t for t in found if t is not None]


def routed(name: str, fn: Callable[..., Any], *, answers: bool) -> Callable[..., Any]:
    """``fn`` (entry point ``name``) reporting its reads to the active observer, if any."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        obs = core.observer()
        if obs is None or not obs.recording():
            return fn(*args, **kwargs)
        try:
            found = reads_of(name, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - a read set that cannot follow these arguments says so
            obs.note_opaque(f"{name} (read set failed: {type(exc).__name__})")
            found = None
        label = name if name.startswith("cudnn.") else f"tex.{name}"
        received = every_buffer(list(args) + list(kwargs.values())) if found is None else ()
        with core.entry_point(label, found, received, answers=answers):
            result = fn(*args, **kwargs)
        _remember_tables(name, args, result)
        return result

    return call


_TABLE_DEPTH = [0]


@contextmanager
def emulation_table() -> Iterator[None]:
    """Marks an emulation's kernel table as in place (its guard routes the calls): :func:`watch`
    then wraps nothing."""
    _TABLE_DEPTH[0] += 1
    try:
        yield
    finally:
        _TABLE_DEPTH[0] -= 1


@contextmanager
def watch() -> Iterator[None]:
    """The TE plugin's ``reads`` watcher: every ``tex`` function routed through :func:`routed`
    (real kernels, ``answers=False``) for the block; a no-op under an emulation, whose table
    routes its own calls."""
    names = frozenset(tex_functions())
    with kernel_table({}, real=names, route=lambda name, fn, answers: _unless_emulated(name, fn)):
        yield


def _unless_emulated(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    wrapped = routed(name, fn, answers=False)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _TABLE_DEPTH[0]:
            return fn(*args, **kwargs)
        return wrapped(*args, **kwargs)

    return call
