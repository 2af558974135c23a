"""Cross-check the estimator's shape rules against TransformerEngine's own classes, on CPU.

TE is the authority: if a test here fails, the estimator is wrong (or TE changed). What is
compared, on a sampled grid of shapes (T and K from 16 to 8192, non-multiples of 128 included,
G in {1, 4, 8, 64}, uneven splits with a 0-token group):

* ``get_scale_shape`` of the MXFP8, NVFP4 and block-FP8 quantizers;
* ``make_empty`` + ``prepare_for_saving`` (buffers, slot order, dtypes) and ``update_usage``
  (what the split-quantize path keeps), against :func:`single_buffers` and the estimate's rows;
* ``GroupedTensorStorage.make_grouped_tensor_with_shapes``, where TE's C++ comment says per-group
  and totals sizing agree (128-aligned splits), against :func:`grouped_buffers_cpp` and the
  grouped-tensor inputs of the unfused-grouped and fused paths' rows.

CPU shims (TE imports on CPU but some constructors touch CUDA; see the shared TE README):
``torch.cuda.current_device`` is patched to return ``"cpu"`` so ``NVFP4Quantizer()`` builds its
RHT sign vector on the CPU, and ``is_non_tn_fp8_gemm_supported`` is patched to pick SM90 or
SM100 behaviour for per-tensor FP8 (it reads the device capability otherwise).
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
try:
    te = pytest.importorskip("transformer_engine.pytorch", reason="TransformerEngine is not importable")
except pytest.skip.Exception:
    raise
except Exception as exc:  # noqa: BLE001 - TE raises RuntimeError when its CUDA libraries are missing
    pytest.skip(f"TransformerEngine import failed: {exc}", allow_module_level=True)

import transformer_engine_torch as tex  # noqa: E402
from transformer_engine.pytorch.tensor import float8_tensor as te_f8  # noqa: E402
from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer  # noqa: E402
from transformer_engine.pytorch.tensor.float8_tensor import (  # noqa: E402
    Float8CurrentScalingQuantizer,
    Float8Quantizer,
)
from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer  # noqa: E402
from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer  # noqa: E402
from transformer_engine.pytorch.tensor.storage import float8_tensor_storage as te_f8s  # noqa: E402
from transformer_engine.pytorch.tensor.storage import grouped_tensor_storage as te_gts  # noqa: E402
from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage  # noqa: E402
from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage  # noqa: E402

from memaudit.te.estimate import (  # noqa: E402
    ITEMSIZE,
    SINGLE_CONTAINER,
    SLOTS,
    estimate,
    grouped_buffers_cpp,
    make_spec,
    scale_shape,
    single_buffers,
)

pytestmark = pytest.mark.te

E4M3 = tex.DType.kFloat8E4M3
DIMS = [16, 32, 48, 64, 96, 128, 144, 160, 192, 256, 384, 640, 1000, 1024, 1536, 2048, 3000, 4096, 6144, 8192]


@pytest.fixture
def cpu_shims(monkeypatch: pytest.MonkeyPatch):
    """Let NVFP4Quantizer build on CPU; return a setter for the FP8 TN/non-TN arch switch."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")

    def set_arch(arch: str) -> None:
        non_tn = arch == "sm100"
        for mod in (te_f8, te_f8s, te_gts):
            monkeypatch.setattr(mod, "is_non_tn_fp8_gemm_supported", lambda: non_tn)

    set_arch("sm90")
    return set_arch


def _quantizer(recipe: str, *, rowwise: bool = True, columnwise: bool = True, block_dim: int = 1):
    if recipe == "mxfp8":
        q = MXFP8Quantizer(E4M3, rowwise=rowwise, columnwise=columnwise)
    elif recipe == "nvfp4":
        q = NVFP4Quantizer(rowwise=rowwise, columnwise=columnwise)
    elif recipe == "fp8-block":
        q = Float8BlockQuantizer(E4M3, rowwise=rowwise, columnwise=columnwise, block_scaling_dim=block_dim)
    elif recipe == "fp8-current":
        q = Float8CurrentScalingQuantizer(E4M3, device=torch.device("cpu"), rowwise=rowwise, columnwise=columnwise)
    elif recipe == "fp8-delayed":
        q = Float8Quantizer(torch.ones(1), torch.zeros(1), E4M3, rowwise=rowwise, columnwise=columnwise)
    else:
        raise AssertionError(recipe)
    q.internal = True
    return q


def _described(tensors: list) -> list[tuple[tuple[int, ...], str, int]]:
    return [(tuple(t.shape), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size()) for t in tensors]


# ---- get_scale_shape ---------------------------------------------------------------------------
@pytest.mark.parametrize("recipe,block_dim", [("mxfp8", 1), ("nvfp4", 1), ("fp8-block", 1), ("fp8-block", 2)])
def test_scale_shape_matches_te(cpu_shims, recipe: str, block_dim: int) -> None:
    q = _quantizer(recipe, block_dim=block_dim)
    checked = 0
    for m in DIMS:
        for k in DIMS:
            for col in (False, True):
                assert tuple(q.get_scale_shape((m, k), col)) == scale_shape(recipe, m, k, col, block_dim=block_dim), (
                    recipe,
                    block_dim,
                    m,
                    k,
                    col,
                )
                checked += 1
    assert checked == 2 * len(DIMS) ** 2


@pytest.mark.parametrize("block_dim", [1, 2])
def test_block_fp8_scale_shapes_match_te_where_a_dim_is_not_a_multiple_of_128(cpu_shims, block_dim: int) -> None:
    """Block FP8 takes any shape: dims that need one more 128-block than 129-blocks (257, 386) and
    ones just past a multiple of 128 (129, 16513), in both places of the shape."""
    q = _quantizer("fp8-block", block_dim=block_dim)
    dims = [129, 257, 386, 16512, 16513]
    for m in dims:
        for k in dims:
            for col in (False, True):
                assert tuple(q.get_scale_shape((m, k), col)) == scale_shape(
                    "fp8-block", m, k, col, block_dim=block_dim
                ), (block_dim, m, k, col)


# ---- make_empty / prepare_for_saving / update_usage ----------------------------------------------
def _sample_shapes(mult: int, n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    dims = [d for d in DIMS if d % mult == 0]
    shapes = [(0, rng.choice(dims)), (dims[0], dims[-1]), (dims[-1], dims[0])]
    shapes += [(rng.choice(dims), rng.choice(dims)) for _ in range(n)]
    return shapes


@pytest.mark.parametrize(
    "recipe,block_dim,mult",
    [("mxfp8", 1, 32), ("nvfp4", 1, 16), ("fp8-block", 1, 16), ("fp8-block", 2, 16)],
)
@pytest.mark.parametrize("usage", [(True, True), (True, False), (False, True)])
def test_make_empty_matches_single_buffers(
    cpu_shims, recipe: str, block_dim: int, mult: int, usage: tuple[bool, bool]
) -> None:
    rowwise, columnwise = usage
    for m, k in _sample_shapes(mult, 12, seed=hash((recipe, block_dim, usage)) & 0xFFFF):
        x = _quantizer(recipe, rowwise=rowwise, columnwise=columnwise, block_dim=block_dim).make_empty(
            (m, k), dtype=torch.bfloat16, device="cpu"
        )
        assert type(x).__name__ == SINGLE_CONTAINER[recipe]
        saved, _ = x.prepare_for_saving()
        order = SLOTS[type(x).__name__]
        got = [(slot, t) for slot, t in zip(order, saved, strict=True) if t is not None]
        want = single_buffers(recipe, m, k, rowwise=rowwise, columnwise=columnwise, block_dim=block_dim)
        assert [s for s, _ in got] == [s for s, _, _ in want], (recipe, m, k, usage)
        assert _described([t for _, t in got]) == [
            (shape, dtype, _numel(shape) * ITEMSIZE[dtype]) for _, shape, dtype in want
        ], (recipe, m, k, usage)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("arch", ["sm90", "sm100"])
def test_fp8_per_tensor_specs_match_te(cpu_shims, arch: str) -> None:
    cpu_shims(arch)
    for m, k in _sample_shapes(16, 12, seed=7):
        for rowwise, columnwise in ((True, True), (True, False), (False, True)):
            specs = _quantizer("fp8-current", rowwise=rowwise, columnwise=columnwise).inner_tensor_specs((m, k))
            got = [(slot, tuple(shape), str(dtype).removeprefix("torch.")) for slot, (shape, dtype) in specs.items()]
            assert got == single_buffers("fp8-current", m, k, rowwise=rowwise, columnwise=columnwise, arch=arch)


def _fp8_storage(m: int, k: int, arch: str) -> Float8TensorStorage:
    """A Float8TensorStorage with the buffers the C++ quantizer allocates for both usages."""
    bufs = {
        slot: torch.empty(shape, dtype=getattr(torch, dtype))
        for slot, shape, dtype in single_buffers("fp8-current", m, k, arch=arch)
    }
    return Float8TensorStorage(
        data=bufs.get("_data"),
        fp8_scale_inv=bufs["_scale_inv"],
        fp8_dtype=E4M3,
        data_transpose=bufs.get("_transpose"),
        fake_dtype=torch.bfloat16,
    )


SPLITS = {1: [1024], 4: [256, 0, 512, 256], 8: [128, 0, 256, 128, 384, 0, 64, 64]}


SPLIT_CASES = [(r, a) for r in ("fp8-current", "fp8-delayed", "fp8-block") for a in ("sm90", "sm100")]
SPLIT_CASES += [("mxfp8", "sm100"), ("nvfp4", "sm100")]  # MXFP8/NVFP4 need compute capability 10.x


@pytest.mark.parametrize("recipe,arch", SPLIT_CASES)
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_split_path_rows_match_te_update_usage(cpu_shims, recipe: str, arch: str, groups: int) -> None:
    """Split-quantize rows = TE storages after ``update_usage(rowwise=False, columnwise=True)``."""
    cpu_shims(arch)
    splits = [s * 2 for s in SPLITS[groups]] if recipe == "nvfp4" else SPLITS[groups]  # NVFP4: multiples of 128
    tokens, hidden, ffn = sum(splits), 256, 160
    case = estimate(make_spec(recipe, tokens, hidden, ffn, groups, splits), path="unfused-split", arch=arch)
    for op, k, n in (("fc1", hidden, 2 * ffn), ("fc2", ffn, hidden)):
        for g, m in enumerate(splits):
            for operand, shape, block_dim in ((f"{op}.input", (m, k), 1), (f"{op}.weight[{g}]", (n, k), 2)):
                if recipe in ("fp8-current", "fp8-delayed"):
                    x = _fp8_storage(*shape, arch)
                else:
                    x = _quantizer(recipe, block_dim=block_dim).make_empty(shape, dtype=torch.bfloat16, device="cpu")
                x.update_usage(rowwise_usage=False, columnwise_usage=True)
                saved, _ = x.prepare_for_saving()
                order = SLOTS[type(x).__name__]
                got = [(slot, *_described([t])[0]) for slot, t in zip(order, saved, strict=True) if t is not None]
                rows = [r for r in case.rows if r.operand == operand and r.group == g]
                assert [(r.slot, tuple(r.shape), r.dtype, r.bytes) for r in rows] == got, (recipe, arch, operand)
                assert {r.container for r in rows} == {type(x).__name__}


# ---- grouped allocation ----------------------------------------------------------------------------
def _group_splits(groups: int, total_units: int, unit: int, rng: random.Random) -> list[int]:
    """Uneven splits in multiples of ``unit``, group 1 empty when G >= 3."""
    weights = [0 if (groups >= 3 and i == 1) else rng.randint(1, 5) for i in range(groups)]
    units = [total_units * w // sum(weights) for w in weights]
    units[0] += total_units - sum(units)
    return [u * unit for u in units]


def _te_grouped(groups: int, shapes: list[tuple[int, int]], q) -> dict[str, tuple[int, str, int]]:
    """``{slot: (numel, dtype, nbytes)}`` of TE's grouped allocation for ``shapes``, None slots left out."""
    gt = GroupedTensorStorage.make_grouped_tensor_with_shapes(
        groups, shapes, quantizer=q, device="cpu", dtype=torch.bfloat16
    )
    saved, _ = gt.prepare_for_saving()
    return {
        slot: (t.numel(), str(t.dtype).removeprefix("torch."), t.numel() * t.element_size())
        for slot, t in zip(SLOTS["GroupedTensorStorage"], saved, strict=True)
        if t is not None
    }


@pytest.mark.parametrize("recipe,block_dim", [("mxfp8", 1), ("nvfp4", 1), ("fp8-block", 1)])
@pytest.mark.parametrize("groups", [1, 4, 8, 64])
def test_cpp_totals_rule_equals_te_where_splits_are_128_aligned(
    cpu_shims, recipe: str, block_dim: int, groups: int
) -> None:
    """TE sizes group_quantize scales from totals (C++, not runnable on CPU); its comment says that
    equals the per-group sum when splits are multiples of 128. Check that against TE's Python sum."""
    rng = random.Random(groups)
    for k in (128, 1536, 3072):
        splits = _group_splits(groups, 4 * groups + 3, 128, rng)
        got = {
            slot: v[:2]
            for slot, v in _te_grouped(
                groups, [(m, k) for m in splits], _quantizer(recipe, block_dim=block_dim)
            ).items()
        }
        got.pop("first_dims", None)
        got.pop("tensor_offsets", None)
        assert got == grouped_buffers_cpp(recipe, sum(splits), k, groups, block_dim=block_dim)


GROUPED_INPUT_CASES = [("fused", r, "sm100", v) for r in ("mxfp8", "nvfp4") for v in ("te-2.20", "pr3545")]
GROUPED_INPUT_CASES += [
    ("unfused-grouped", r, a, "te-2.20")
    for r, a in (
        ("bf16", "sm90"),
        ("fp8-current", "sm90"),
        ("fp8-current", "sm100"),
        ("fp8-block", "sm90"),
        ("mxfp8", "sm100"),
        ("nvfp4", "sm100"),
    )
]


@pytest.mark.parametrize("path,recipe,arch,variant", GROUPED_INPUT_CASES)
@pytest.mark.parametrize("groups", [4, 8, 64])
def test_grouped_input_rows_match_te(cpu_shims, path: str, recipe: str, arch: str, variant: str, groups: int) -> None:
    """FC1 input rows (GroupedTensorStorage slots) = TE's grouped allocation, minus the rowwise prune.

    The unfused-grouped path prunes the rowwise copy whenever a columnwise one exists; the fused path
    does for MXFP8, and for NVFP4 only with PR #3545.
    """
    cpu_shims(arch)
    rng = random.Random(groups)
    splits = _group_splits(groups, 2 * groups + 5, 128, rng)
    tokens, hidden, ffn = sum(splits), 3072, 1536
    case = estimate(make_spec(recipe, tokens, hidden, ffn, groups, splits), path=path, arch=arch, variant=variant)
    q = None if recipe == "bf16" else _quantizer(recipe)
    te_rows = _te_grouped(groups, [(m, hidden) for m in splits], q)
    pruned = path == "unfused-grouped" or recipe == "mxfp8" or variant == "pr3545"
    if pruned and "columnwise_data" in te_rows:
        te_rows.pop("rowwise_data")
        te_rows.pop("scale_inv")
    rows = {r.slot: (r.shape[0], r.dtype, r.bytes) for r in case.rows if r.operand == "fc1.input"}
    assert rows == te_rows


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
@pytest.mark.parametrize("tokens", [128, 1152, 82944])
def test_fused_dense_single_group_rows_match_te(cpu_shims, recipe: str, tokens: int) -> None:
    """G=1 dense path: a GroupedTensor wrapping one tex.quantize output; inner rows = make_empty buffers."""
    hidden = 3072
    case = estimate(make_spec(recipe, tokens, hidden, 1536, 1), path="fused")
    x = _quantizer(recipe).make_empty((tokens, hidden), dtype=torch.bfloat16, device="cpu")
    saved, _ = x.prepare_for_saving()
    names = dict(zip(SLOTS[SINGLE_CONTAINER[recipe]], saved, strict=True))
    mapping = {
        "_rowwise_data": "rowwise_data",
        "_columnwise_data": "columnwise_data",
        "_rowwise_scale_inv": "scale_inv",
        "_columnwise_scale_inv": "columnwise_scale_inv",
        "_amax_rowwise": "amax",
        "_amax_columnwise": "columnwise_amax",
    }
    want = {mapping[s]: t.numel() * t.element_size() for s, t in names.items() if t is not None}
    if recipe == "mxfp8":  # pruned in 2.20.2
        want.pop("rowwise_data")
        want.pop("scale_inv")
    want.update(first_dims=8, tensor_offsets=16)
    container = [r for r in case.rows if r.operand == "fc1.input" and r.kind == "container"]
    assert len(container) == 1 and container[0].container == "GroupedTensor"
    inner = {r.slot: r.bytes for r in case.rows if r.container_index == container[0].index}
    assert inner == want


# ---- slot orders -----------------------------------------------------------------------------------
def test_prepare_for_saving_slot_orders_match_te(cpu_shims) -> None:
    """Fill every buffer attribute with a distinct tensor; prepare_for_saving must return SLOTS order."""
    objs = {
        "Float8TensorStorage": _fp8_storage(32, 32, "sm90"),
        "MXFP8TensorStorage": _quantizer("mxfp8").make_empty((32, 32), dtype=torch.bfloat16, device="cpu"),
        "Float8BlockwiseQTensorStorage": _quantizer("fp8-block").make_empty(
            (32, 32), dtype=torch.bfloat16, device="cpu"
        ),
        "NVFP4TensorStorage": _quantizer("nvfp4").make_empty((32, 32), dtype=torch.bfloat16, device="cpu"),
        "GroupedTensorStorage": GroupedTensorStorage.make_grouped_tensor_with_shapes(
            2, [(32, 32), (64, 32)], quantizer=_quantizer("nvfp4"), device="cpu", dtype=torch.bfloat16
        ),
    }
    for cls, obj in objs.items():
        assert type(obj).__name__ == cls
        marks = {}
        for i, slot in enumerate(SLOTS[cls]):
            t = torch.full((i + 1,), i)
            setattr(obj, slot, t)
            marks[slot] = t
        saved, _ = obj.prepare_for_saving()
        assert [id(t) for t in saved] == [id(marks[s]) for s in SLOTS[cls]], cls
