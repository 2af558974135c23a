"""The fast provenance path for TE storages: buffers named by position, checked against TE.

memaudit's ``prepare_for_saving`` wrapper names the i-th tensor TE returns after the class's i-th
declared buffer attribute, once the first call of that class in the process showed (by identity
against the attributes TE empties) that TE returns them in that order. These tests hold that
assumption against REAL TransformerEngine 2.20.2 storage objects (te-internals §5.4), and check
that a class breaking it is still named right, by identity.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

try:  # torch first: TE's import needs it loaded (te/README.md)
    import transformer_engine.pytorch  # noqa: F401
    import transformer_engine_torch as tex
except Exception as exc:  # noqa: BLE001 - not installed, or broken
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from transformer_engine.pytorch.quantized_tensor import QuantizedTensorStorage, prepare_for_saving  # noqa: E402
from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer  # noqa: E402
from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer  # noqa: E402
from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer  # noqa: E402
from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.nvfp4_tensor_storage import NVFP4TensorStorage  # noqa: E402

from memaudit.capture import capture  # noqa: E402
from memaudit.te.capture import classify as tec  # noqa: E402

pytestmark = pytest.mark.te

U8 = torch.uint8
E4M3 = tex.DType.kFloat8E4M3


def float8() -> Any:
    return Float8TensorStorage(
        data=torch.empty(8, 16, dtype=U8), fp8_scale_inv=torch.empty(1), fp8_dtype=E4M3,
        fake_dtype=torch.bfloat16, data_transpose=torch.empty(16, 8, dtype=U8),
    )  # fmt: skip


def mxfp8() -> Any:
    q = MXFP8Quantizer(E4M3)
    q.internal = True
    return q.make_empty((128, 64), dtype=torch.bfloat16, device="cpu")


def blockwise() -> Any:
    q = Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True, block_scaling_dim=1)
    q.internal = True
    return q.make_empty((128, 128), dtype=torch.bfloat16, device="cpu")


def nvfp4() -> Any:
    return NVFP4TensorStorage(
        torch.empty(128, 32, dtype=U8), torch.empty(128, 4, dtype=U8), torch.empty(64, 64, dtype=U8),
        torch.empty(128, 8, dtype=U8), torch.empty(1), torch.empty(1), tex.DType.kFloat4E2M1, None, False,
        fake_dtype=torch.bfloat16,
    )  # fmt: skip


def grouped() -> Any:
    q = Float8CurrentScalingQuantizer(E4M3, torch.device("cpu"))
    q.internal = True
    shapes = [(32, 64), (96, 64)]
    return GroupedTensorStorage(
        (128, 64), torch.bfloat16, num_tensors=2, shapes=shapes, quantizer=q,
        data=torch.empty(128 * 64, dtype=U8), columnwise_data=torch.empty(128 * 64, dtype=U8),
        scale_inv=torch.empty(2), columnwise_scale_inv=torch.empty(2), amax=torch.empty(2), scale=torch.empty(2),
        first_dims=torch.tensor([32, 96]), tensor_offsets=torch.tensor([0, 32 * 64, 128 * 64]),
    )  # fmt: skip


MAKERS = {"Float8TensorStorage": float8, "MXFP8TensorStorage": mxfp8, "Float8BlockwiseQTensorStorage": blockwise,
          "NVFP4TensorStorage": nvfp4, "GroupedTensorStorage": grouped}  # fmt: skip


@pytest.mark.parametrize("name", list(MAKERS))
def test_te_returns_buffers_in_declared_slot_order(name: str) -> None:
    """What the positional path relies on, read off TE's own classes: the i-th returned tensor is
    the one that sat under the i-th declared attribute (te-internals §5.4)."""
    obj = MAKERS[name]()
    assert type(obj).__name__ == name
    names = tec.slot_names(obj)
    assert names, f"{name} declares its buffer attributes"
    before = [getattr(obj, n) for n in names]
    assert sum(t is not None for t in before) >= 2, "the check needs buffers to tell apart"
    tensors, _ = tec.original_prepare_for_saving(type(obj))(obj)
    assert len(tensors) == len(names)
    assert all(t is b for t, b in zip(tensors, before, strict=True))


def saved_rows(objs: list[Any], *, freed: bool = False) -> tuple[list[tuple[Any, ...]], list[str]]:
    x = torch.randn(2, requires_grad=True)
    with capture() as cap:
        y = FuserLike.apply(x, objs, {})
    if freed:
        y.sum().backward()
        rep = cap.report(include_freed=True)
    else:
        rep = cap.report(outputs=y)
    return [(r.slot, r.kind, r.orientation, r.format, r.shape, r.bytes) for r in rep.rows], rep.warnings


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("freed", [False, True], ids=["live", "freed"])
def test_first_call_by_identity_then_by_position_name_the_same(name: str, freed: bool) -> None:
    tec.forget_plans()
    cls = type(MAKERS[name]())
    assert tec.named_by_position(cls) is None
    first = saved_rows([MAKERS[name]()], freed=freed)
    assert tec.named_by_position(cls) is True, "TE 2.20.2 returns every class's buffers in slot order"
    second = saved_rows([MAKERS[name]()], freed=freed)
    assert second == first
    assert all(slot is not None and not slot.startswith("saved_tensors") for slot, *_ in first[0])


class ShuffledStorage(QuantizedTensorStorage):
    """Declares ``_data, _transpose, _scale_inv`` but returns them in another order."""

    extra = False

    def __init__(self) -> None:
        self._data = torch.empty(4, 8, dtype=U8)
        self._transpose = torch.empty(8, 4, dtype=U8)
        self._scale_inv = torch.empty(1)

    def prepare_for_saving(self) -> tuple[list[torch.Tensor | None], ShuffledStorage]:
        tensors = [self._scale_inv, self._data, self._transpose] + ([torch.empty(2)] if self.extra else [])
        self._data = self._transpose = self._scale_inv = None
        return tensors, self

    def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._scale_inv, self._data, self._transpose = tensors[:3]
        return tensors[3 + self.extra :]


DECLARED = (("_data", "data"), ("_transpose", "data_transpose"), ("_scale_inv", "fp8_scale_inv"))
ShuffledStorage._INNER_TENSORS = DECLARED  # after the class: TE's __init_subclass__ reads type hints


def test_a_class_out_of_slot_order_stays_named_by_identity() -> None:
    tec.forget_plans()
    expect = [
        ("_scale_inv", "scale_inv", "both", "ShuffledStorage", [1], 4),
        ("_data", "data", "rowwise", "ShuffledStorage", [4, 8], 32),
        ("_transpose", "data", "columnwise", "ShuffledStorage", [8, 4], 32),
    ]
    for _ in range(3):
        rows, _ = saved_rows([ShuffledStorage()])
        assert rows == expect
        assert tec.named_by_position(ShuffledStorage) is False


class GrowingStorage(ShuffledStorage):
    """In slot order at first; later returns one buffer more than it declares."""

    def prepare_for_saving(self) -> tuple[list[torch.Tensor | None], GrowingStorage]:
        tensors = [self._data, self._transpose, self._scale_inv] + ([torch.empty(2)] if self.extra else [])
        self._data = self._transpose = self._scale_inv = None
        return tensors, self

    def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._data, self._transpose, self._scale_inv = tensors[:3]
        return tensors[3 + self.extra :]


GrowingStorage._INNER_TENSORS = DECLARED


def test_a_class_that_changes_its_layout_is_said_and_named_by_identity_again() -> None:
    tec.forget_plans()
    rows, warnings = saved_rows([GrowingStorage()])
    assert tec.named_by_position(GrowingStorage) is True and warnings == []
    odd = GrowingStorage()
    odd.extra = True
    rows, warnings = saved_rows([odd])
    assert any("returned 4 buffers, not the 3" in w for w in warnings)
    assert tec.named_by_position(GrowingStorage) is False
    rows, warnings = saved_rows([GrowingStorage()])  # by identity from now on: named again
    assert [r[0] for r in rows] == ["_data", "_transpose", "_scale_inv"] and warnings == []


def test_fuser_roles_hold_for_a_class_whose_save_order_is_longer_than_it_declares() -> None:
    """TE's custom-recipe ``NVFP4TensorRef`` declares no ``_INNER_TENSORS`` but returns four
    buffers (te-internals §5.4): the fuser's roles must count four entries per object whether
    the call was named by identity (first) or by position (after)."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.custom_recipes.reference_nvfp4 import NVFP4TensorRef
    from transformer_engine.pytorch.ops.op import OperationContext

    groups, hidden, ffn, splits = 2, 32, 48, [16, 48]
    ops = [
        te.ops.GroupedLinear(groups, hidden, 2 * ffn, bias=False, device="cpu", dtype=torch.bfloat16),
        te.ops.ScaledSwiGLU(),
        te.ops.GroupedLinear(groups, ffn, hidden, bias=False, device="cpu", dtype=torch.bfloat16),
    ]

    def ref(m: int, k: int) -> Any:
        return NVFP4TensorRef(
            data=torch.empty(m, k // 2, dtype=U8),
            scale=torch.empty(m, k // 16, dtype=U8),
            data_t=torch.empty(k, m // 2, dtype=U8),
            scale_t=torch.empty(k, m // 16, dtype=U8),
        )

    tec.forget_plans()
    for call in ("identity", "position"):
        ctxs = [OperationContext() for _ in ops]
        sizes = torch.tensor(splits)
        ctxs[0].save_for_backward(
            sizes, None, None, None, None, *[ref(m, hidden) for m in splits], *ops[0].parameters()
        )
        ctxs[1].save_for_backward(torch.empty(sum(splits), 2 * ffn, dtype=torch.bfloat16), torch.empty(sum(splits)))
        ctxs[2].save_for_backward(sizes, None, None, None, None, *[ref(m, ffn) for m in splits], *ops[2].parameters())
        to_save: list[Any] = []
        for ctx in ctxs:  # fuser.py:218-224
            start = len(to_save)
            to_save.extend(ctx.to_save)
            ctx.to_save = None
            ctx._saved_tensors_range = (start, len(to_save))
        x = torch.randn(2, requires_grad=True)
        with capture() as cap:
            y = FuserLike.apply(x, to_save, {"basic_ops": ops, "basic_op_ctxs": ctxs})
        rows = cap.report(outputs=y).rows
        inputs = [(r.slot, r.operand, r.group) for r in rows if r.container == "NVFP4TensorRef"]
        expect = [
            (slot, f"fc{n}.input", g)
            for n in (1, 2)
            for g in range(groups)
            for slot in ("data", "data_t", "scale", "scale_t")
        ]
        assert inputs == expect, call
        assert [r.operand for r in rows if r.container is None][-2:] == ["fc2.weight[0]", "fc2.weight[1]"], call
        assert tec.named_by_position(NVFP4TensorRef) is True


class FuserLike(torch.autograd.Function):
    """``OperationFuser``'s save (ops/fuser.py:214-230): prepare, save, keep the objects and ops."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, to_save: list[Any], extra: dict[str, Any]) -> torch.Tensor:
        tensors, objects = prepare_for_saving(*to_save)
        ctx.save_for_backward(*tensors)
        ctx.tensor_objects = objects
        for k, v in extra.items():
            setattr(ctx, k, v)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return g * 2, None, None


def test_a_storage_class_defined_after_a_capture_is_wrapped_by_the_next() -> None:
    saved_rows([float8()])  # a capture has run: the classes known then are wrapped

    class LateStorage(QuantizedTensorStorage):
        def __init__(self) -> None:
            self._rowwise_data = torch.empty(4, 8, dtype=U8)

        def prepare_for_saving(self) -> tuple[list[torch.Tensor | None], LateStorage]:
            tensors = [self._rowwise_data]
            self._rowwise_data = None
            return tensors, self

        def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
            self._rowwise_data = tensors[0]
            return tensors[1:]

    rows, _ = saved_rows([LateStorage()])
    assert rows == [("_rowwise_data", "data", "rowwise", "LateStorage", [4, 8], 32)]
