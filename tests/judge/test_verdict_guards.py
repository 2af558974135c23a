"""Tests that guard verdicts and bytes where the mutation run (bench/mutation/mutate.py) found no
test: selections without an operand, a container filter that excludes, uneven per-operand,group
counts, rows without a storage, boundaries (a ratio exactly at its maximum, the tolerance's
percent limit, counts and bytes at 2**63-1, nesting at the depth limit), a saved row sharing a
parameter's storage, TE offload rows on the host, and the fused layout that names PR #3545's
buffers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from _budget_cases import Rows, bf16_case, fp8_case, fused_case, make_case
from _reports import bf16_rows, copy_report, make_report, resize_row, sample_report, write

from memaudit.errors import UsageError
from memaudit.judge.baseline import compare_reports, parse_tolerance
from memaudit.judge.budgets import evaluate_rule
from memaudit.judge.checks import Context, measure_bytes
from memaudit.judge.rules import ByteExpr, Count, MaxBytes, Ratio, Rule, Selection
from memaudit.judge.scenario import parse_count
from memaudit.report import MAX_DEPTH, MAX_INT, Row, compute_totals, load_report

ROOT = Path(__file__).resolve().parents[2]


def rule(check, select: Selection | None = None, **kw) -> Rule:
    return Rule(name=kw.pop("name", "r"), check=check, select=select, source="s.toml", key="budget[0]", **kw)


# ---- selections without an operand ------------------------------------------------------------------
def test_byte_and_count_rules_whose_selection_names_no_operand() -> None:
    case = fp8_case("fp8-current", 4)
    scales = [r for r in case.rows if r.kind == "scale_inv"]
    sel = Selection(kind=("scale_inv",))
    exact = sum(r.bytes for r in scales)
    assert (
        evaluate_rule(rule(MaxBytes(ByteExpr.parse(str(exact), source="s", key="k"), "logical"), sel), case).verdict
        == "pass"
    )
    assert (
        evaluate_rule(rule(MaxBytes(ByteExpr.parse(str(exact - 1), source="s", key="k"), "logical"), sel), case).verdict
        == "fail"
    )
    assert evaluate_rule(rule(Count("==", len(scales)), sel), case).verdict == "pass"
    assert evaluate_rule(rule(Count("==", len(scales) + 1), sel), case).verdict == "fail"
    # without an operand, a case that saved nothing is bad input, not a pass
    empty = make_case("fp8-current", 4, [])
    with pytest.raises(UsageError, match="saved no rows"):
        evaluate_rule(rule(Count(">=", 1), sel), empty)


def test_the_container_filter_excludes_rows() -> None:
    case = fp8_case("fp8-current", 4)
    inside = Selection(operand=("fc1.input",), container=("Float8TensorStorage",))
    outside = Selection(operand=("fc1.input",), container=("GroupedTensor*",))
    assert evaluate_rule(rule(Count("==", 0), outside), case).verdict == "pass"  # the filter excluded every row
    assert evaluate_rule(rule(Count("==", 0), inside), case).verdict == "fail"
    assert not [r for r in case.rows if outside.matches(r)]


def test_per_operand_group_counts_with_uneven_rows() -> None:
    """fc1.input keeps two data rows in group 0, fc2.input one: counting the wrong operand gives other numbers."""
    b = Rows()
    for g, n in ((0, 2), (1, 1)):
        for _ in range(n):
            b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=g, orientation="columnwise")
    for g in (0, 1):
        b.add("fc2.input", "data", "fp8", [8], "uint8", 8, group=g, orientation="columnwise")
    case = make_case("fp8-current", 2, b.rows, tokens=32)
    sel = Selection(operand=("fc1.input", "fc2.input"), kind=("data",))
    v = evaluate_rule(rule(Count("==", 1, per="operand,group"), sel), case)
    assert v.verdict == "fail"
    assert "fc1.input[0]: 2" in v.message and "fc2.input[0]" not in v.message.split("failing:")[1].split("\n")[0]
    assert evaluate_rule(rule(Count("<=", 2, per="operand,group"), sel), case).verdict == "pass"
    assert evaluate_rule(rule(Count("==", 3, per="operand"), sel), case).verdict == "fail"
    per_op = evaluate_rule(rule(Count(">=", 3, per="operand"), sel), case)
    assert (
        per_op.verdict == "fail"
        and "fc2.input: 2" in per_op.message
        and "fc1.input: 3" not in per_op.message.split("failing:")[1]
    )


# ---- rows without a storage ---------------------------------------------------------------------------
def test_rows_without_a_storage_count_by_their_own_bytes() -> None:
    rows = [
        Row(
            index=0, kind="tensor", format="bf16", shape=[4], dtype="bfloat16", bytes=8, storage="s0", storage_bytes=64
        ),
        Row(index=1, kind="tensor", format="bf16", shape=[2], dtype="bfloat16", bytes=4, storage=None),
        Row(
            index=2, kind="tensor", format="bf16", shape=[3], dtype="bfloat16", bytes=6, storage=None, is_parameter=True
        ),
    ]
    assert measure_bytes(rows, "logical") == 18
    assert measure_bytes(rows, "physical") == 64 + 4 + 6
    assert measure_bytes(rows, "saved") == 64 + 4  # a loose parameter row is not saved memory
    case = make_case("bf16", 1, rows, target="reference", tokens=16, hidden=16, ffn=16)
    sel = Selection(kind=("tensor",))
    assert (
        evaluate_rule(rule(MaxBytes(ByteExpr.parse("68", source="s", key="k"), "saved"), sel), case).verdict == "pass"
    )
    assert (
        evaluate_rule(rule(MaxBytes(ByteExpr.parse("67", source="s", key="k"), "saved"), sel), case).verdict == "fail"
    )


def test_a_saved_row_sharing_a_parameters_storage_is_not_saved_memory() -> None:
    """A view of a weight that autograd saved without the parameter flag still lives in the weight's storage."""
    param = Row(
        index=0,
        kind="tensor",
        format="bf16",
        shape=[8, 8],
        dtype="bfloat16",
        bytes=128,
        storage="s0",
        storage_bytes=128,
        is_parameter=True,
    )
    view = Row(
        index=1,
        kind="tensor",
        format="bf16",
        shape=[8],
        dtype="bfloat16",
        bytes=16,
        storage="s0",
        storage_bytes=128,
        storage_offset=16,
    )
    own = Row(
        index=2, kind="tensor", format="bf16", shape=[8], dtype="bfloat16", bytes=16, storage="s1", storage_bytes=16
    )
    t = compute_totals([param, view, own])
    assert (t.physical_bytes, t.parameter_bytes, t.saved_bytes, t.logical_bytes) == (144, 128, 16, 160)
    alone = compute_totals([view, own])  # without the parameter row, the view's storage is saved memory
    assert alone.saved_bytes == 144
    assert measure_bytes([param, view, own], "saved") == 16


# ---- boundaries ---------------------------------------------------------------------------------------
def test_a_ratio_exactly_at_its_maximum_passes_and_just_above_fails() -> None:
    base, other = bf16_case(4), bf16_case(4, copy_input=False)
    sel = Selection(operand=("fc1.input",))
    num = measure_bytes([r for r in base.rows if sel.matches(r)], "logical")
    ctx = Context(find_case=lambda case, ratio: other)
    assert evaluate_rule(rule(Ratio(1.0, (("recipe", "bf16"),), "logical"), sel), base, ctx).verdict == "pass"
    assert (
        num
        and evaluate_rule(rule(Ratio(1.0 - 1e-9, (("recipe", "bf16"),), "logical"), sel), base, ctx).verdict == "fail"
    )


def test_tolerance_limits() -> None:
    with pytest.raises(UsageError, match="below 100%"):
        parse_tolerance("100%")
    assert parse_tolerance("99.99%").fraction == pytest.approx(0.9999)
    assert parse_tolerance("0%").exact and not parse_tolerance("1").exact
    tol = parse_tolerance("4096")
    assert tol.allowed(10**9) == 4096 and tol.allowed_rows(10) is None
    assert parse_tolerance("0").allowed_rows(10) == 0
    pct = parse_tolerance("50%")
    assert pct.allowed(1001) == 500 and pct.allowed_rows(3) == 1 and pct.allowed(-5) == 0


@pytest.mark.parametrize("grow", [4095, 4096, 4097])
def test_growth_at_the_byte_tolerance(grow: int) -> None:
    from _reports import TE_FP8

    base = sample_report()
    cur = resize_row(base, TE_FP8, 3, grow)  # the activation: one storage of its own
    cmp = compare_reports(base, cur, tolerance="4096")
    assert cmp.regressed is (grow > 4096)


def test_counts_and_bytes_at_2_to_the_63_minus_1(tmp_path: Path) -> None:
    assert parse_count(MAX_INT, source="s", key="k") == ("==", MAX_INT)
    assert parse_count(f"<= {MAX_INT}", source="s", key="k") == ("<=", MAX_INT)
    for bad in (MAX_INT + 1, f">= {MAX_INT + 1}", "== " + "9" * 5000):
        with pytest.raises(UsageError, match="2\\*\\*63-1"):
            parse_count(bad, source="s", key="k")
    rows = [
        Row(
            index=0,
            kind="tensor",
            format="bf16",
            shape=[1],
            dtype="bfloat16",
            bytes=MAX_INT,
            storage="s0",
            storage_bytes=MAX_INT,
        )
    ]
    rep = make_report([make_case("bf16", 1, rows, target="reference", tokens=16, hidden=16, ffn=16)])
    path = write(rep, tmp_path / "max.json")
    assert load_report(path).cases[0].totals.saved_bytes == MAX_INT
    text = path.read_text(encoding="utf-8").replace(str(MAX_INT), str(MAX_INT + 1))
    (tmp_path / "over.json").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match="less than or equal to 9223372036854775807"):
        load_report(tmp_path / "over.json")


def _nested(depth: int) -> object:
    """A value that nests ``depth`` levels (a flat object is 1)."""
    x: object = 1
    for _ in range(depth):
        x = {"a": x}
    return x


@pytest.mark.parametrize(("where", "base"), [("environment", 1), ("path", 3), ("allocator", 3)])
def test_nesting_at_the_depth_limit(tmp_path: Path, where: str, base: int) -> None:
    """A report may nest exactly MAX_DEPTH levels (counting from the top object); one more is refused."""
    d = json.loads(sample_report().to_json())
    for depth, ok in ((MAX_DEPTH - base, True), (MAX_DEPTH - base + 1, False)):
        x = json.loads(json.dumps(d))
        if where == "environment":
            x["environment"]["deep"] = _nested(depth - 1)
        else:
            x["cases"][0][where] = {**(x["cases"][0][where] or {}), "deep": _nested(depth - 1)}
        (tmp_path / "r.json").write_text(json.dumps(x), encoding="utf-8")
        if ok:
            load_report(tmp_path / "r.json")
        else:
            with pytest.raises(UsageError, match=f"nested {MAX_DEPTH + 1} levels deep"):
                load_report(tmp_path / "r.json")
    # deeper than the decoder itself goes: refused, not a crash
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(UsageError, match="nested too deep"):
        load_report(tmp_path / "deep.json")


def test_totals_are_checked_field_by_field(tmp_path: Path) -> None:
    """Each field of the totals, one off, is refused naming that field (the case and the file too)."""
    rep = sample_report()
    rep.cases[0].rows = [
        *rep.cases[0].rows[:3],
        Row(index=3, kind="tensor", format="bf16", shape=[2], dtype="bfloat16", bytes=4, resides="host"),
        Row(index=4, kind="tensor", format="bf16", shape=[2], dtype="bfloat16", bytes=4, resides="unknown"),
        Row(
            index=5,
            kind="tensor",
            format="bf16",
            shape=[2],
            dtype="bfloat16",
            bytes=4,
            storage="s9",
            storage_bytes=4,
            aliases_output=True,
        ),
        Row(
            index=6,
            kind="tensor",
            format="bf16",
            shape=[2],
            dtype="bfloat16",
            bytes=4,
            storage="s8",
            storage_bytes=4,
            via="ctx",
        ),
    ]
    rep.cases[0].freed = [
        Row(index=0, kind="tensor", format="bf16", shape=[2], dtype="bfloat16", bytes=6, storage="s7", storage_bytes=6)
    ]
    rep.cases[0].totals = compute_totals(rep.cases[0].rows, rep.cases[0].freed)
    t = rep.cases[0].totals
    assert min(t.host_bytes, t.unknown_bytes, t.output_bytes, t.ctx_bytes, t.freed_rows, t.freed_bytes) > 0
    good = json.loads(rep.to_json())
    (tmp_path / "ok.json").write_text(json.dumps(good), encoding="utf-8")
    assert load_report(tmp_path / "ok.json").to_json() == rep.to_json()
    for name in good["cases"][0]["totals"]:
        bad = json.loads(json.dumps(good))
        bad["cases"][0]["totals"][name] += 1
        (tmp_path / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(UsageError, match=rf"bad.json: cases\[{rep.cases[0].id}\]\.totals\.{name}: says"):
            load_report(tmp_path / "bad.json")


# ---- TE: offload rows on the host, and the fused layout ----------------------------------------------
def test_te_offload_rows_reside_on_the_host() -> None:
    from memaudit.te.capture.classify import TEClassifier

    te = TEClassifier()
    assert te.resides("te-offload", 3) == "host"  # TE's offload hands back an int index for a moved tensor
    assert te.resides("te-offload", SimpleNamespace()) is None  # a tensor it kept
    assert te.resides("other", 3) is None and te.resides(None, 3) is None
    host = Row(
        index=0,
        kind="tensor",
        format="bf16",
        shape=[4],
        dtype="bfloat16",
        bytes=8,
        storage="s0",
        storage_bytes=8,
        resides="host",
    )
    loose = Row(index=1, kind="tensor", format="bf16", shape=[4], dtype="bfloat16", bytes=8, resides="host")
    dev = Row(
        index=2, kind="tensor", format="bf16", shape=[4], dtype="bfloat16", bytes=8, storage="s1", storage_bytes=32
    )
    t = compute_totals([host, loose, dev])
    assert (t.host_bytes, t.saved_bytes, t.physical_bytes, t.logical_bytes) == (16, 32, 32, 24)


class GroupedLinear(SimpleNamespace):
    pass


class ScaledSwiGLU(SimpleNamespace):
    pass


class _Fuser(SimpleNamespace):
    pass


def _fuser(groups: int, *, fused: bool, single: bool = False) -> tuple[_Fuser, int]:
    """A stand-in for TE's OperationFuser node after a forward: its basic ops, their contexts' saved
    ranges and one flat ``tensor_objects`` entry per saved tensor (te-internals §2.1 / §2.4)."""
    from memaudit.te.capture import roles

    fc1 = GroupedLinear(num_groups=groups, single_grouped_weight=single, _scale_bias=False)
    fc2 = GroupedLinear(num_groups=groups, single_grouped_weight=single, _scale_bias=False)
    act = ScaledSwiGLU()
    w = 1 if single else groups
    if fused:
        n = len(roles.FUSED_META) + 4 + 2 * w
        ranges = [(0, n), None, (n, n)]
    else:
        n1 = 5 + groups + w
        ranges = [(0, n1), (n1, n1 + 2), (n1 + 2, n1 + 2 + 5 + groups + w)]
        n = ranges[2][1]
    ctxs = [SimpleNamespace(_saved_tensors_range=r, use_grouped_tensor_path=False) for r in ranges]
    node = _Fuser(basic_ops=[fc1, act, fc2], basic_op_ctxs=ctxs, tensor_objects=[None] * n)
    return node, n


def _rows_of(n: int) -> list[Row]:
    return [
        Row(
            index=i,
            kind="tensor",
            format="bf16",
            shape=[1],
            dtype="bfloat16",
            bytes=2,
            op="_Fuser",
            saved_as=f"saved_tensors[{i}]",
            slot=f"saved_tensors[{i}]",
            storage=f"s{i}",
            storage_bytes=2,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("groups", [1, 4])
def test_the_fused_layout_names_the_pr_3545_buffers(groups: int) -> None:
    from memaudit.te.capture.classify import label_fuser_rows

    node, n = _fuser(groups, fused=True)
    rows = _rows_of(n)
    label_fuser_rows(node, rows)
    names = [r.operand for r in rows]
    assert names[:7] == [
        "fc1.split_sizes",
        "fc1.base_split_offsets",
        "fc1.split_points",
        "fc1.input_offsets",
        "fc1.output_offsets",
        "fc2.input_offsets",
        "fc2.output_offsets",
    ]
    assert names[7] == "fc1.input"
    assert names[8 : 8 + groups] == [f"fc1.weight[{g}]" for g in range(groups)]
    assert names[8 + groups : 11 + groups] == ["activation.activation_in", "activation.scales", "fc2.input"]
    assert names[11 + groups :] == [f"fc2.weight[{g}]" for g in range(groups)]
    assert [r.group for r in rows if r.operand and ".weight[" in r.operand] == [*range(groups), *range(groups)]


def test_the_fused_layout_with_one_grouped_weight_and_the_unfused_layout() -> None:
    from memaudit.te.capture.classify import label_fuser_rows
    from memaudit.te.capture.roles import fused_layout

    node, n = _fuser(4, fused=True, single=True)
    rows = _rows_of(n)
    label_fuser_rows(node, rows)
    assert [r.operand for r in rows][7:] == [
        "fc1.input",
        "fc1.weight",
        "activation.activation_in",
        "activation.scales",
        "fc2.input",
        "fc2.weight",
    ]
    # the unfused path: the activation context saves two entries, so this is not the fused layout
    unfused, m = _fuser(4, fused=False)
    assert fused_layout(unfused.basic_ops, unfused.basic_op_ctxs) is None
    rows = _rows_of(m)
    label_fuser_rows(unfused, rows)
    names = [r.operand for r in rows]
    assert names[:5] == [
        "fc1.split_sizes",
        "fc1.base_split_offsets",
        "fc1.split_points",
        "fc1.input_offsets",
        "fc1.output_offsets",
    ]
    assert names[5:9] == ["fc1.input"] * 4 and [r.group for r in rows[5:9]] == [0, 1, 2, 3]
    assert names[9:13] == [f"fc1.weight[{g}]" for g in range(4)]
    assert names[13:15] == ["activation.activation_in", "activation.scales"]
    # too few entries for the fused save, or another op sequence: not the fused layout either
    short = _Fuser(
        basic_ops=node.basic_ops,
        basic_op_ctxs=[SimpleNamespace(_saved_tensors_range=(0, 5)), None, None],
        tensor_objects=[None] * 5,
    )
    assert fused_layout(short.basic_ops, short.basic_op_ctxs) is None
    assert fused_layout([ScaledSwiGLU(), GroupedLinear(), GroupedLinear()], node.basic_op_ctxs) is None
    assert fused_layout(node.basic_ops[:2], node.basic_op_ctxs[:2]) is None


def test_compare_sees_a_fused_case_keep_rowwise_nvfp4_again() -> None:
    """The regression PR #3545 fixed, coming back: rowwise NVFP4 input data and scales saved again."""
    base = make_report([fused_case("nvfp4", 4, pruned=True)])
    cur = make_report([fused_case("nvfp4", 4, pruned=False)])
    cmp = compare_reports(base, cur)
    labels = {f.label for f in cmp.failures}
    assert cmp.regressed and {"operand fc1.input", "orientation rowwise", "kind data", "kind scale_inv"} <= labels


def test_copy_report_round_trip_keeps_every_row() -> None:
    rep = make_report([make_case("bf16", 1, bf16_rows(), target="reference", tokens=16, hidden=16, ffn=16)])
    assert copy_report(rep).to_json() == rep.to_json()


# ---- byte expressions: variables at their smallest, the nesting limit, where a syntax error is -----------
def test_groups_of_one_is_a_value_a_byte_expression_reads() -> None:
    case = make_case("bf16", 1, bf16_rows(), target="reference", tokens=64, hidden=16, ffn=32)
    assert ByteExpr.parse("tokens * groups", source="s", key="k").value(case) == 64
    assert ByteExpr.parse("hidden * groups * 2", source="s", key="k").value(case) == 32


def test_byte_expressions_nest_to_the_limit_and_no_further() -> None:
    from memaudit.judge.byte_expr import MAX_DEPTH

    assert (
        ByteExpr.parse("1+" * (MAX_DEPTH - 1) + "1", source="s", key="k").const == MAX_DEPTH
    )  # leaves at depth MAX_DEPTH
    with pytest.raises(UsageError, match=f"nested more than {MAX_DEPTH} deep"):
        ByteExpr.parse("1+" * MAX_DEPTH + "1", source="s", key="k")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tokens tokens", "invalid syntax at column 8"),
        ("tokens)", "unmatched ')' at column 7"),
        ("  (tokens", "'(' was never closed at column 3"),
        ("tokens +", "invalid syntax at the end"),
    ],
)
def test_where_a_malformed_byte_expression_goes_wrong(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=re_escape(f"malformed byte expression {text!r}: {says}")):
        ByteExpr.parse(text, source="s", key="k")


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# ---- selections: format and slot filters ---------------------------------------------------------------
def test_format_and_slot_filters_select_and_exclude() -> None:
    case = fp8_case("fp8-current", 4)
    transposes = [r for r in case.rows if r.slot == "_transpose"]
    assert transposes
    assert [r.index for r in case.rows if Selection(slot=("_transpose",)).matches(r)] == [r.index for r in transposes]
    assert [r.index for r in case.rows if Selection(slot=("_trans*",)).matches(r)] == [r.index for r in transposes]
    assert not [r for r in case.rows if Selection(slot=("nothing*",)).matches(r)]
    fp8 = [r.index for r in case.rows if r.format == "fp8"]
    assert fp8 and [r.index for r in case.rows if Selection(format=("fp8",)).matches(r)] == fp8
    assert [r.index for r in case.rows if Selection(format=("fp*",)).matches(r)] == [
        r.index for r in case.rows if r.format.startswith("fp")
    ]
    assert evaluate_rule(rule(Count("==", len(transposes)), Selection(slot=("_transpose",))), case).verdict == "pass"
    assert (
        evaluate_rule(rule(Count("==", 0), Selection(operand=("fc1.input",), slot=("_data",))), case).verdict == "pass"
    )


# ---- per-bucket counts: labels, order and the rows shown -----------------------------------------------
def _bucket_case() -> object:
    """Rows given out of order, one unlabelled; fc1.input has rows in groups 0 and 2 (group 1 has no tokens)."""
    b = Rows()
    b.add("fc2.input", "data", "fp8", [8], "uint8", 8, group=0, orientation="columnwise", slot="_transpose")
    b.add(None, "tensor", "bf16", [4], "bfloat16", 8)
    b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=2, orientation="columnwise", slot="_transpose")
    b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=0, orientation="rowwise", slot="_data")
    b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=0, orientation="columnwise", slot="_transpose")
    b.add("fc1.weight[1]", "data", "fp8", [8], "uint8", 8, group=1, orientation="columnwise", slot="_transpose")
    b.add("fc1.weight[0]", "data", "fp8", [8], "uint8", 8, group=0, orientation="columnwise", slot="_transpose")
    b.add("fc1.input", "scale_inv", "fp32", [1], "float32", 4, group=None)
    case = make_case("fp8-current", 3, b.rows, tokens=48)
    case.spec = case.spec.replace(splits=(16, 0, 32))
    return case


def test_per_operand_buckets_are_sorted_with_the_unlabelled_last() -> None:
    case = _bucket_case()
    v = evaluate_rule(rule(Count(">=", 9, per="operand"), Selection(kind=("data", "tensor"))), case)
    assert v.actual.startswith("fc1.input: 3, fc1.weight[0]: 1, fc1.weight[1]: 1, fc2.input: 1, (unlabelled): 1")
    # a bucket short of rows shows its operand's other rows, and only those
    short = evaluate_rule(
        rule(Count(">=", 2, per="operand"), Selection(operand=("fc1.input", "fc2.input"), orientation=("rowwise",))),
        case,
    )
    assert short.verdict == "fail" and "failing: fc1.input: 1, fc2.input: 0" in short.message
    shown = short.message.split("did not match:")[1]
    assert (
        shown.count("fc2.input") == 1 and shown.count("fc1.input") == 4
    )  # its rowwise row, then its transposes and scale
    assert "fc1.weight" not in shown


def test_per_group_buckets_leave_out_rows_without_a_group_for_nonempty() -> None:
    case = _bucket_case()
    case.spec = case.spec.replace(splits=())  # no splits recorded: nonempty means "has a group"
    v = evaluate_rule(rule(Count("==", 99, per="group"), Selection(operand=("fc1.input",), group="nonempty")), case)
    assert v.actual.startswith("group 0: 2, group 2: 1") and "group None" not in v.actual
    with_none = evaluate_rule(rule(Count("==", 99, per="group"), Selection(operand=("fc1.input",))), case)
    assert with_none.actual == "group 0: 2, group 2: 1, group None: 1"


def test_per_operand_group_buckets_count_each_group_of_each_operand() -> None:
    case = _bucket_case()
    sel = Selection(operand=("fc1.input", "fc1.weight*"), kind=("data",), orientation=("columnwise",), group="nonempty")
    v = evaluate_rule(rule(Count("==", 1, per="operand,group"), sel), case)
    # fc1.input: groups 0 and 2 (group 1 has no tokens); fc1.weight[1] lives in the empty group: left out
    assert v.verdict == "pass" and v.actual == "1 each (3 x operand,group)"
    more = evaluate_rule(
        rule(Count("==", 2, per="operand,group"), Selection(operand=("fc1.input",), kind=("data",))), case
    )
    assert (
        more.verdict == "fail" and more.actual == "fc1.input[2]: 1, fc1.input: 0"
    )  # the scale has no group: a bucket of its own
    shown = more.message.split("\n")
    assert any("_transpose" in line and "fc1.input[2]" in line for line in shown)
    assert not any("fc1.input[0]" in line for line in shown)  # group 0 holds 2: not failing, its rows not shown


def test_a_byte_check_on_the_totals_lists_rows_by_measure() -> None:
    case = bf16_case(4)
    saved = evaluate_rule(rule(MaxBytes(ByteExpr.parse("1 B", source="s", key="k"), "saved")), case)
    physical = evaluate_rule(rule(MaxBytes(ByteExpr.parse("1 B", source="s", key="k"), "physical")), case)
    params = {r.index for r in case.rows if r.is_parameter}
    assert params and not set(saved.rows) & params  # parameters are not saved memory: not listed
    assert set(physical.rows) & params


# ---- comparisons: small pieces of the gate's arithmetic ------------------------------------------------
def test_row_diffs_deltas_and_finding_percentages() -> None:
    from memaudit.judge.baseline import Finding, RowDiff

    r = Row(index=0, kind="tensor", format="bf16", shape=[4], dtype="bfloat16", bytes=8)
    assert RowDiff("k", r, None).delta == -8 and RowDiff("k", None, r).delta == 8 and RowDiff("k", r, r).delta == 0
    f = Finding("c", "saved_bytes", None, 200, 250, "worse", True, "t")
    assert f.pct == 25.0 and f.delta == 50 and f.numeric
    assert Finding("c", "saved_bytes", None, 0, 5, "worse", True, "t").pct is None
    assert Finding("c", "status", None, "ok", "error", "worse", True, "t").pct is None


def test_tolerance_names_and_exactness() -> None:
    assert str(parse_tolerance("0")) == "0 (exact)" and parse_tolerance("0").exact
    assert str(parse_tolerance("1 MiB")) == "1.0 MiB" and not parse_tolerance("1 MiB").exact
    assert str(parse_tolerance("0.5%")) == "0.5%" and not parse_tolerance("0.5%").exact


def test_environment_differences_name_the_values_as_given() -> None:
    from memaudit.judge.baseline import env_differences

    out = env_differences({"device_class": "h200", "torch": "sm-2.1"}, {"device_class": "sm90", "torch": "sm-2.2"})
    assert "device class differs: baseline h200, current SM90" in out
    assert "torch version differs: baseline sm-2.1, current sm-2.2" in out


def test_baseline_update_says_what_changed_and_what_was_added() -> None:
    from _reports import REF_BF16, TE_NVFP4
    from _reports import make_case as report_case

    from memaudit.judge.baseline import update_baseline

    base = sample_report()
    cur = copy_report(base)
    cur.cases = [c for c in cur.cases if c.id != TE_NVFP4]
    grown = resize_row(cur, REF_BF16, 0, 64)
    _, changes = update_baseline(grown, make_report([c for c in base.cases if c.id != TE_NVFP4]))
    updated = next(c for c in changes if c.action == "updated")
    assert updated.text().endswith("; changed: rows, totals")
    skipped = make_report([report_case(TE_NVFP4, status="skipped", reason="needs sm100")])
    _, added = update_baseline(skipped, None)
    assert added[0].text() == f"added {TE_NVFP4}; skipped (needs sm100)"
    ok = make_report([report_case(REF_BF16)])
    _, added_ok = update_baseline(ok, None)
    assert added_ok[0].note is None and added_ok[0].text().startswith(f"added {REF_BF16}: saved ")


def test_a_case_diff_names_its_target_and_recipe_from_either_side() -> None:
    from memaudit.judge.baseline import CaseDiff

    case = sample_report().cases[0]
    for d in (CaseDiff(case.id, case, None), CaseDiff(case.id, None, case), CaseDiff(case.id, case, case)):
        assert (d.target, d.recipe) == (case.target, case.recipe)


# ---- reading and writing reports: messages, modes, streaming -------------------------------------------
def test_values_in_messages_are_named_or_cut() -> None:
    from memaudit.report import (
        short_value as _short,  # the one helper every report message shows a value with
    )

    assert _short(2**64) == "an integer of 65 bits" and _short(2**63) == str(2**63)
    assert _short("x" * 60) == repr("x" * 58)[:57] + "..." and len(_short("y" * 500)) == 60
    assert _short("short") == "'short'" and _short(True) == "True"


def test_a_5000_digit_number_in_a_report_is_named_not_printed(tmp_path: Path) -> None:
    d = json.loads(sample_report().to_json())
    text = json.dumps(d).replace('"saved_bytes": ', '"saved_bytes": 1' + "0" * 1000 + ', "x": ', 1)
    (tmp_path / "r.json").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as err:
        load_report(tmp_path / "r.json")
    assert "an integer of 3322 bits" in str(err.value) and "0000000000" not in str(err.value)


def test_the_depth_scan_skips_strings_and_their_escapes() -> None:
    from memaudit.report import check_depth

    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    check_depth('x = "' + deep + '"', "s")  # brackets in a string do not nest
    check_depth('x = "a\\"' + deep + '"', "s")  # nor after an escaped quote inside it
    check_depth('x = "a\\\\"\ny = "' + deep + '"', "s")  # an escaped backslash ends before the quote
    with pytest.raises(UsageError, match=f"nested {MAX_DEPTH + 1} levels deep"):
        check_depth('x = "a\\\\" ' + deep, "s")
    check_depth("[" * MAX_DEPTH + "]" * MAX_DEPTH, "s")
    with pytest.raises(UsageError, match=f"nested {MAX_DEPTH + 1} levels"):
        check_depth(deep, "s")


def test_os_errors_are_named_in_the_oss_words(tmp_path: Path) -> None:
    from memaudit.report import check_output, read_input

    long = tmp_path / ("z" * 300)
    with pytest.raises(UsageError, match="cannot read: File name too long"):
        read_input(long)
    with pytest.raises(UsageError, match="File name too long|a name in it is 300 bytes"):
        check_output(long / "x.json", "--json")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UsageError, match="--json: cannot write"):
        check_output(tmp_path / "loop", "--json")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not UTF-8 text"):
        read_input(tmp_path / "bad.txt")


def test_written_files_get_the_usual_mode(tmp_path: Path) -> None:
    import os

    from memaudit.report import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.md", "x")
        os.umask(0o007)
        atomic_write_text(tmp_path / "b.md", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.md").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.md").stat().st_mode & 0o777 == 0o660


def test_a_lone_surrogate_in_a_key_is_refused_naming_where(tmp_path: Path) -> None:
    d = json.loads(sample_report().to_json())
    text = json.dumps(d).replace('"options": {}', '"options": {"a\\udc80": 1}', 1)
    (tmp_path / "r.json").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=r"r.json: cases\[.*\]\.options\.a.*: holds a lone surrogate '\\\\udc80'"):
        load_report(tmp_path / "r.json")


def test_a_streamed_report_keeps_text_that_is_not_ascii(tmp_path: Path) -> None:
    from memaudit.report import write_report, write_report_streaming

    rep = sample_report()
    rep.cases[2].reason = "braucht sm100 — Blackwell ✓"
    write_report(rep, tmp_path / "whole.json")
    assert write_report_streaming(rep, iter(rep.cases), tmp_path / "streamed.json") == len(rep.cases)
    assert (tmp_path / "streamed.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert "✓".encode() in (tmp_path / "whole.json").read_bytes()


# ---- the estimator's padding breakdown, against block counts -------------------------------------------
def _blocks(m: int, k: int, rb: int, cb: int) -> int:
    """Scaling blocks of ``rb`` x ``cb`` elements that cover an (m, k) tensor: one scale each."""
    import math

    return math.ceil(m / rb) * math.ceil(k / cb)


def _ideal_scale_bytes(recipe: str, m: int, k: int, orientation: str, block_dim: int) -> int:
    block = {"mxfp8": 32, "nvfp4": 16, "fp8-block": 128}[recipe]
    item = 4 if recipe == "fp8-block" else 1  # float32 block-FP8 scales; E8M0 / E4M3 bytes otherwise
    if block_dim == 2:
        return _blocks(m, k, 128, 128) * item
    return (_blocks(m, k, 1, block) if orientation == "rowwise" else _blocks(m, k, block, 1)) * item


@pytest.mark.parametrize(
    ("recipe", "m", "k"), [("mxfp8", 100, 70), ("nvfp4", 48, 40), ("fp8-block", 300, 130), ("fp8-block", 257, 386)]
)  # 257 and 386 take one more 128-block than 129-blocks
def test_unpadded_scale_elements_are_one_per_block(recipe: str, m: int, k: int) -> None:
    from memaudit.te.estimate.shapes import unpadded_scale_elems

    block = {"mxfp8": 32, "nvfp4": 16, "fp8-block": 128}[recipe]
    cells = [(i, j) for i in range(m) for j in range(k)]
    assert unpadded_scale_elems(recipe, m, k, False) == len({(i, j // block) for i, j in cells})
    assert unpadded_scale_elems(recipe, m, k, True) == len({(i // block, j) for i, j in cells})
    if recipe == "fp8-block":
        assert unpadded_scale_elems(recipe, m, k, True, block_dim=2) == len({(i // 128, j // 128) for i, j in cells})
        assert unpadded_scale_elems(recipe, m, k, False, block_dim=2) == len({(i // 128, j // 128) for i, j in cells})


def test_grouped_block_fp8_scales_carry_the_2d_columnwise_slack() -> None:
    """quantizer.cpp (te-internals §5.2): block-FP8 grouped scales from the totals, plus
    ceil(K/128)*4*(G-1) float32 elements for 2-D columnwise scales."""
    from memaudit.te.estimate.shapes import grouped_buffers_cpp

    t, k = 4096, 1000
    for g, slack in ((1, 0), (4, 8 * 4 * 3)):
        got = grouped_buffers_cpp("fp8-block", t, k, g, block_dim=2)
        assert got["scale_inv"] == (32 * 8, "float32")  # (ceil(T/128), roundup(ceil(K/128), 4))
        assert got["columnwise_scale_inv"] == (8 * 32 + slack, "float32")  # (ceil(K/128), roundup(ceil(T/128), 4))
    one_d = grouped_buffers_cpp("fp8-block", t, k, 4, block_dim=1)
    assert one_d["scale_inv"] == (8 * 4096, "float32") and one_d["columnwise_scale_inv"] == (32 * 1000, "float32")
    rect = grouped_buffers_cpp("mxfp8", 256, 64, 2)
    assert rect["scale_inv"] == (256 * 4, "uint8") and rect["columnwise_scale_inv"] == (8 * 128, "uint8")


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "fp8-block"])
@pytest.mark.parametrize("path", ["unfused-split", "unfused-grouped", "fused"])
@pytest.mark.parametrize("groups", [1, 4])
def test_the_padding_an_estimate_reports_is_what_scale_blocks_leave_over(recipe: str, path: str, groups: int) -> None:
    from memaudit.te.estimate import estimate_config, resolve

    tokens, hidden, ffn = 2048, 192, 320
    for arch in ("sm100", "sm90"):
        try:
            c = resolve(recipe, tokens, hidden, ffn, groups, path=path, arch=arch)
            break
        except UsageError:
            continue
    else:
        pytest.skip(f"{recipe} has no {path} path")
    case = estimate_config(c)
    dims = {
        "fc1.input": (None, hidden),
        "fc2.input": (None, ffn),
        "fc1.weight": (2 * ffn, hidden),
        "fc2.weight": (hidden, ffn),
    }
    expected_ideal, entries = 0, {}
    for r in case.rows:
        ideal = r.bytes
        if r.kind == "scale_inv" and r.operand and r.slot and "scale_inv" in r.slot:
            base = r.operand.split("[")[0]
            n, k = dims[base]
            two_d = recipe == "fp8-block" and ".weight" in base
            if n is not None:
                ideal = _ideal_scale_bytes(recipe, n, k, r.orientation, 2 if two_d else 1)
            elif r.group is not None:
                ideal = _ideal_scale_bytes(recipe, c.splits[r.group], k, r.orientation, 1)
            else:
                ideal = sum(_ideal_scale_bytes(recipe, m, k, r.orientation, 1) for m in c.splits)
            if ideal != r.bytes:
                entries[r.index] = (ideal, r.bytes)
        expected_ideal += ideal
    pad = case.path["padding"]
    assert pad["padded_bytes"] == sum(r.bytes for r in case.rows)
    assert pad["ideal_bytes"] == expected_ideal
    assert {e["index"]: (e["ideal_bytes"], e["padded_bytes"]) for e in pad["rows"]} == entries
    assert entries  # these shapes pad: the check has something to check


# ---- more guards from the second mutation run ----------------------------------------------------------
def test_row_notes_name_every_flag() -> None:
    r = Row(
        index=0,
        kind="tensor",
        format="bf16",
        shape=[1],
        dtype="bfloat16",
        bytes=2,
        is_parameter=True,
        via="ctx",
        resides="host",
        aliases_output=True,
        duplicate_of=3,
        container_index=1,
        note="kept as a cpu copy",
    )
    assert r.notes() == ["param", "ctx", "host", "output", "dup of #3", "in #1", "kept as a cpu copy"]
    assert Row(index=0, kind="tensor", format="bf16", shape=[1], dtype="bfloat16", bytes=2).notes() == []


def test_report_errors_name_the_exact_key(tmp_path: Path) -> None:
    d = json.loads(sample_report().to_json())
    cid = d["cases"][0]["id"]
    cases = {
        "missing": (
            lambda x: x["cases"][0]["rows"][1].pop("bytes"),
            rf"cases\[{cid}\]\.rows\[1\]: missing key\(s\) bytes$",
        ),
        "unknown": (
            lambda x: x["cases"][0]["totals"].update(bonus=1),
            rf"cases\[{cid}\]\.totals: unknown key\(s\) bonus$",
        ),
        "budget row": (
            lambda x: x["cases"][0].update(
                budgets=[
                    {
                        "rule": "r",
                        "kind": "count",
                        "verdict": "pass",
                        "expected": "",
                        "actual": "",
                        "select": "",
                        "message": "",
                        "rows": [0, -1],
                    }
                ]
            ),
            rf"cases\[{cid}\]\.budgets\[0\]\.rows\[1\]: input should be greater than or equal to 0, got -1$",
        ),
        "long id": (lambda x: x["cases"][0].update(id="r" * 300, status=7), r"cases\[0\]\.status: "),
    }
    for name, (mutate, pattern) in cases.items():
        x = json.loads(json.dumps(d))
        mutate(x)
        (tmp_path / "r.json").write_text(json.dumps(x), encoding="utf-8")
        with pytest.raises(UsageError, match=pattern):
            load_report(tmp_path / "r.json")
        assert name


def test_closing_brackets_count_once() -> None:
    from memaudit.report import check_depth

    with pytest.raises(UsageError, match=f"nested {MAX_DEPTH + 1} levels"):
        check_depth("[[]][[]]" + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "s")


def test_check_output_says_where_a_write_goes_and_why_the_os_refuses(tmp_path: Path) -> None:
    from memaudit.report import check_output

    (tmp_path / "real.md").write_text("x", encoding="utf-8")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    assert check_output(tmp_path / "link.md", "--markdown") == tmp_path / "real.md"
    assert check_output(tmp_path / "new.md", "--markdown") == tmp_path / "new.md"
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UsageError, match="Symlink loop|Too many levels of symbolic links"):
        check_output(tmp_path / "loop", "--json")


def test_two_outputs_that_are_hard_links_of_one_file_are_refused(tmp_path: Path) -> None:
    import os

    from memaudit.report import check_outputs

    (tmp_path / "a.md").write_text("x", encoding="utf-8")
    os.link(tmp_path / "a.md", tmp_path / "b.md")
    with pytest.raises(UsageError, match="is also given to --markdown"):
        check_outputs({"--markdown": tmp_path / "a.md", "--benchmark-json": tmp_path / "b.md"})
    check_outputs({"--markdown": tmp_path / "a.md", "--benchmark-json": tmp_path / "c.md"})


def test_a_count_per_operand_says_which_rows_it_did_not_match_on_a_line_of_its_own() -> None:
    case = _bucket_case()
    v = evaluate_rule(
        rule(Count(">=", 2, per="operand"), Selection(operand=("fc1.input",), orientation=("rowwise",))), case
    )
    assert "failing: fc1.input: 1\nrows of those operands that the selection did not match:" in v.message


def test_per_group_buckets_are_in_group_order_for_many_groups() -> None:
    """Groups 1 and 8 of a 9-group case: a set of them iterates 8 first; the buckets must not."""
    b = Rows()
    for g in (8, 1, 8):
        b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=g)
    case = make_case("fp8-current", 9, b.rows, tokens=9 * 16)
    v = evaluate_rule(rule(Count("==", 99, per="group"), Selection(operand=("fc1.input",))), case)
    assert v.actual == "group 1: 1, group 8: 2"
    og = evaluate_rule(rule(Count("==", 99, per="operand,group"), Selection(operand=("fc1.input",))), case)
    assert og.actual == "fc1.input[1]: 1, fc1.input[8]: 2"


def test_a_short_path_is_normalised() -> None:
    from memaudit.capture.rows import short_path

    assert short_path("./tests/judge/test_verdict_guards.py") == "tests/judge/test_verdict_guards.py"
    assert short_path("<string>") == "<string>"
    assert short_path(str(ROOT / "tests" / "conftest.py")) == "tests/conftest.py"


def test_the_hook_pair_of_a_capture() -> None:
    import torch

    from memaudit.capture import capture

    with capture() as cap:
        pack, unpack = cap.hook_pair
        x = torch.randn(3)
        assert unpack(pack(x)) is x
    with pytest.raises(RuntimeError, match="needs a capture active in this thread"):
        cap.hook_pair  # noqa: B018


def test_a_selection_describes_every_field() -> None:
    sel = Selection(
        operand=("fc1.*",),
        kind=("data", "scale_inv"),
        orientation=("none",),
        format=("fp8",),
        container=("F*",),
        slot=("_data",),
        group=(0, 2),
        is_parameter=False,
        duplicate=True,
    )
    assert sel.describe() == (
        "operand=fc1.*, kind=data|scale_inv, orientation=none, format=fp8, container=F*, slot=_data, "
        "group=0|2, is_parameter=false, duplicate=true"
    )
    assert Selection(group="nonempty").describe() == "group=nonempty" and Selection().describe() == "all rows"


def test_a_group_with_one_token_is_not_empty() -> None:
    from memaudit.judge.rules import nonempty_groups

    case = fp8_case("fp8-current", 4)
    case.spec = case.spec.replace(splits=(1, 0, 16, 0))
    assert nonempty_groups(case) == frozenset({0, 2})
    case.spec = case.spec.replace(splits=())
    assert nonempty_groups(case) is None


def test_power_and_modulo_are_refused_where_they_stand() -> None:
    with pytest.raises(
        UsageError, match=re_escape("'**' at column 8 of 'tokens ** 2' is not allowed (use a unit such as MiB")
    ):
        ByteExpr.parse("tokens ** 2", source="s", key="k")
    with pytest.raises(UsageError) as err:
        ByteExpr.parse("tokens % 2", source="s", key="k")
    assert "'%' at column 8 of 'tokens % 2' is not allowed (a byte expression has" in str(err.value)


def test_a_fused_flag_on_one_side_only_names_both_sides() -> None:
    from _reports import TE_BF16

    base = sample_report()
    cur = copy_report(base)
    cur.case(TE_BF16).path = None
    f = next(f for f in compare_reports(base, cur).failures if f.metric == "path.fused")
    assert "(the current case has none; baseline false, current none)" in f.text
    back = compare_reports(cur, base)
    g = next(f for f in back.cases if f.id == TE_BF16).findings[0]
    assert "(the baseline case has none; baseline none, current false)" in g.text and g.failing


def test_group_0_sorts_before_group_1_whatever_order_the_rows_come_in() -> None:
    """Rows in groups 8, 1, 0 (a set of them iterates 8, 1, 0): the buckets are in group order, 0 first."""
    b = Rows()
    for g in (8, 1, 0, 8, 1, 8):
        b.add("fc1.input", "data", "fp8", [8], "uint8", 8, group=g)
    case = make_case("fp8-current", 9, b.rows, tokens=9 * 16)
    v = evaluate_rule(rule(Count("==", 99, per="group"), Selection(operand=("fc1.input",))), case)
    assert v.actual == "group 0: 1, group 1: 2, group 8: 3"
    og = evaluate_rule(rule(Count("==", 99, per="operand,group"), Selection(operand=("fc1.input",))), case)
    assert og.actual == "fc1.input[0]: 1, fc1.input[1]: 2, fc1.input[8]: 3"


@pytest.mark.parametrize("cid_len", [None, 200, 201])
def test_a_key_named_twice_is_named_by_its_case_id_and_row_position(tmp_path: Path, cid_len: int | None) -> None:
    """A duplicate key in a row: the case by its id (up to 200 characters, else by position); the row
    by its position, even where the row holds an ``id`` of its own."""
    d = json.loads(sample_report().to_json())
    if cid_len is not None:
        d["cases"][0]["id"] = "c" * cid_len
    cid = d["cases"][0]["id"]
    d["cases"][0]["rows"][1]["id"] = "q"
    d["cases"][0]["rows"][1]["MARK"] = 1
    (tmp_path / "r.json").write_text(json.dumps(d).replace('"MARK": 1', '"zz": 1, "zz": 2'), encoding="utf-8")
    case = f"[{cid}]" if len(cid) <= 200 else "[0]"
    with pytest.raises(UsageError) as err:
        load_report(tmp_path / "r.json")
    assert f"key 'zz' appears twice in cases{case}.rows[1] " in str(err.value)
    assert err.value.key == f"cases{case}.rows[1].zz"


@pytest.mark.parametrize("recipe", ["bf16", "fp8-current", "mxfp8", "nvfp4"])
def test_estimated_weights_share_one_packed_storage_only_for_bf16(recipe: str) -> None:
    """TE packs BF16 weights into one (G, N, K) buffer (grouped_linear.py reset_parameters); quantized
    weights are one allocation per buffer. Storages are numbered s0, s1, ... as rows first hold them."""
    from memaudit.te.estimate import estimate, make_spec

    g, hidden, ffn = 3, 128, 64
    case = estimate(make_spec(recipe, 128 * g, hidden, ffn, g), path="unfused-split", arch="sm100")
    fc1 = [r for r in case.rows if (r.operand or "").startswith("fc1.weight[") and r.kind in ("tensor", "data")]
    if recipe == "bf16":
        assert len({r.storage for r in fc1}) == 1
        assert [r.storage_offset for r in fc1] == [i * 2 * ffn * hidden * 2 for i in range(g)]
        assert {r.storage_bytes for r in fc1} == {g * 2 * ffn * hidden * 2}
    else:
        assert len({r.storage for r in fc1}) == len(fc1) >= g
    first_seen: list[str] = []
    for r in case.rows:
        if r.storage is not None and r.storage not in first_seen:
            first_seen.append(r.storage)
    assert sorted(first_seen, key=lambda s: int(s[1:])) == [f"s{i}" for i in range(len(first_seen))]


def test_the_unfused_scales_row_says_when_it_is_a_copy_of_probs_in_another_dtype() -> None:
    from memaudit.te.estimate import estimate, make_spec

    note = "ScaledSwiGLU saves scales = maybe_dequantize(probs, FC1 dtype) (swiglu.py:541,552)"
    for probs, want in (("float32", note + "; a bfloat16 copy of float32 probs"), ("bfloat16", note)):
        case = estimate(make_spec("bf16", 256, 128, 64, 2), path="unfused-grouped", probs_dtype=probs)
        (scales,) = [r for r in case.rows if r.operand == "activation.scales"]
        assert (scales.dtype, scales.note) == ("bfloat16", want)


def test_a_grouped_input_row_names_the_te_file_that_quantized_it() -> None:
    """The fused op quantizes its input in grouped_mlp.py, the unfused grouped path in grouped_linear.py."""
    from memaudit.te.estimate import estimate, make_spec

    for path, where in (("fused", "grouped_mlp.py:326"), ("unfused-grouped", "grouped_linear.py:1372")):
        case = estimate(make_spec("mxfp8", 256, 128, 128, 2), path=path, arch="sm100")
        notes = {r.slot: r.note for r in case.rows if r.operand == "fc1.input"}
        for slot in ("columnwise_data", "columnwise_scale_inv"):
            assert (
                notes[slot]
                == f"tex.group_quantize, scales sized from totals ({where}; csrc/quantizer.cpp create_grouped_tensor)"
            )


def test_a_failing_group_shows_the_rows_of_that_group_only() -> None:
    """Group 0 holds its rowwise row (passes); group 2 and the ungrouped scale fail: the rows shown
    are theirs (the group-2 transpose, the scale), never group 0's."""
    case = _bucket_case()
    v = evaluate_rule(
        rule(Count(">=", 1, per="group"), Selection(operand=("fc1.input",), orientation=("rowwise",))), case
    )
    assert v.verdict == "fail" and v.actual == "group 2: 0, group None: 0"
    shown = v.message.split("did not match:\n")[1].splitlines()
    assert [line.split()[0] for line in shown] == ["#2", "#7"]
