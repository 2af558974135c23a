"""TE classification paths the mutation run (bench/mutation/mutate.py) found unguarded, against REAL
TransformerEngine 2.20.2 storage objects on CPU (as tests/te/test_te_classify.py): a shared FP8 scale in a
GroupedTensor saved whole, unknown declared buffers warned on every call, one tensor returned by two
objects, a wrapper that forwards what TE's method takes, TE's CPU offload hook, and the fuser's roles
reaching a container's buffers through the classifier's ``annotate``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

try:  # torch first: TE's import needs it loaded
    import transformer_engine.pytorch  # noqa: F401
    import transformer_engine_torch as tex
except Exception as exc:  # noqa: BLE001 - not installed, or broken
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from test_te_classify import offsets_of, save_like_fuser, summary  # noqa: E402
from transformer_engine.pytorch.quantized_tensor import QuantizedTensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer  # noqa: E402
from transformer_engine.pytorch.tensor.grouped_tensor import GroupedTensor  # noqa: E402
from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage  # noqa: E402

from memaudit.capture import capture  # noqa: E402
from memaudit.report import Row  # noqa: E402
from memaudit.te.capture import classify as tec  # noqa: E402
from memaudit.te.capture import roles as te_roles  # noqa: E402

pytestmark = pytest.mark.te

U8 = torch.uint8
E4M3 = tex.DType.kFloat8E4M3


def test_a_grouped_tensor_saved_whole_with_one_fp8_scale_for_both_orientations() -> None:
    q = Float8CurrentScalingQuantizer(E4M3, torch.device("cpu"))
    q.internal = False
    shapes = [(32, 64), (96, 64)]
    n, t, k = len(shapes), 128, 64
    shared = torch.empty(n)
    obj = GroupedTensor(
        (t, k), torch.bfloat16, num_tensors=n, shapes=shapes, quantizer=q,
        data=torch.empty(t * k, dtype=U8), columnwise_data=torch.empty(t * k, dtype=U8),
        scale_inv=shared, columnwise_scale_inv=shared, amax=torch.empty(n), scale=torch.empty(n),
        first_dims=torch.tensor([32, 96]), tensor_offsets=torch.tensor(offsets_of(shapes)),
    )  # fmt: skip
    rows, warnings, _ = save_like_fuser([obj])
    got = {r.slot: (r.kind, r.orientation, r.container_index, r.duplicate_of) for r in rows[1:]}
    assert rows[0].kind == "container" and warnings == []
    assert got["scale_inv"] == ("scale_inv", "both", 0, None)  # one tensor serves both orientations (§5.2)
    assert got["columnwise_scale_inv"] == ("scale_inv", "columnwise", 0, 3)
    assert got["rowwise_data"][1] == "rowwise" and got["columnwise_data"][1] == "columnwise"


class DeclaredNovelStorage(QuantizedTensorStorage):
    """A storage class that declares its buffers, one of them a name memaudit's slot table lacks."""

    def __init__(self, payload: torch.Tensor, extra: torch.Tensor) -> None:
        self._novel_payload = payload
        self._rowwise_data = extra

    def prepare_for_saving(self) -> tuple[list[torch.Tensor | None], DeclaredNovelStorage]:
        tensors = [self._novel_payload, self._rowwise_data]
        self._novel_payload = self._rowwise_data = None
        return tensors, self

    def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._novel_payload, self._rowwise_data = tensors[0], tensors[1]
        return tensors[2:]


DeclaredNovelStorage._INNER_TENSORS = (
    ("_novel_payload", None),
    ("_rowwise_data", None),
)  # after the class: TE's base resets it


def test_an_unknown_declared_buffer_is_warned_on_every_call() -> None:
    """The first call names by identity and finds the class positional; later calls take the queue:
    each capture still says which buffer it could not classify."""
    tec.forget_plans()
    reports = [
        save_like_fuser([DeclaredNovelStorage(torch.empty(3, dtype=torch.float16), torch.empty(5, dtype=U8))])
        for _ in range(3)
    ]
    assert tec.named_by_position(DeclaredNovelStorage) is True
    for rows, warnings, _ in reports:
        assert [(r.slot, r.kind) for r in rows] == [("_novel_payload", "tensor"), ("_rowwise_data", "data")]
        assert warnings == ["unknown TE buffer DeclaredNovelStorage._novel_payload: classified as kind 'tensor'"]


def test_one_tensor_returned_by_two_objects_is_named_for_each() -> None:
    """Two storage objects of different classes hold one tensor; each save of it gets its own name
    (the provenance queue keeps both, in order), on the first call (by identity) and afterwards."""
    tec.forget_plans()
    for _ in range(2):  # the second round runs the positional queue for both classes
        shared = torch.empty(16, 8, dtype=U8)
        fp8 = Float8TensorStorage(data=shared, fp8_scale_inv=torch.empty(1), fp8_dtype=E4M3, fake_dtype=torch.bfloat16)
        mx = MXFP8TensorStorage(
            rowwise_data=shared,
            rowwise_scale_inv=torch.empty(16, 4, dtype=U8),
            columnwise_data=None,
            columnwise_scale_inv=None,
            fp8_dtype=E4M3,
            quantizer=None,
            with_gemm_swizzled_scales=False,
        )
        rows, _, _ = save_like_fuser([fp8, mx])
        named = [(r.container, r.slot) for r in rows if r.shape == [16, 8]]
        assert named == [("Float8TensorStorage", "_data"), ("MXFP8TensorStorage", "_rowwise_data")]
    assert tec.named_by_position(Float8TensorStorage) and tec.named_by_position(MXFP8TensorStorage)


class KeywordStorage(QuantizedTensorStorage):
    """A storage class whose ``prepare_for_saving`` takes options: the wrapper must forward them."""

    def __init__(self, data: torch.Tensor) -> None:
        self._rowwise_data = data

    def prepare_for_saving(self, *, keep: bool = False) -> tuple[list[torch.Tensor | None], KeywordStorage]:
        tensors = [self._rowwise_data]
        if not keep:
            self._rowwise_data = None
        return tensors, self

    def restore_from_saved(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        self._rowwise_data = tensors[0]
        return tensors[1:]


KeywordStorage._INNER_TENSORS = (("_rowwise_data", None),)


def test_the_wrapper_forwards_what_tes_method_takes() -> None:
    assert tec._takes_only_self(Float8TensorStorage.prepare_for_saving.__wrapped__)  # type: ignore[attr-defined]
    assert not tec._takes_only_self(KeywordStorage.prepare_for_saving)
    data = torch.empty(4, dtype=U8)
    with capture():
        obj = KeywordStorage(data)
        tensors, _ = obj.prepare_for_saving(keep=True)
        assert tensors == [data] and obj._rowwise_data is data
        tensors, _ = obj.prepare_for_saving()
        assert obj._rowwise_data is None


class _OffloadSynchronizer:
    """Stands in for TE's ``OffloadSynchronizer`` (cpu_offload.py): its ``push_tensor`` hands back an
    int index for a tensor it moves to the host, the tensor itself for one it keeps."""

    def __init__(self) -> None:
        self.moved: list[torch.Tensor] = []

    def push_tensor(self, t: torch.Tensor) -> Any:
        if t.numel() > 4:
            self.moved.append(t.clone())
            return len(self.moved) - 1
        return t

    def pop_tensor(self, handle: Any) -> torch.Tensor:
        return self.moved[handle] if isinstance(handle, int) else handle


_OffloadSynchronizer.__module__ = "transformer_engine.pytorch.cpu_offload"


def test_tes_cpu_offload_rows_reside_on_the_host() -> None:
    sync = _OffloadSynchronizer()
    x = torch.randn(8, requires_grad=True)
    s = torch.randn(2, requires_grad=True)
    with capture() as cap, torch.autograd.graph.saved_tensors_hooks(sync.push_tensor, sync.pop_tensor):
        y = x.sin().sum() + s.cos().sum()
    case = cap.report(outputs=y)
    where = {tuple(r.shape): r.resides for r in case.rows}
    assert where == {(8,): "host", (2,): "device"}
    assert case.complete and case.totals.host_bytes == 32


class _UsersOwnOffload(_OffloadSynchronizer):
    """The same pair bound to an object of another library: not TE's offload, whatever it returns."""


_UsersOwnOffload.__module__ = "my_training.offload"


def test_a_pair_bound_to_another_librarys_object_is_not_tes_offload() -> None:
    """Only a bound method of an object from TE's cpu_offload module is TE's offload: the int another
    library's pair returns says nothing about where the tensor went."""
    assert tec._offload_hook_kind(_OffloadSynchronizer().push_tensor) == "te-offload"
    assert tec._offload_hook_kind(_UsersOwnOffload().push_tensor) is None
    assert tec._offload_hook_kind(lambda t: t) is None
    sync = _UsersOwnOffload()
    x = torch.randn(8, requires_grad=True)
    with capture() as cap, torch.autograd.graph.saved_tensors_hooks(sync.push_tensor, sync.pop_tensor):
        y = x.sin().sum()
    case = cap.report(outputs=y)
    assert [(r.shape, r.resides) for r in case.rows] == [([8], "unknown")]
    assert not case.complete and case.totals.host_bytes == 0


class GroupedLinear(SimpleNamespace):
    pass


class ScaledSwiGLU(SimpleNamespace):
    pass


class _Fuser(SimpleNamespace):
    def _sequence_nr(self) -> int:
        return 7


def _row(i: int, kind: str = "data", **kw: Any) -> Row:
    return Row(
        index=i,
        kind=kind,
        format="mxfp8",
        shape=[1],
        dtype="uint8",
        bytes=0 if kind == "container" else 1,
        op=kw.pop("op", "_Fuser"),
        saved_as=kw.pop("saved_as", f"saved_tensors[{i}]"),
        **kw,
    )


def test_annotate_names_a_containers_buffers_with_its_role() -> None:
    """A GroupedTensor saved whole as fc1.input of an unfused grouped-tensor path: the container row and
    every buffer row inside it take the role; rows of other nodes are left alone."""
    fc1 = GroupedLinear(num_groups=2, single_grouped_weight=True, _scale_bias=False)
    fc2 = GroupedLinear(num_groups=2, single_grouped_weight=True, _scale_bias=False)
    ctxs = [
        SimpleNamespace(_saved_tensors_range=(0, 7), use_grouped_tensor_path=True),
        SimpleNamespace(_saved_tensors_range=(7, 9)),
        SimpleNamespace(_saved_tensors_range=(9, 9)),
    ]
    node = _Fuser(basic_ops=[fc1, ScaledSwiGLU(), fc2], basic_op_ctxs=ctxs, tensor_objects=[None] * 9)
    rows = [_row(i) for i in range(5)]
    rows.append(_row(5, "container", saved_as="saved_tensors[5]"))
    rows += [_row(6 + j, container_index=5, saved_as="saved_tensors[5]") for j in range(2)]
    rows.append(_row(8, saved_as="saved_tensors[6]"))
    rows.append(_row(9, op="OtherBackward0", saved_as="saved_tensors[5]"))
    # the node holds the container row (and the others), not the buffers: they are reached through it
    cap = SimpleNamespace(
        walk_nodes=[node],
        walk_row_nodes={i: 7 for i in (0, 1, 2, 3, 4, 5, 8)},
        row_storages=dict,  # no storages: no cached workspace to mark
        modules_called=list,
    )
    out = tec.TEClassifier().annotate(rows, cap)  # type: ignore[arg-type]
    assert [r.operand for r in out[5:8]] == ["fc1.input"] * 3  # the container and both of its buffers
    assert out[8].operand == "fc1.weight" and out[9].operand is None
    # without the children map, the container's buffers are found by a scan; a plain row names only itself
    again = [_row(i) for i in range(5)] + [_row(5, "container", saved_as="saved_tensors[5]")]
    again += [_row(6 + j, container_index=5, saved_as="saved_tensors[5]") for j in range(2)]
    again.append(_row(8, container_index=None, saved_as="saved_tensors[6]"))
    tec.label_fuser_rows(node, again, mine=[5, 8])
    assert [r.operand for r in again[5:8]] == ["fc1.input"] * 3 and again[8].operand == "fc1.weight"
    assert all(r.operand is None for r in again[:5])  # not held by the node here: left alone


def test_unfused_roles_with_a_scale_bias_and_weights_per_group() -> None:
    fc1 = GroupedLinear(num_groups=2, single_grouped_weight=False, _scale_bias=True)
    ctx = SimpleNamespace(use_grouped_tensor_path=False)
    roles = [te_roles.unfused_role(fc1, ctx, "fc1", k) for k in range(10)]
    assert roles[:5] == [
        ("fc1.split_sizes", None),
        ("fc1.base_split_offsets", None),
        ("fc1.split_points", None),
        ("fc1.input_offsets", None),
        ("fc1.output_offsets", None),
    ]
    assert roles[5] == ("fc1.scales", None)
    assert roles[6:8] == [("fc1.input", 0), ("fc1.input", 1)]
    assert roles[8:10] == [("fc1.weight[0]", 0), ("fc1.weight[1]", 1)]
    grouped = SimpleNamespace(use_grouped_tensor_path=True)
    assert [te_roles.unfused_role(fc1, grouped, "fc1", k) for k in (6, 7, 8)] == [
        ("fc1.input", None),
        ("fc1.weight[0]", 0),
        ("fc1.weight[1]", 1),
    ]
    single = GroupedLinear(num_groups=2, single_grouped_weight=True, _scale_bias=False)
    assert [te_roles.unfused_role(single, grouped, "fc2", k) for k in (5, 6)] == [
        ("fc2.input", None),
        ("fc2.weight", None),
    ]
    assert summary is not None


def test_an_unknown_buffer_of_a_tensor_saved_whole_is_warned_in_the_capture() -> None:
    """A QuantizedTensor subclass with a buffer memaudit does not know, saved whole: its row is kind
    'tensor' and the case says so (the warning reaches the capture that is running)."""
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer, MXFP8Tensor

    class NovelMXFP8Tensor(MXFP8Tensor):
        pass

    NovelMXFP8Tensor._INNER_TENSORS = (*MXFP8Tensor._INNER_TENSORS, ("_novel", None))
    t = MXFP8Quantizer(E4M3).make_empty((64, 32), dtype=torch.bfloat16, device="cpu")
    t.__class__ = NovelMXFP8Tensor
    t._novel = torch.empty(3)

    class SaveWhole(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, obj: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(obj)
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            return g, None

    x = torch.randn(2, requires_grad=True)
    with capture() as cap:
        y = SaveWhole.apply(x, t)
    case = cap.report(outputs=y)
    assert [(r.slot, r.kind) for r in case.rows][-1] == ("_novel", "tensor")
    assert case.warnings == ["unknown TE buffer NovelMXFP8Tensor._novel: classified as kind 'tensor'"]


class _LinearNode(SimpleNamespace):
    def _sequence_nr(self) -> int:
        return 11


_Linear = type("_Linear", (), {"__module__": "transformer_engine.pytorch.module.linear"})


class _Unreadable:
    """An object TE's ``prepare_for_saving`` met that memaudit cannot count the buffers of: it declares
    none, and this thread never saw it decomposed."""


def test_an_entry_whose_buffers_memaudit_cannot_count_is_taken_as_one_saved_tensor() -> None:
    """te.Linear's Function saves (input, weight, weight_param, bias): with its first entry an object
    memaudit knows nothing of, the rows after it keep their own roles."""
    node = _LinearNode(_forward_cls=_Linear, tensor_objects=[_Unreadable(), None, None, None])
    rows = [_row(i, "tensor", op="_LinearBackward") for i in range(4)]
    cap = SimpleNamespace(
        walk_nodes=[node],
        walk_row_nodes={i: 11 for i in range(4)},
        row_storages=dict,
        modules_called=list,
    )
    out = tec.TEClassifier().annotate(rows, cap)  # type: ignore[arg-type]
    assert [r.operand for r in out] == ["input", "weight", "weight_param", "bias"]
