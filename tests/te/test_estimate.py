"""The estimator on its own: no torch, no TE (tests/te/test_estimate_te.py checks it against TE)."""

from __future__ import annotations

import itertools
import random

import pytest

from memaudit.errors import UsageError
from memaudit.report import Report, compute_totals, load_report, write_report
from memaudit.spec import CaseSpec, default_splits
from memaudit.targets.registry import get_target
from memaudit.te.estimate import (
    ARCHS,
    PATHS,
    VARIANTS,
    bytes_by_kind,
    default_path,
    diff_cases,
    estimate,
    estimate_config,
    estimate_totals,
    expected_rows,
    make_spec,
    parse_range,
    resolve,
    scale_shape,
    skipped_case,
    sweep_point,
)
from memaudit.te.machine.recipes import ALIGNMENT, RECIPES

MiB = 1024**2


def rows_of(case, operand, **kw):
    return [r for r in case.rows if r.operand == operand and all(getattr(r, k) == v for k, v in kw.items())]


# ---- PR #3545: the numbers its description reports ------------------------------------------------
def test_pr3545_fc1_input_rowwise_buffers_match_the_pr_description() -> None:
    """'removes a 121 MiB data and a 15 MiB scale tensor' per expert layer (83k tokens, hidden 3072)."""
    case = estimate(make_spec("nvfp4", 82944, 3072, 1536, 1), variant="te-2.20")
    assert case.path["name"] == "fused" and case.path["dense_single_group"]
    data = rows_of(case, "fc1.input", slot="rowwise_data")
    scale = rows_of(case, "fc1.input", slot="scale_inv")
    assert len(data) == len(scale) == 1
    assert data[0].bytes // MiB == 121 and scale[0].bytes // MiB == 15
    assert (data[0].bytes + scale[0].bytes) // MiB == 136  # "~136 MiB"
    assert data[0].shape == [82944 * 3072 // 2] and data[0].dtype == "uint8"


@pytest.mark.parametrize("groups", [1, 4])
def test_pr3545_diff_is_exactly_the_nvfp4_rowwise_input_buffers(groups: int) -> None:
    spec = make_spec("nvfp4", 128 * 64, 1024, 512, groups)
    a = estimate(spec, variant="te-2.20")
    b = estimate(spec, variant="pr3545")
    entries, ta, tb = diff_cases(a, b)
    assert sorted((e.operand, e.slot) for e in entries) == [
        ("fc1.input", "rowwise_data"),
        ("fc1.input", "scale_inv"),
        ("fc2.input", "rowwise_data"),
        ("fc2.input", "scale_inv"),
    ]
    assert all(e.bytes_b == 0 and e.bytes_a > 0 and e.note for e in entries)
    assert tb.saved_bytes - ta.saved_bytes == -sum(e.bytes_a for e in entries)
    # the amax tensors are untouched (PR description)
    for case in (a, b):
        assert {r.slot for r in case.rows if r.operand == "fc1.input" and r.kind == "amax"} == {
            "amax",
            "columnwise_amax",
        }


def test_mxfp8_fused_already_prunes_rowwise_inputs() -> None:
    spec = make_spec("mxfp8", 4096, 1024, 512, 4)
    a, b = estimate(spec, variant="te-2.20"), estimate(spec, variant="pr3545")
    assert diff_cases(a, b)[0] == []
    inputs = [r for r in a.rows if r.operand in ("fc1.input", "fc2.input") and r.kind in ("data", "scale_inv")]
    assert inputs and {r.orientation for r in inputs} == {"columnwise"}


# ---- the H200 split path (expected_rows) ---------------------------------------------------------
def h200_spec(recipe: str, groups: int = 4, **kw) -> CaseSpec:
    return CaseSpec.make(
        get_target("te-grouped-mlp"),
        recipe=recipe,
        groups=groups,
        tokens=1024,
        hidden=256,
        ffn=128,
        device="cuda",
        **kw,
    )


def test_expected_rows_bf16_views_share_the_input_storage() -> None:
    spec = h200_spec("bf16")
    rows = expected_rows(spec)
    assert rows is not None
    splits = spec.split_sizes()
    assert 0 in splits  # default splits include an empty group
    xs = [r for r in rows if r.operand == "fc1.input"]
    assert [r.group for r in xs] == list(range(4)) and [r.shape for r in xs] == [[m, 256] for m in splits]
    assert len({r.storage for r in xs}) == 1 and xs[0].storage_bytes == 1024 * 256 * 2
    assert [r.storage_offset for r in xs] == [sum(splits[:g]) * 256 * 2 for g in range(4)]
    fc2 = [r for r in rows if r.operand == "fc2.input"]
    assert len({r.storage for r in fc2}) == 1 and fc2[0].storage_bytes == 1024 * 128 * 2
    ws = [r for r in rows if r.operand.startswith("fc1.weight[")]
    assert [r.shape for r in ws] == [[256, 256]] * 4 and all(r.is_parameter for r in ws)
    assert all(r.container is None and r.slot is None and r.op is None for r in rows)
    assert {r.device for r in rows} == {"cuda:0"}


@pytest.mark.parametrize("recipe", ["fp8-delayed", "fp8-current"])
def test_expected_rows_fp8_transpose_and_scale_per_group(recipe: str) -> None:
    spec = h200_spec(recipe)
    rows = expected_rows(spec)
    assert rows is not None
    splits = spec.split_sizes()
    xs = [r for r in rows if r.operand == "fc1.input"]
    assert [(r.group, r.slot, r.shape, r.dtype) for r in xs] == [
        x
        for g, m in enumerate(splits)
        for x in ((g, "_transpose", [256, m], "uint8"), (g, "_scale_inv", [1], "float32"))
    ]
    assert {r.container for r in xs} == {"Float8TensorStorage"}
    # no bulk allocation for per-tensor FP8: every buffer is its own storage
    assert len({r.storage for r in xs}) == len(xs)
    empty = [r for r in xs if r.group == 1 and r.slot == "_transpose"]
    assert empty[0].bytes == 0 and empty[0].storage_bytes == 0
    w = [r for r in rows if r.operand == "fc2.weight[3]"]
    assert [(r.slot, r.shape) for r in w] == [("_transpose", [128, 256]), ("_scale_inv", [1])]
    assert [r.orientation for r in w] == ["columnwise", "both"]


def test_expected_rows_order_and_duplicates() -> None:
    rows = expected_rows(h200_spec("fp8-current"))
    assert rows is not None
    ops = [r.operand.split("[")[0] for r in rows]
    first = list(dict.fromkeys(ops))
    assert first == [
        "fc1.split_sizes",
        "fc1.input",
        "fc1.weight",
        "activation.activation_in",
        "activation.scales",
        "fc2.split_sizes",
        "fc2.input",
        "fc2.weight",
    ]
    s1, s2 = rows_of_list(rows, "fc1.split_sizes"), rows_of_list(rows, "fc2.split_sizes")
    assert s2.duplicate_of == s1.index and s2.storage == s1.storage and s1.dtype == "int64" and s1.shape == [4]
    act = rows_of_list(rows, "activation.activation_in")
    assert act.shape == [1024, 256] and act.dtype == "bfloat16"
    sc = rows_of_list(rows, "activation.scales")  # maybe_dequantize(probs, bf16): a bf16 copy of fp32 probs
    assert sc.shape == [1024] and sc.dtype == "bfloat16"


def rows_of_list(rows, operand):
    found = [r for r in rows if r.operand == operand]
    assert len(found) == 1, operand
    return found[0]


def test_int32_split_sizes_are_converted_per_op() -> None:
    case = estimate(h200_spec("bf16"), split_sizes_dtype="int32")
    s1, s2 = rows_of_list(case.rows, "fc1.split_sizes"), rows_of_list(case.rows, "fc2.split_sizes")
    assert s2.duplicate_of is None and s1.storage != s2.storage


@pytest.mark.parametrize(
    "spec",
    [
        h200_spec("mxfp8"),
        h200_spec("fp8-block"),
        h200_spec("bf16", options={"activation": "srelu"}),
        h200_spec("bf16", options={"single_grouped_weight": True}),
        CaseSpec.make(get_target("reference"), recipe="bf16", groups=1, tokens=64, hidden=64, ffn=64),
    ],
)
def test_expected_rows_none_where_not_covered(spec: CaseSpec) -> None:
    assert expected_rows(spec) is None


# ---- allocation rules ---------------------------------------------------------------------------
def test_fused_offsets_are_from_blob_views_each_its_own_storage() -> None:
    # bulk_allocate hands out from_blob views: the H200's real splits_to_offsets_multi gave four
    # storages of exactly 16, 40, 40 and 40 B for G=4 (reports/emulated/standin-diff.json)
    case = estimate(make_spec("nvfp4", 4096, 1024, 512, 4))
    meta = [
        r
        for r in case.rows
        if r.operand
        in (
            "fc1.base_split_offsets",
            "fc1.split_points",
            "fc1.input_offsets",
            "fc1.output_offsets",
            "fc2.input_offsets",
            "fc2.output_offsets",
        )
    ]
    assert len(meta) == 6 and len({r.storage for r in meta}) == 6
    assert all(r.storage_offset == 0 and r.storage_bytes == r.bytes for r in meta)
    sp = [r for r in meta if r.operand == "fc1.split_points"][0]
    assert sp.dtype == "int32" and sp.shape == [4] and sp.bytes == 16


@pytest.mark.parametrize("recipe", ["fp8-block", "mxfp8", "nvfp4"])
def test_split_quantize_bulk_views(recipe: str) -> None:
    splits = [256, 0, 512, 256]
    case = estimate(
        make_spec(recipe, 1024, 256, 128, 4, splits),
        path="unfused-split",
        arch="sm100" if recipe != "fp8-block" else "sm90",
    )
    xs = [r for r in case.rows if r.operand == "fc1.input"]
    # every bulk view is a from_blob Storage of its own, exactly its bytes (no alignment slack visible)
    assert len({r.storage for r in xs}) == len(xs)
    assert all(r.storage_bytes == r.bytes and r.storage_offset == 0 for r in xs)
    assert [r for r in xs if r.bytes == 0]  # the 0-token group's empty views
    assert {r.orientation for r in xs} == {"columnwise"}


def test_scale_shapes_hand_computed() -> None:
    assert scale_shape("nvfp4", 82944, 3072, False) == (82944, 192)
    assert scale_shape("nvfp4", 100, 48, True) == (128, 8)
    assert scale_shape("mxfp8", 96, 96, False) == (128, 4)
    assert scale_shape("mxfp8", 96, 96, True) == (4, 128)
    assert scale_shape("fp8-block", 300, 200, False, block_dim=1) == (2, 300)
    assert scale_shape("fp8-block", 300, 200, True, block_dim=2) == (2, 4)


def test_padding_breakdown_for_mxfp8_scales() -> None:
    # MXFP8, K=96: 3 scales per row, padded to 4; grouped path saves columnwise: (8, 128) vs 8 x 96.
    case = estimate(make_spec("mxfp8", 256, 96, 96, 1), path="unfused-grouped")
    pad = {p["index"]: p for p in case.path["padding"]["rows"]}
    col = [r for r in case.rows if r.operand == "fc1.input" and r.slot == "columnwise_scale_inv"][0]
    assert pad[col.index] == {"index": col.index, "ideal_bytes": 8 * 96, "padded_bytes": 8 * 128}
    assert case.path["padding"]["padded_bytes"] - case.path["padding"]["ideal_bytes"] >= 8 * 32


# ---- variants, totals and the fast path ---------------------------------------------------------
GRID = [
    (r, p, a, g, t, h, f)
    for r in RECIPES
    for p in PATHS
    for a in ARCHS
    for g in (1, 3, 8, 64)
    for (t, h, f) in ((16384, 1024, 512), (8192, 3072, 1536))
]


def _valid(params):
    r, p, a, g, t, h, f = params
    try:
        return resolve(r, t, h, f, g, path=p, arch=a)
    except UsageError:
        return None


CONFIGS = [c for c in (_valid(p) for p in GRID) if c is not None]


def test_grid_covers_every_path() -> None:
    assert {c.path for c in CONFIGS} == set(PATHS) and {c.recipe for c in CONFIGS} == set(RECIPES)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_totals_equal_row_totals(variant: str) -> None:
    for c in CONFIGS:
        case = estimate_config(c, variant)
        ft = estimate_totals(c, variant)
        t = compute_totals(case.rows)
        assert (t.logical_bytes, t.physical_bytes, t.parameter_bytes) == (
            ft.logical_bytes,
            ft.physical_bytes,
            ft.parameter_bytes,
        ), (c, variant)
        assert bytes_by_kind(case) == ft.by_kind, (c, variant)
        assert case.totals == t


def test_fast_totals_equal_row_totals_with_explicit_uneven_splits() -> None:
    rng = random.Random(3545)
    checked = 0
    for recipe, path, arch in itertools.product(RECIPES, PATHS, ARCHS):
        for groups in (2, 5, 16):
            align = ALIGNMENT[recipe] * (1 if path != "fused" else max(1, 128 // ALIGNMENT[recipe]))
            units = [rng.choice([0, 1, 2, 7]) for _ in range(groups)]
            units[0] += 1
            splits = [u * align for u in units]
            try:
                c = resolve(recipe, sum(splits), 1024, 512, groups, splits=splits, path=path, arch=arch)
            except UsageError:
                continue
            for variant in VARIANTS:
                case, ft = estimate_config(c, variant), estimate_totals(c, variant)
                assert (case.totals.logical_bytes, case.totals.physical_bytes, bytes_by_kind(case)) == (
                    ft.logical_bytes,
                    ft.physical_bytes,
                    ft.by_kind,
                ), (c, variant)
                checked += 1
    assert checked > 100


def test_variants_only_ever_remove_bytes() -> None:
    for c in CONFIGS:
        te220, pr, ideal = (estimate_totals(c, v).saved_bytes for v in VARIANTS)
        assert ideal <= pr <= te220, c
        if c.recipe == "nvfp4" and c.path == "fused":
            assert pr < te220
        else:
            assert pr == te220


def test_ideal_keeps_no_rowwise_quantized_copy() -> None:
    for c in CONFIGS:
        if c.recipe in ("bf16", "fp8-delayed", "fp8-current"):
            continue
        rows = estimate_config(c, "ideal").rows
        assert not [r for r in rows if r.orientation == "rowwise"], c


def test_weights_are_parameters_only_for_bf16() -> None:
    for c in CONFIGS[:40]:
        case = estimate_config(c)
        w = [r for r in case.rows if r.operand and ".weight[" in r.operand]
        assert w and all(r.is_parameter == (c.recipe == "bf16") for r in w)
        if c.recipe == "bf16":
            assert case.totals.parameter_bytes == c.groups * (2 * c.ffn * c.hidden + c.hidden * c.ffn) * 2


def test_dense_single_group_saves_a_whole_grouped_tensor() -> None:
    dense = estimate(make_spec("nvfp4", 1024, 256, 128, 1))
    cont = [r for r in dense.rows if r.kind == "container"]
    assert [(r.operand, r.container, r.bytes, r.storage) for r in cont] == [
        ("fc1.input", "GroupedTensor", 0, None),
        ("fc2.input", "GroupedTensor", 0, None),
    ]
    inner = [r for r in dense.rows if r.container_index == cont[0].index]
    assert [r.slot for r in inner] == [
        "rowwise_data",
        "columnwise_data",
        "scale_inv",
        "columnwise_scale_inv",
        "amax",
        "columnwise_amax",
        "first_dims",
        "tensor_offsets",
    ]
    raw = estimate(make_spec("nvfp4", 1024, 256, 128, 1), dense_single_group=False)
    assert not [r for r in raw.rows if r.kind == "container"]
    assert raw.totals.saved_bytes == dense.totals.saved_bytes  # same buffers, other wrapping


# ---- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(recipe="nvfp5"), "--recipe"),
        (dict(path="fast"), "--path"),
        (dict(recipe="bf16", path="fused"), "--path"),
        (dict(tokens=1000, path="fused", recipe="mxfp8"), "--tokens"),
        (dict(hidden=1000, path="fused"), "--hidden"),
        (dict(ffn=96, path="fused"), "--ffn"),
        (dict(recipe="mxfp8", hidden=1000), "--hidden"),
        (dict(recipe="fp8-delayed", path="unfused-grouped"), "--path"),
        (dict(recipe="mxfp8", arch="sm90"), "--arch"),
        (dict(recipe="fp8-block", path="unfused-grouped", arch="sm100"), "--arch"),
        (dict(recipe="bf16", tokens=1000), "--tokens"),
        (dict(groups=0), "--groups"),
        (dict(splits=[512, 512], groups=4), "--splits"),
        (dict(arch="sm80"), "--arch"),
    ],
)
def test_bad_input_names_the_flag(kwargs, key) -> None:
    args = dict(recipe="nvfp4", tokens=1024, hidden=1024, ffn=512, groups=4)
    args.update(kwargs)
    with pytest.raises(UsageError) as exc:
        resolve(args.pop("recipe"), args.pop("tokens"), args.pop("hidden"), args.pop("ffn"), args.pop("groups"), **args)
    assert exc.value.key == key
    assert key in str(exc.value)


def test_default_paths() -> None:
    assert default_path("nvfp4", 3072, 1536) == "fused"
    assert default_path("mxfp8", 3072, 96) == "unfused-grouped"
    for r in ("bf16", "fp8-delayed", "fp8-current", "fp8-block"):
        assert default_path(r, 3072, 1536) == "unfused-split"


def test_default_splits_match_run() -> None:
    for r, g in itertools.product(RECIPES, (1, 4, 8)):
        case = estimate(make_spec(r, 8192, 1024, 512, g))
        assert case.splits == default_splits(8192, g, ALIGNMENT[r])


def test_parse_range() -> None:
    assert parse_range("1024:8192:x2", "--tokens") == [1024, 2048, 4096, 8192]
    assert parse_range("1:10:+3", "--tokens") == [1, 4, 7, 10]
    assert parse_range("1,8,64", "--groups") == [1, 8, 64]
    for bad in ("1:8", "8:1:x2", "1:8:x1", "a:b:x2", "0", "1:8:*2", "x"):
        with pytest.raises(UsageError) as exc:
            parse_range(bad, "--tokens")
        assert exc.value.key == "--tokens"


def test_sweep_point_totals_or_skip_reason() -> None:
    p = sweep_point("nvfp4", 4096, 1024, 512, 4, "te-2.20", "pr3545")
    assert p.config == resolve("nvfp4", 4096, 1024, 512, 4) and p.reason is None
    assert p.totals == estimate_totals(p.config) and p.diff_totals == estimate_totals(p.config, "pr3545")
    with pytest.raises(AttributeError):
        p.totals = None  # type: ignore[misc]
    bad = sweep_point("nvfp4", 1000, 1024, 512, 4)
    assert bad.config is None and bad.totals is None and "--tokens" in (bad.reason or "")
    case = skipped_case(bad, "te-2.20", None)
    assert case.status == "skipped" and case.reason == bad.reason and case.tokens == 1000


# ---- the report -------------------------------------------------------------------------------------
def test_report_round_trip(tmp_path) -> None:
    case = estimate(make_spec("nvfp4", 4096, 1024, 512, 4), variant="pr3545")
    assert case.target == "te-grouped-mlp"
    assert case.options["estimate"] is True and case.options["variant"] == "pr3545"
    assert case.options["path"] == "fused"
    assert {"estimated": True, "name": "fused", "fused": True}.items() <= case.path.items()
    path = tmp_path / "e.json"
    write_report(Report(cases=[case]), path)
    back = load_report(path)
    assert back.cases[0].to_dict() == case.to_dict()


def test_case_id_is_the_same_across_variants() -> None:
    spec = make_spec("nvfp4", 4096, 1024, 512, 4)
    assert len({estimate(spec, variant=v).id for v in VARIANTS}) == 1
