"""TE-aware provenance (memaudit.te.capture.classify) against REAL TransformerEngine 2.20.2 storage objects.

TE imports on CPU (after torch) and its storage objects can be built there (no kernel runs). Each
test pushes them through TE's own ``prepare_for_saving`` into ``ctx.save_for_backward`` and sets
``ctx.tensor_objects``, exactly as ``ops/fuser.py`` does (te-internals §2.0), then checks what
``capture()`` made of every buffer. Expected shapes come from te-internals §5.2/§5.3 formulas.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

try:  # torch first: TE's import needs it loaded (te/README.md)
    import transformer_engine.pytorch as te
    import transformer_engine_torch as tex
except Exception as exc:  # noqa: BLE001 - not installed (ModuleNotFoundError), or broken (ImportError, OSError)
    pytest.skip(
        f"TransformerEngine (transformer_engine.pytorch) is not importable here: {type(exc).__name__}: {exc}",
        allow_module_level=True,
    )

from transformer_engine.pytorch.ops.op import OperationContext  # noqa: E402
from transformer_engine.pytorch.quantized_tensor import (  # noqa: E402
    QuantizedTensorStorage,
    prepare_for_saving,
    restore_from_func_ctx,
)
from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer  # noqa: E402
from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer, Float8Tensor  # noqa: E402
from transformer_engine.pytorch.tensor.grouped_tensor import GroupedTensor  # noqa: E402
from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer, MXFP8Tensor  # noqa: E402
from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer, NVFP4Tensor  # noqa: E402
from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage  # noqa: E402

from memaudit.capture import capture, hooks  # noqa: E402
from memaudit.report import Row  # noqa: E402
from memaudit.te.capture import classify as tec  # noqa: E402

pytestmark = pytest.mark.te

U8 = torch.uint8
F32 = 4
E4M3 = tex.DType.kFloat8E4M3
OP = "SaveLikeFuserBackward"


def roundup(a: int, b: int) -> int:
    return (a + b - 1) // b * b


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


class SaveLikeFuser(torch.autograd.Function):
    """What ``OperationFuser``'s autograd function does with ``to_save`` (ops/fuser.py:214-230)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, to_save: list[Any], extra: dict[str, Any]) -> torch.Tensor:
        tensors_to_save, tensor_objects = prepare_for_saving(*to_save)
        ctx.save_for_backward(*tensors_to_save)
        ctx.tensor_objects = tensor_objects
        for k, v in extra.items():
            setattr(ctx, k, v)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        ctx.restored = restore_from_func_ctx(ctx)
        return g * 2, None, None


def save_like_fuser(to_save: list[Any], **extra: Any) -> tuple[list[Row], list[str], torch.Tensor]:
    x = torch.randn(2, requires_grad=True)
    with capture() as cap:
        y = SaveLikeFuser.apply(x, to_save, extra)
    rep = cap.report(outputs=y)
    return rep.rows, rep.warnings, y


def summary(r: Row) -> tuple[Any, ...]:
    """(saved_as, slot, container, kind, orientation, format, shape, dtype, bytes)."""
    return (r.saved_as, r.slot, r.container, r.kind, r.orientation, r.format, r.shape, r.dtype, r.bytes)


def pos(i: int) -> str:
    return f"saved_tensors[{i}]"


@pytest.fixture
def cuda_device_is_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NVFP4Quantizer()`` (and its ``copy()``) ask ``torch.cuda.current_device()`` for the RHT matrix,
    and a non-internal grouped tensor's members take it as their device: point it at the CPU."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")


def nvfp4_quantizer(*, internal: bool) -> NVFP4Quantizer:
    try:
        q = NVFP4Quantizer()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"NVFP4Quantizer cannot be built on this machine: {type(exc).__name__}: {exc}")
    q.internal = internal
    return q


# ---- single-tensor storages decomposed by prepare_for_saving ------------------------------------


def test_float8_storage_rowwise_and_transpose() -> None:
    M, K = 64, 96
    data, t, s = torch.empty(M, K, dtype=U8), torch.empty(K, M, dtype=U8), torch.empty(1)
    obj = Float8TensorStorage(data=data, fp8_scale_inv=s, fp8_dtype=E4M3, fake_dtype=torch.bfloat16, data_transpose=t)
    rows, warnings, y = save_like_fuser([obj])
    C = "Float8TensorStorage"
    assert [summary(r) for r in rows] == [
        (pos(0), "_data", C, "data", "rowwise", "fp8", [M, K], "uint8", M * K),
        (pos(1), "_transpose", C, "data", "columnwise", "fp8", [K, M], "uint8", K * M),
        (pos(2), "_scale_inv", C, "scale_inv", "both", "fp8", [1], "float32", F32),
    ]
    assert all(r.op == OP and r.container_index is None and r.duplicate_of is None for r in rows)
    assert len({r.storage for r in rows}) == 3
    assert warnings == []
    # TE's own semantics are untouched: emptied by prepare_for_saving, restored in backward
    assert obj._data is None and obj._transpose is None and obj._scale_inv is None
    y.sum().backward()
    assert obj._data is data and obj._transpose is t and obj._scale_inv is s


def test_float8_storage_hopper_layout_keeps_positions() -> None:
    """Hopper drops ``_data``: the hook sees ``_transpose`` + ``_scale_inv`` at positions 1 and 2."""
    M, K = 32, 48
    obj = Float8TensorStorage(
        data=None,
        fp8_scale_inv=torch.empty(1),
        fp8_dtype=E4M3,
        fake_dtype=torch.bfloat16,
        data_transpose=torch.empty(K, M, dtype=U8),
    )
    plain = torch.randn(4, 4)
    rows, _, _ = save_like_fuser([plain, obj])
    assert [summary(r) for r in rows] == [
        (pos(0), pos(0), None, "tensor", None, "fp32", [4, 4], "float32", 16 * F32),
        (pos(2), "_transpose", "Float8TensorStorage", "data", "columnwise", "fp8", [K, M], "uint8", K * M),
        (pos(3), "_scale_inv", "Float8TensorStorage", "scale_inv", "both", "fp8", [1], "float32", F32),
    ]


@pytest.mark.parametrize("shape", [(256, 128), (3, 64, 160)])
def test_mxfp8_storage_from_quantizer(shape: tuple[int, ...]) -> None:
    q = MXFP8Quantizer(E4M3)
    q.internal = True
    obj = q.make_empty(shape, dtype=torch.bfloat16, device="cpu")
    assert type(obj).__name__ == "MXFP8TensorStorage"
    M, K = math.prod(shape[:-1]), shape[-1]
    row_scale = [roundup(M, 128), roundup(K // 32, 4)]
    col_scale = [roundup(M // 32, 4), roundup(K, 128)]
    rows, _, _ = save_like_fuser([obj])
    C = "MXFP8TensorStorage"
    assert [summary(r) for r in rows] == [
        (pos(0), "_rowwise_data", C, "data", "rowwise", "mxfp8", list(shape), "uint8", M * K),
        (pos(1), "_columnwise_data", C, "data", "columnwise", "mxfp8", list(shape), "uint8", M * K),
        (pos(2), "_rowwise_scale_inv", C, "scale_inv", "rowwise", "mxfp8", row_scale, "uint8", math.prod(row_scale)),
        (
            pos(3),
            "_columnwise_scale_inv",
            C,
            "scale_inv",
            "columnwise",
            "mxfp8",
            col_scale,
            "uint8",
            math.prod(col_scale),
        ),
    ]


@pytest.mark.parametrize("dim", [1, 2])
def test_float8_blockwise_storage_from_quantizer(dim: int) -> None:
    M, K = 384, 200
    q = Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True, block_scaling_dim=dim)
    q.internal = True
    obj = q.make_empty((M, K), dtype=torch.bfloat16, device="cpu")
    if dim == 2:
        row_scale = [cdiv(M, 128), roundup(cdiv(K, 128), 4)]
        col_scale = [cdiv(K, 128), roundup(cdiv(M, 128), 4)]
    else:
        row_scale = [cdiv(K, 128), roundup(M, 4)]
        col_scale = [cdiv(M, 128), roundup(K, 4)]
    rows, _, _ = save_like_fuser([obj])
    C = "Float8BlockwiseQTensorStorage"
    assert [summary(r) for r in rows] == [
        (pos(0), "_rowwise_data", C, "data", "rowwise", "fp8-block", [M, K], "uint8", M * K),
        (pos(1), "_columnwise_data", C, "data", "columnwise", "fp8-block", [K, M], "uint8", K * M),
        (
            pos(2),
            "_rowwise_scale_inv",
            C,
            "scale_inv",
            "rowwise",
            "fp8-block",
            row_scale,
            "float32",
            math.prod(row_scale) * F32,
        ),
        (
            pos(3),
            "_columnwise_scale_inv",
            C,
            "scale_inv",
            "columnwise",
            "fp8-block",
            col_scale,
            "float32",
            math.prod(col_scale) * F32,
        ),
    ]


def nvfp4_buffers(M: int, K: int) -> dict[str, torch.Tensor]:
    """Buffers of the shapes te-internals §5.2/§5.3 give for an (M, K) NVFP4 tensor."""
    return {
        "rowwise_data": torch.empty(M, K // 2, dtype=U8),
        "rowwise_scale_inv": torch.empty(roundup(M, 128), roundup(cdiv(K, 16), 4), dtype=U8),
        "columnwise_data": torch.empty(K, M // 2, dtype=U8),
        "columnwise_scale_inv": torch.empty(roundup(K, 128), roundup(cdiv(M, 16), 4), dtype=U8),
        "amax_rowwise": torch.empty(1),
        "amax_columnwise": torch.empty(1),
    }


def test_nvfp4_storage_rowwise_vs_columnwise_only_by_provenance() -> None:
    """M == K: rowwise and columnwise data (and scales) have identical shape and dtype."""
    M = K = 128
    b = nvfp4_buffers(M, K)
    assert b["rowwise_data"].shape == b["columnwise_data"].shape
    assert b["rowwise_scale_inv"].shape == b["columnwise_scale_inv"].shape
    obj = NVFP4TensorStorage(
        b["rowwise_data"], b["rowwise_scale_inv"], b["columnwise_data"], b["columnwise_scale_inv"],
        b["amax_rowwise"], b["amax_columnwise"], tex.DType.kFloat4E2M1, None, False, fake_dtype=torch.bfloat16,
    )  # fmt: skip
    rows, _, y = save_like_fuser([obj])
    C = "NVFP4TensorStorage"
    D, S = [M, K // 2], [roundup(M, 128), roundup(K // 16, 4)]
    assert [summary(r) for r in rows] == [
        (pos(0), "_rowwise_data", C, "data", "rowwise", "nvfp4", D, "uint8", M * K // 2),
        (pos(1), "_columnwise_data", C, "data", "columnwise", "nvfp4", D, "uint8", M * K // 2),
        (pos(2), "_rowwise_scale_inv", C, "scale_inv", "rowwise", "nvfp4", S, "uint8", math.prod(S)),
        (pos(3), "_columnwise_scale_inv", C, "scale_inv", "columnwise", "nvfp4", S, "uint8", math.prod(S)),
        (pos(4), "_amax_rowwise", C, "amax", "rowwise", "nvfp4", [1], "float32", F32),
        (pos(5), "_amax_columnwise", C, "amax", "columnwise", "nvfp4", [1], "float32", F32),
    ]
    # and the rows point at the right buffers (storage ids follow first-seen order)
    assert [r.storage for r in rows] == ["s0", "s1", "s2", "s3", "s4", "s5"]
    y.sum().backward()
    assert obj._rowwise_data is b["rowwise_data"] and obj._columnwise_data is b["columnwise_data"]


def test_nvfp4_storage_non_square_shapes() -> None:
    M, K = 256, 64
    b = nvfp4_buffers(M, K)
    obj = NVFP4TensorStorage(
        b["rowwise_data"], b["rowwise_scale_inv"], b["columnwise_data"], b["columnwise_scale_inv"],
        b["amax_rowwise"], b["amax_columnwise"], tex.DType.kFloat4E2M1, None, False,
    )  # fmt: skip
    rows, _, _ = save_like_fuser([obj])
    assert [(r.slot, r.shape) for r in rows] == [
        ("_rowwise_data", [M, K // 2]),
        ("_columnwise_data", [K, M // 2]),
        ("_rowwise_scale_inv", [roundup(M, 128), roundup(K // 16, 4)]),
        ("_columnwise_scale_inv", [roundup(K, 128), roundup(M // 16, 4)]),
        ("_amax_rowwise", [1]),
        ("_amax_columnwise", [1]),
    ]


# ---- grouped storages ---------------------------------------------------------------------------

SHAPES = [(256, 128), (0, 128), (384, 128), (128, 128)]  # uneven first dims; one empty group
G = len(SHAPES)
T = sum(m for m, _ in SHAPES)
K = SHAPES[0][1]


def offsets_of(shapes: list[tuple[int, int]]) -> list[int]:
    out = [0]
    for m, k in shapes:
        out.append(out[-1] + m * k)
    return out


def test_grouped_mxfp8_storage() -> None:
    q = MXFP8Quantizer(E4M3)
    q.internal = True
    obj = GroupedTensorStorage.make_grouped_tensor_with_shapes(
        G, SHAPES, quantizer=q, device="cpu", dtype=torch.bfloat16
    )
    assert type(obj) is GroupedTensorStorage
    first_dims, offsets = obj.first_dims, obj.tensor_offsets
    row_scale = sum(roundup(m, 128) * roundup(k // 32, 4) for m, k in SHAPES)
    col_scale = sum(roundup(m // 32, 4) * roundup(k, 128) for m, k in SHAPES)
    rows, warnings, y = save_like_fuser([obj])
    C = "GroupedTensorStorage"
    # prepare_for_saving order: rowwise_data, columnwise_data, scale_inv, columnwise_scale_inv,
    # amax, columnwise_amax, scale, first_dims, last_dims, tensor_offsets (None: no row)
    assert [summary(r) for r in rows] == [
        (pos(0), "rowwise_data", C, "data", "rowwise", "mxfp8", [T * K], "uint8", T * K),
        (pos(1), "columnwise_data", C, "data", "columnwise", "mxfp8", [T * K], "uint8", T * K),
        (pos(2), "scale_inv", C, "scale_inv", "rowwise", "mxfp8", [row_scale], "uint8", row_scale),
        (pos(3), "columnwise_scale_inv", C, "scale_inv", "columnwise", "mxfp8", [col_scale], "uint8", col_scale),
        (pos(7), "first_dims", C, "metadata", None, "int64", [G], "int64", G * 8),
        (pos(9), "tensor_offsets", C, "metadata", None, "int64", [G + 1], "int64", (G + 1) * 8),
    ]
    assert warnings == []
    y.sum().backward()
    assert obj.first_dims is first_dims and obj.tensor_offsets is offsets
    assert first_dims.tolist() == [m for m, _ in SHAPES] and offsets.tolist() == offsets_of(SHAPES)


def test_grouped_nvfp4_storage_rowwise_vs_columnwise(cuda_device_is_cpu: None) -> None:
    q = nvfp4_quantizer(internal=True)
    obj = GroupedTensorStorage.make_grouped_tensor_with_shapes(
        G, SHAPES, quantizer=q, device="cpu", dtype=torch.bfloat16
    )
    assert obj.rowwise_data.shape == obj.columnwise_data.shape == (T * K // 2,)
    assert obj.rowwise_data.dtype == obj.columnwise_data.dtype == U8
    row_scale = sum(roundup(m, 128) * roundup(cdiv(k, 16), 4) for m, k in SHAPES)
    col_scale = sum(roundup(k, 128) * roundup(cdiv(m, 16), 4) for m, k in SHAPES)
    rows, _, _ = save_like_fuser([obj])
    C = "GroupedTensorStorage"
    assert [summary(r) for r in rows] == [
        (pos(0), "rowwise_data", C, "data", "rowwise", "nvfp4", [T * K // 2], "uint8", T * K // 2),
        (pos(1), "columnwise_data", C, "data", "columnwise", "nvfp4", [T * K // 2], "uint8", T * K // 2),
        (pos(2), "scale_inv", C, "scale_inv", "rowwise", "nvfp4", [row_scale], "uint8", row_scale),
        (pos(3), "columnwise_scale_inv", C, "scale_inv", "columnwise", "nvfp4", [col_scale], "uint8", col_scale),
        (pos(4), "amax", C, "amax", "rowwise", "nvfp4", [G], "float32", G * F32),
        (pos(5), "columnwise_amax", C, "amax", "columnwise", "nvfp4", [G], "float32", G * F32),
        (pos(7), "first_dims", C, "metadata", None, "int64", [G], "int64", G * 8),
        (pos(9), "tensor_offsets", C, "metadata", None, "int64", [G + 1], "int64", (G + 1) * 8),
    ]


def test_grouped_fp8_current_scaling_shared_scale_tensor() -> None:
    """FP8 current scaling holds ONE scale tensor as scale_inv and columnwise_scale_inv (§5.2)."""
    q = Float8CurrentScalingQuantizer(E4M3, torch.device("cpu"))
    q.internal = True
    shapes = [(32, 64), (96, 64)]
    n, t, k = len(shapes), 128, 64
    shared = torch.empty(n)
    obj = GroupedTensorStorage(
        (t, k), torch.bfloat16, num_tensors=n, shapes=shapes, quantizer=q,
        data=torch.empty(t * k, dtype=U8), columnwise_data=torch.empty(t * k, dtype=U8),
        scale_inv=shared, columnwise_scale_inv=shared, amax=torch.empty(n), scale=torch.empty(n),
        first_dims=torch.tensor([32, 96]), tensor_offsets=torch.tensor(offsets_of(shapes)),
    )  # fmt: skip
    rows, _, _ = save_like_fuser([obj])
    C = "GroupedTensorStorage"
    assert [summary(r) for r in rows] == [
        (pos(0), "rowwise_data", C, "data", "rowwise", "fp8", [t * k], "uint8", t * k),
        (pos(1), "columnwise_data", C, "data", "columnwise", "fp8", [t * k], "uint8", t * k),
        (pos(2), "scale_inv", C, "scale_inv", "both", "fp8", [n], "float32", n * F32),
        (pos(3), "columnwise_scale_inv", C, "scale_inv", "columnwise", "fp8", [n], "float32", n * F32),
        (pos(4), "amax", C, "amax", "rowwise", "fp8", [n], "float32", n * F32),
        (pos(6), "scale", C, "scale", None, "fp8", [n], "float32", n * F32),
        (pos(7), "first_dims", C, "metadata", None, "int64", [n], "int64", n * 8),
        (pos(9), "tensor_offsets", C, "metadata", None, "int64", [n + 1], "int64", (n + 1) * 8),
    ]
    # the same tensor packed twice: one storage, the second row is the duplicate
    assert rows[3].storage == rows[2].storage and rows[3].duplicate_of == 2


# ---- objects that reach the hook whole ----------------------------------------------------------


def check_whole(
    rows: list[Row],
    container: str,
    fmt: str,
    shape: list[int],
    inner: list[tuple[str, str, str | None, list[int], str, int]],
    *,
    op: str = OP,
) -> None:
    cont, *bufs = rows
    assert (cont.index, cont.op, cont.saved_as, cont.slot) == (0, op, pos(0), pos(0))
    assert (cont.kind, cont.bytes, cont.container, cont.format, cont.shape, cont.dtype) == (
        "container",
        0,
        container,
        fmt,
        shape,
        "bfloat16",
    )
    assert cont.storage is None and cont.container_index is None and cont.storage_bytes == 0
    got = [(r.slot, r.kind, r.orientation, r.shape, r.dtype, r.bytes) for r in bufs]
    assert got == inner
    assert all(
        r.container == container and r.container_index == 0 and r.op == op and r.saved_as == pos(0) for r in bufs
    )
    assert all(r.format == (r.dtype if r.kind == "metadata" else fmt) for r in bufs)


def totals_of(rows: list[Row]) -> tuple[int, int, int]:
    from memaudit.report import compute_totals

    t = compute_totals(rows)
    return t.rows, t.logical_bytes, t.physical_bytes


@pytest.mark.parametrize("direct", [True, False], ids=["save_for_backward", "prepare_for_saving"])
def test_mxfp8_tensor_saved_whole(direct: bool) -> None:
    M, K = 256, 128
    t = MXFP8Quantizer(E4M3).make_empty((M, K), dtype=torch.bfloat16, device="cpu")
    assert type(t) is MXFP8Tensor
    if direct:

        class Direct(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
                ctx.save_for_backward(q)
                return x * 2

            @staticmethod
            def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
                return g * 2, None

        x = torch.randn(2, requires_grad=True)
        with capture() as cap:
            y = Direct.apply(x, t)
        rows = cap.report(outputs=y).rows
        op = "DirectBackward"
    else:
        rows, _, _ = save_like_fuser([t])
        op = OP
    rs, cs = [M, K // 32], [M // 32, K]  # 128/4 aligned already
    check_whole(
        rows,
        "MXFP8Tensor",
        "mxfp8",
        [M, K],
        [  # _INNER_TENSORS order
            ("_rowwise_data", "data", "rowwise", [M, K], "uint8", M * K),
            ("_rowwise_scale_inv", "scale_inv", "rowwise", rs, "uint8", math.prod(rs)),
            ("_columnwise_data", "data", "columnwise", [M, K], "uint8", M * K),
            ("_columnwise_scale_inv", "scale_inv", "columnwise", cs, "uint8", math.prod(cs)),
        ],
        op=op,
    )
    total = 2 * M * K + math.prod(rs) + math.prod(cs)
    assert totals_of(rows) == (5, total, total)  # the wrapper row counts 0


def test_float8_tensor_saved_whole() -> None:
    M, K = 64, 32
    t = Float8Tensor(
        (M, K), torch.bfloat16, data=torch.empty(M, K, dtype=U8), fp8_scale_inv=torch.empty(1), fp8_dtype=E4M3,
        data_transpose=torch.empty(K, M, dtype=U8), device="cpu",
    )  # fmt: skip
    rows, _, _ = save_like_fuser([t])
    check_whole(
        rows,
        "Float8Tensor",
        "fp8",
        [M, K],
        [
            ("_data", "data", "rowwise", [M, K], "uint8", M * K),
            ("_transpose", "data", "columnwise", [K, M], "uint8", K * M),
            ("_scale_inv", "scale_inv", "both", [1], "float32", F32),
        ],
    )
    assert totals_of(rows) == (4, 2 * M * K + F32, 2 * M * K + F32)


def test_nvfp4_tensor_saved_whole() -> None:
    M = K = 128
    b = nvfp4_buffers(M, K)
    t = NVFP4Tensor(
        (M, K),
        torch.bfloat16,
        fp4_dtype=tex.DType.kFloat4E2M1,
        quantizer=None,
        with_gemm_swizzled_scales=False,
        device="cpu",
        **b,
    )
    rows, _, _ = save_like_fuser([t])
    D, S = [M, K // 2], [roundup(M, 128), roundup(K // 16, 4)]
    check_whole(
        rows,
        "NVFP4Tensor",
        "nvfp4",
        [M, K],
        [
            ("_rowwise_data", "data", "rowwise", D, "uint8", M * K // 2),
            ("_rowwise_scale_inv", "scale_inv", "rowwise", S, "uint8", math.prod(S)),
            ("_columnwise_data", "data", "columnwise", D, "uint8", M * K // 2),
            ("_columnwise_scale_inv", "scale_inv", "columnwise", S, "uint8", math.prod(S)),
            ("_amax_rowwise", "amax", "rowwise", [1], "float32", F32),
            ("_amax_columnwise", "amax", "columnwise", [1], "float32", F32),
        ],
    )


def test_grouped_tensor_saved_whole(cuda_device_is_cpu: None) -> None:
    # internal=False: a GroupedTensor (a torch.Tensor); its member MXFP8Tensors take the current device
    q = MXFP8Quantizer(E4M3)
    obj = GroupedTensor.make_grouped_tensor_with_shapes(G, SHAPES, quantizer=q, device="cpu", dtype=torch.bfloat16)
    assert type(obj) is GroupedTensor
    row_scale = sum(roundup(m, 128) * roundup(k // 32, 4) for m, k in SHAPES)
    col_scale = sum(roundup(m // 32, 4) * roundup(k, 128) for m, k in SHAPES)
    rows, _, _ = save_like_fuser([obj])
    check_whole(
        rows,
        "GroupedTensor",
        "mxfp8",
        [T, K],  # uneven members: the 2-D logical shape
        [
            ("rowwise_data", "data", "rowwise", [T * K], "uint8", T * K),
            ("columnwise_data", "data", "columnwise", [T * K], "uint8", T * K),
            ("scale_inv", "scale_inv", "rowwise", [row_scale], "uint8", row_scale),
            ("columnwise_scale_inv", "scale_inv", "columnwise", [col_scale], "uint8", col_scale),
            ("first_dims", "metadata", None, [G], "int64", G * 8),
            ("tensor_offsets", "metadata", None, [G + 1], "int64", (G + 1) * 8),
        ],
    )
    total = 2 * T * K + row_scale + col_scale + G * 8 + (G + 1) * 8
    assert totals_of(rows) == (7, total, total)


def test_grouped_nvfp4_tensor_saved_whole(cuda_device_is_cpu: None) -> None:
    q = nvfp4_quantizer(internal=False)
    obj = GroupedTensor.make_grouped_tensor_with_shapes(G, SHAPES, quantizer=q, device="cpu", dtype=torch.bfloat16)
    rows, _, _ = save_like_fuser([obj])
    cont, *bufs = rows
    assert (cont.kind, cont.container, cont.format, cont.bytes) == ("container", "GroupedTensor", "nvfp4", 0)
    assert [(r.slot, r.orientation, r.shape) for r in bufs if r.kind == "data"] == [
        ("rowwise_data", "rowwise", [T * K // 2]),
        ("columnwise_data", "columnwise", [T * K // 2]),
    ]
    assert [(r.slot, r.orientation) for r in bufs if r.kind == "amax"] == [
        ("amax", "rowwise"),
        ("columnwise_amax", "columnwise"),
    ]
    assert all(r.container_index == 0 for r in bufs)


# ---- unknown storage classes, restoring TE ------------------------------------------------------


class NovelTensorStorage(QuantizedTensorStorage):
    """A storage class memaudit has never heard of, with a novel buffer attribute."""

    def __init__(self, payload: torch.Tensor, extra: torch.Tensor) -> None:
        self._novel_payload = payload
        self._rowwise_data = extra  # a known name on an unknown class still classifies

    def prepare_for_saving(self) -> tuple[list[torch.Tensor | None], NovelTensorStorage]:
        tensors = [self._novel_payload, self._rowwise_data]
        self._novel_payload = None
        self._rowwise_data = None
        return tensors, self

    def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._novel_payload, self._rowwise_data = tensors[0], tensors[1]
        return tensors[2:]


def test_unknown_storage_class_is_tensor_rows_plus_warning() -> None:
    payload = torch.empty(3, 5, dtype=torch.float16)
    extra = torch.empty(7, dtype=U8)
    obj = NovelTensorStorage(payload, extra)
    rows, warnings, y = save_like_fuser([obj])
    C = "NovelTensorStorage"
    assert [summary(r)[:8] for r in rows] == [
        (pos(0), "_novel_payload", C, "tensor", None, "fp16", [3, 5], "float16"),
        (pos(1), "_rowwise_data", C, "data", "rowwise", "NovelTensorStorage", [7], "uint8"),
    ]
    assert [r.bytes for r in rows] == [3 * 5 * 2, 7]
    assert len(warnings) == 1 and C in warnings[0] and "_novel_payload" in warnings[0]
    y.sum().backward()
    assert obj._novel_payload is payload


def all_storage_methods() -> dict[type, Any]:
    return {cls: vars(cls)["prepare_for_saving"] for cls in tec.storage_classes()}


def test_prepare_for_saving_is_wrapped_once_and_inert_outside_capture() -> None:
    """Provenance wrappers are installed once per process and do nothing outside a capture."""
    with capture():
        first = all_storage_methods()
    names = {cls.__name__ for cls in first}
    assert {
        "Float8TensorStorage",
        "MXFP8TensorStorage",
        "NVFP4TensorStorage",
        "Float8BlockwiseQTensorStorage",
        "GroupedTensorStorage",
        "NovelTensorStorage",
    } <= names
    assert all(hasattr(m, "__wrapped__") for m in first.values()), "every storage class is wrapped"
    with capture():
        assert all_storage_methods() == first  # a second capture does not wrap again
    with pytest.raises(ValueError, match="inside"):
        with capture():
            raise ValueError("inside")
    assert all_storage_methods() == first
    for cls, method in first.items():
        assert tec.original_prepare_for_saving(cls) is method.__wrapped__
    # Outside a capture the wrapper only calls TE's method: nothing is noted.
    scale = torch.ones(1)
    obj = Float8TensorStorage(
        data=torch.zeros(4, 4, dtype=torch.uint8),
        fp8_scale_inv=scale,
        fp8_dtype=E4M3,
        fake_dtype=torch.bfloat16,
        data_transpose=None,
    )
    hooks.state().provenance.clear()
    tensors, _ = obj.prepare_for_saving()
    assert any(t is not None for t in tensors)
    assert hooks.state().provenance == {} and not hooks.recording()


def test_te_plugin_is_active_by_default_when_te_is_imported() -> None:
    with capture() as cap:
        assert [type(p).__name__ for p in cap.plugins] == ["TEClassifier"]


# ---- the fuser's roles reach decomposed buffers -------------------------------------------------


def test_fuser_roles_name_decomposed_fp8_inputs() -> None:
    """FP8 inputs reach the hook as raw ``_transpose``/``_scale_inv`` (H200 unfused path, §2.4);
    the fuser's ``_saved_tensors_range`` must still name them ``fc1.input`` / ``fc2.input`` per group."""
    groups, hidden, ffn = 2, 32, 48
    splits = [16, 48]
    ops = [
        te.ops.GroupedLinear(groups, hidden, 2 * ffn, bias=False, device="cpu", dtype=torch.bfloat16),
        te.ops.ScaledSwiGLU(),
        te.ops.GroupedLinear(groups, ffn, hidden, bias=False, device="cpu", dtype=torch.bfloat16),
    ]

    def fp8_t(m: int, k: int) -> Float8TensorStorage:
        return Float8TensorStorage(
            data=None,
            fp8_scale_inv=torch.empty(1),
            fp8_dtype=E4M3,
            fake_dtype=torch.bfloat16,
            data_transpose=torch.empty(k, m, dtype=U8),
        )

    split_sizes = torch.tensor(splits)
    h = torch.empty(sum(splits), 2 * ffn, dtype=torch.bfloat16)
    probs = torch.empty(sum(splits))
    ctxs = [OperationContext() for _ in ops]
    ctxs[0].save_for_backward(
        split_sizes, None, None, None, None, *[fp8_t(m, hidden) for m in splits], *ops[0].parameters()
    )
    ctxs[1].save_for_backward(h, probs)
    ctxs[2].save_for_backward(
        split_sizes, None, None, None, None, *[fp8_t(m, ffn) for m in splits], *ops[2].parameters()
    )
    to_save: list[Any] = []
    for ctx in ctxs:  # fuser.py:218-224
        start = len(to_save)
        to_save.extend(ctx.to_save)
        ctx.to_save = None
        ctx._saved_tensors_range = (start, len(to_save))
    rows, _, _ = save_like_fuser(to_save, basic_ops=ops, basic_op_ctxs=ctxs)
    got = [(r.slot, r.operand, r.group) for r in rows]
    fc1 = [
        ("_transpose", "fc1.input", g) if j == 0 else ("_scale_inv", "fc1.input", g)
        for g in range(groups)
        for j in range(2)
    ]
    fc2 = [
        ("_transpose", "fc2.input", g) if j == 0 else ("_scale_inv", "fc2.input", g)
        for g in range(groups)
        for j in range(2)
    ]
    assert got == [
        (pos(0), "fc1.split_sizes", None),
        *fc1,
        (pos(11), "fc1.weight[0]", 0),
        (pos(12), "fc1.weight[1]", 1),
        (pos(13), "activation.activation_in", None),
        (pos(14), "activation.scales", None),
        (pos(15), "fc2.split_sizes", None),
        *fc2,
        (pos(26), "fc2.weight[0]", 0),
        (pos(27), "fc2.weight[1]", 1),
    ]
    assert [r.shape for r in rows if r.slot == "_transpose"] == [[hidden, m] for m in splits] + [
        [ffn, m] for m in splits
    ]
