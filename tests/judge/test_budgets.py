"""The rule engine (memaudit/judge/): selections, each check, verdicts, known failures."""

from __future__ import annotations

import pytest
from _budget_cases import Rows, bf16_case, fp8_case, fused_case, make_case

from memaudit.errors import UsageError, did_you_mean
from memaudit.judge.budgets import evaluate_rule, summarize
from memaudit.judge.checks import Context, Violation
from memaudit.judge.rows import bytes_text, format_row, is_indexed, operand_base
from memaudit.judge.rules import (
    ByteExpr,
    Count,
    ExactBytes,
    Forbid,
    KnownFailure,
    MaxBytes,
    PathCheck,
    Ratio,
    Rule,
    Selection,
    operand_matches,
)
from memaudit.judge.versions import te_version_of, validate_specifier, version_in
from memaudit.report import Row
from memaudit.units import fmt_shape

INPUTS = ("fc1.input", "fc2.input")


def rule(check, select: Selection | None = None, **kw) -> Rule:
    return Rule(name=kw.pop("name", "r"), check=check, select=select, source="s.toml", key="budget[0]", **kw)


# ---- rows and selections ----------------------------------------------------------------------
def test_format_row_is_one_jax_style_line() -> None:
    r = Row(
        index=7,
        kind="data",
        format="nvfp4",
        shape=[3072, 41344],
        dtype="uint8",
        bytes=3072 * 41344,
        operand="fc1.input",
        orientation="columnwise",
        container="GroupedTensorStorage",
        slot="columnwise_data",
    )
    assert format_row(r) == (
        "#7  fc1.input  nvfp4  data  columnwise  (3072, 41344)  uint8  121.1 MiB  "
        "[GroupedTensorStorage.columnwise_data]"
    )
    r2 = Row(
        index=3,
        kind="tensor",
        format="bf16",
        shape=[16],
        dtype="torch.bfloat16",
        bytes=32,
        operand="fc1.input",
        group=2,
        is_parameter=True,
        duplicate_of=1,
        container_index=0,
    )
    assert format_row(r2) == "#3  fc1.input[2]  bf16  tensor  -  (16,)  bfloat16  32 B  [param, dup of #1, in #0]"


@pytest.mark.parametrize(
    ("pattern", "operand", "hit"),
    [
        ("fc1.input", "fc1.input", True),
        ("fc*.input", "fc2.input", True),
        ("fc1.weight", "fc1.weight[3]", True),  # base name matches an indexed operand
        ("fc1.weight[3]", "fc1.weight[3]", True),  # brackets are literal, not a character class
        ("fc1.weight[3]", "fc1.weight3", False),
        ("fc1.weight[2]", "fc1.weight[3]", False),
        ("fc?.input", "fc10.input", False),
        ("fc1.input", "fc1.inputs", False),
        ("*", None, True),
    ],
)
def test_operand_patterns(pattern: str, operand: str | None, hit: bool) -> None:
    assert operand_matches(pattern, operand) is hit


def test_selection_fields_all_must_match() -> None:
    case = fp8_case("fp8-current", 4)
    sel = Selection(operand=INPUTS, kind=("data",), orientation=("columnwise",), container=("Float8*",), group=(0,))
    got = [r for r in case.rows if sel.matches(r)]
    assert [(r.operand, r.group, r.slot) for r in got] == [
        ("fc1.input", 0, "_transpose"),
        ("fc2.input", 0, "_transpose"),
    ]
    assert not [r for r in case.rows if Selection(orientation=("none",), kind=("data",)).matches(r)]
    params = [r for r in bf16_case(4).rows if Selection(is_parameter=True).matches(r)]
    assert params and all(r.operand and ".weight[" in r.operand for r in params)
    dups = [r for r in bf16_case(4).rows if Selection(duplicate=True).matches(r)]
    assert [r.operand for r in dups] == ["fc2.split_sizes"]


def test_nonempty_group_selection_skips_zero_token_groups() -> None:
    case = fp8_case("fp8-delayed", 4, zero_group_rows=True)
    assert case.splits[1] == 0
    sel = Selection(operand=("fc1.input",), group="nonempty")
    assert {r.group for r in case.rows if sel.matches(r, frozenset(i for i, n in enumerate(case.splits) if n))} == {
        0,
        2,
        3,
    }


# ---- count --------------------------------------------------------------------------------------
def _transposes(per: str = "operand,group", op: str = "==", n: int = 1, group="nonempty") -> Rule:
    sel = Selection(operand=INPUTS, kind=("data",), orientation=("columnwise",), group=group)
    return rule(Count(op, n, per), sel, name="one-transpose")


def test_count_per_operand_group_passes_on_the_hopper_layout() -> None:
    v = evaluate_rule(_transposes(), fp8_case("fp8-current", 8))
    assert v.verdict == "pass"
    assert v.actual == "1 each (14 x operand,group)"  # 7 groups with tokens x 2 inputs


def test_count_finds_a_group_missing_its_transpose() -> None:
    v = evaluate_rule(_transposes(), fp8_case("fp8-current", 4, drop_transpose_group=2))
    assert v.verdict == "fail"
    assert "fc1.input[2]: 0" in v.message and "fc2.input[2]: 0" in v.message
    # the rows of that group the selection did not match are shown to help
    assert "fc1.input[2]  fp32  scale_inv  both" in v.message


def test_count_flags_extra_rows_with_the_rows() -> None:
    case = fp8_case("fp8-current", 4)
    r = rule(Count("==", 1, "operand,group"), Selection(operand=INPUTS, kind=("data",), group="nonempty"))
    bad = fp8_case("fp8-current", 4, keep_rowwise=True)
    assert evaluate_rule(r, case).verdict == "pass"
    v = evaluate_rule(r, bad)
    assert v.verdict == "fail"
    assert "fc1.input[0]: 2" in v.actual
    assert any("data  rowwise" in line for line in v.message.splitlines())
    assert len(v.rows) == 12  # 3 groups with tokens x 2 inputs x 2 data rows


def test_zero_token_group_is_not_over_constrained() -> None:
    with_rows = fp8_case("fp8-delayed", 4, zero_group_rows=True)
    without = fp8_case("fp8-delayed", 4)
    for case in (with_rows, without):
        assert evaluate_rule(_transposes(), case).verdict == "pass"
        assert evaluate_rule(_transposes(op="<=", group=None), case).verdict == "pass"


def test_count_per_case_and_per_group() -> None:
    case = fp8_case("fp8-current", 4)
    sel = Selection(operand=INPUTS, kind=("scale_inv",))
    assert evaluate_rule(rule(Count("==", 6), sel), case).actual == "6"
    v = evaluate_rule(rule(Count("==", 2, "group"), sel), case)
    assert v.verdict == "pass", v.message
    assert evaluate_rule(rule(Count(">=", 7), sel), case).verdict == "fail"


def test_count_per_operand_counts_dense_path_container_buffers() -> None:
    sel = Selection(operand=INPUTS, kind=("data",), orientation=("columnwise",))
    for g in (1, 4):
        case = fused_case("nvfp4", g, pruned=True)
        assert evaluate_rule(rule(Count("==", 1, "operand"), sel), case).verdict == "pass"
    dense = fused_case("nvfp4", 1, pruned=True)
    assert any(r.container_index is not None and r.kind == "data" for r in dense.rows)


def test_count_that_needs_rows_rejects_an_unknown_operand() -> None:
    r = rule(Count("==", 1, "operand"), Selection(operand=("fc1.inptu",)))
    with pytest.raises(UsageError) as exc:
        evaluate_rule(r, fp8_case("fp8-current", 4))
    msg = str(exc.value)
    assert "s.toml: budget[0].select.operand" in msg and "'fc1.inptu'" in msg and "did you mean 'fc1.input'" in msg
    # an upper bound or == 0 needs nothing to exist
    for op, n in (("<=", 1), ("==", 0)):
        assert (
            evaluate_rule(rule(Count(op, n), Selection(operand=("fc9.input",))), fp8_case("fp8-current", 4)).verdict
            == "pass"
        )


# ---- forbid -------------------------------------------------------------------------------------
def test_forbid_lists_offending_rows() -> None:
    sel = Selection(operand=INPUTS, kind=("data", "scale_inv"), orientation=("rowwise",))
    assert evaluate_rule(rule(Forbid(), sel), fused_case("nvfp4", 4, pruned=True)).verdict == "pass"
    v = evaluate_rule(rule(Forbid(), sel, name="no-rowwise"), fused_case("nvfp4", 4, pruned=False))
    assert v.verdict == "fail"
    assert v.actual == "4 rows"
    assert "no-rowwise: forbidden rows were saved (4 rows)" in v.message
    assert (
        "fc1.input  nvfp4  data  rowwise  (2097152,)  uint8  2.0 MiB  [GroupedTensorStorage.rowwise_data]" in v.message
    )
    assert len(v.rows) == 4


# ---- bytes --------------------------------------------------------------------------------------
def test_max_bytes_of_totals() -> None:
    case = fp8_case("fp8-current", 4)
    saved = case.totals.saved_bytes
    assert evaluate_rule(rule(MaxBytes(ByteExpr.parse(saved))), case).verdict == "pass"
    v = evaluate_rule(rule(MaxBytes(ByteExpr.parse(saved - 1))), case)
    assert v.verdict == "fail"
    assert "over by 1 B" in v.message
    assert "activation.activation_in" in v.message.splitlines()[3]  # largest row first


def test_byte_expressions_use_case_variables() -> None:
    case = bf16_case(4)
    sel = Selection(operand=("fc1.input",))
    views = rule(MaxBytes(ByteExpr.parse("tokens * hidden * elt"), "physical"), sel)
    assert evaluate_rule(views, case).verdict == "pass"
    assert evaluate_rule(views, case).expected == "<= 8.0 MiB (8388608 B) (physical)"
    assert ByteExpr.parse("2 * tokens + 1 KiB").value(case) == 2 * case.tokens + 1024
    assert ByteExpr.parse("elt").value(case) == 2


def test_views_versus_copies() -> None:
    """Per-group copies add up to the input's bytes, so only a storage count tells them from views."""
    sel = Selection(operand=("fc1.input", "fc2.input"))
    one_storage = rule(Count("==", 1, "operand", "storages"), sel)
    assert evaluate_rule(one_storage, bf16_case(8)).verdict == "pass"
    v = evaluate_rule(one_storage, bf16_case(8, copy_input=True))
    assert v.verdict == "fail"
    assert v.actual == "fc1.input: 8"  # the failing buckets
    assert v.expected == "== 1 storage per operand"
    bytes_only = rule(MaxBytes(ByteExpr.parse("tokens * hidden * elt"), "physical"), Selection(operand=("fc1.input",)))
    assert evaluate_rule(bytes_only, bf16_case(8, copy_input=True)).verdict == "pass"


def test_byte_expression_errors() -> None:
    with pytest.raises(UsageError, match="unknown variable 'hiden'.*did you mean 'hidden'"):
        ByteExpr.parse("tokens * hiden", source="f", key="k")
    with pytest.raises(UsageError, match="malformed byte quantity '12 MiBs'"):
        ByteExpr.parse("12 MiBs * tokens", source="f", key="k")
    with pytest.raises(UsageError, match="'elt' is unknown"):
        ByteExpr.parse("elt").value(make_case("bf16", 1, [], dtype="-"))


def test_saved_measure_skips_parameters_and_counts_storage_once() -> None:
    b = Rows()
    st = b.storage()
    b.add("x", "tensor", "bf16", [4], "bfloat16", 8, storage=st, storage_bytes=64)
    b.add("x", "tensor", "bf16", [4], "bfloat16", 8, storage=st, storage_bytes=64, storage_offset=8)
    b.add("w", "tensor", "bf16", [8], "bfloat16", 16, is_parameter=True)
    case = make_case("bf16", 1, b.rows, tokens=16)
    sel = Selection(operand=("x", "w"))
    got = {
        m: evaluate_rule(rule(ExactBytes(ByteExpr.parse(0), m), sel), case).actual
        for m in ("logical", "physical", "saved")
    }
    assert got == {"logical": "32 B", "physical": "80 B", "saved": "64 B"}


# ---- ratio --------------------------------------------------------------------------------------
def _ratio(limit: float) -> Rule:
    sel = Selection(operand=("fc*.input",), kind=("data", "tensor", "scale_inv"))
    return rule(Ratio(limit, (("recipe", "bf16"),), "logical"), sel, name="vs-bf16")


def _finder(*cases):
    def find(case, ratio):
        want = dict(ratio.against)
        return next((c for c in cases if c.recipe == want["recipe"] and c.groups == case.groups), None)

    return find


def test_ratio_against_another_case() -> None:
    bf16 = bf16_case(4)
    ctx = Context(find_case=_finder(bf16))
    v = evaluate_rule(_ratio(0.3), fused_case("nvfp4", 4, pruned=True), ctx)
    assert v.verdict == "pass"
    assert v.actual.startswith("0.281 (")
    v = evaluate_rule(_ratio(0.3), fused_case("nvfp4", 4, pruned=False), ctx)
    assert v.verdict == "fail"
    assert v.actual.startswith("0.562 (")


def test_ratio_needs_the_other_case() -> None:
    with pytest.raises(UsageError, match=r"budget\[0\]\.against.*no such case"):
        evaluate_rule(_ratio(0.3), fused_case("nvfp4", 4, pruned=True), Context(find_case=_finder()))
    skipped = make_case("bf16", 4, [], status="skipped", reason="no GPU")
    v = evaluate_rule(_ratio(0.3), fused_case("nvfp4", 4, pruned=True), Context(find_case=_finder(skipped)))
    assert v.verdict == "n/a" and "skipped" in v.message


# ---- path ---------------------------------------------------------------------------------------
def test_path_rule() -> None:
    assert evaluate_rule(rule(PathCheck(True)), fused_case("mxfp8", 4, pruned=True)).verdict == "pass"
    v = evaluate_rule(rule(PathCheck(True)), fp8_case("fp8-current", 4))
    assert v.verdict == "fail"
    assert "path was unfused, expected fused" in v.message and "GroupedLinear" in v.message
    with pytest.raises(UsageError, match="records no path"):
        evaluate_rule(rule(PathCheck(False)), make_case("bf16", 1, bf16_case(1).rows, path=None))


# ---- applicability and verdicts -----------------------------------------------------------------
def test_not_applicable_cases() -> None:
    r = rule(Forbid(), Selection(kind=("data",)), recipes=frozenset({"nvfp4"}))
    assert evaluate_rule(r, fp8_case("fp8-current", 4)).verdict == "n/a"
    r = rule(Forbid(), Selection(kind=("data",)), groups=frozenset({8}))
    assert evaluate_rule(r, fp8_case("fp8-current", 4)).verdict == "n/a"
    assert evaluate_rule(r, fp8_case("fp8-current", 8)).verdict == "fail"
    err = make_case("fp8-block", 4, [], status="error", reason="RuntimeError: cuBLAS")
    v = evaluate_rule(rule(PathCheck(False)), err)
    assert (v.verdict, v.message) == ("n/a", "case error: RuntimeError: cuBLAS")


def test_when_matches_the_case_path() -> None:
    r = rule(Forbid(), Selection(kind=("data",)), when=(("grouped_linear_path", "grouped-tensor"),))
    v = evaluate_rule(r, fp8_case("fp8-current", 4))
    assert v.verdict == "n/a" and "'grouped-tensor'" in v.message and "'split-quantize'" in v.message
    r2 = rule(Forbid(), Selection(kind=("data",)), when=(("grouped_linear_path", "split-quantize"),))
    assert evaluate_rule(r2, fp8_case("fp8-current", 4)).verdict == "fail"
    assert evaluate_rule(r2, make_case("bf16", 1, [], path=None)).verdict == "n/a"


@pytest.mark.parametrize(
    ("pruned", "te", "verdict"),
    [
        (False, "2.20.2", "xfail"),  # fails where it is known to fail
        (True, "2.20.2", "XPASS"),  # passes where it should fail: strict
        (True, "2.21.0", "pass"),
        (False, "2.21.0", "fail"),  # outside the range a failure is a failure
        (False, None, "fail"),  # no TE version: known_failure does not apply
        (False, "2.21.0.dev0+abc", "fail"),
        (False, "2.20.0rc1", "xfail"),
    ],
)
def test_known_failure_is_strict(pruned: bool, te: str | None, verdict: str) -> None:
    sel = Selection(operand=INPUTS, kind=("data", "scale_inv"), orientation=("rowwise",))
    r = rule(Forbid(), sel, known_failure=KnownFailure("<2.21", "PR #3545"))
    v = evaluate_rule(r, fused_case("nvfp4", 4, pruned=pruned), Context(te_version=te))
    assert v.verdict == verdict
    assert v.failed is (verdict in ("fail", "XPASS"))
    if verdict == "XPASS":
        assert "known_failure" in v.message and "<2.21" in v.message


def test_verdict_dict_and_summary() -> None:
    v = evaluate_rule(rule(Forbid(), Selection(kind=("data",)), name="no-data"), fp8_case("fp8-current", 1))
    d = v.to_dict()
    assert d["rule"] == "no-data" and d["verdict"] == "fail" and d["expected"] == "no row"
    assert d["rows"] == v.rows and d["rows"]
    assert {"rule", "kind", "verdict", "expected", "actual", "message", "rows"} <= d.keys()
    assert summarize([v, v]) == {"pass": 0, "fail": 2, "xfail": 0, "XPASS": 0, "n/a": 0}


def test_violation_text_is_its_own() -> None:
    v = Violation(
        "r", "== 1", "fc1.input[0]: 2", (1, 2), ("#1 a", "#2 b"), "failing: fc1.input[0]: 2", "kind=data", "count"
    )
    assert (
        str(v)
        == "r: expected count == 1; fc1.input[0]: 2\nselection: kind=data\nfailing: fc1.input[0]: 2\n    #1 a\n    #2 b"
    )


@pytest.mark.parametrize(
    ("kind", "headline"),
    [
        ("", "r: expected E, found A"),
        ("count", "r: expected count E; A"),
        ("forbid", "r: forbidden rows were saved (A); expected E"),
        ("max_bytes", "r: A saved, expected E"),
        ("exact_bytes", "r: A saved, expected E"),
        ("ratio", "r: ratio A, expected E"),
        ("path", "r: path was A, expected E"),
    ],
)
def test_violation_headline_by_rule_kind(kind: str, headline: str) -> None:
    assert str(Violation("r", "E", "A", kind=kind)) == headline


def test_byte_checks_share_op_and_target() -> None:
    case = bf16_case(4)
    most, exact = MaxBytes(ByteExpr.parse("tokens * hidden * elt")), ExactBytes(ByteExpr.parse(0), "physical")
    assert (most.kind, most.op, most.expr, most.expected()) == (
        "max_bytes",
        "<=",
        most.limit,
        "<= tokens * hidden * elt (saved)",
    )
    assert (exact.kind, exact.op, exact.expr, exact.expected()) == ("exact_bytes", "==", exact.value, "== 0 (physical)")
    assert most.holds(3, 3) and not most.holds(4, 3) and exact.holds(0, 0) and not exact.holds(0, 1)
    assert rule(most).byte_target(case) == case.tokens * case.hidden * 2
    with pytest.raises(UsageError, match=r"s.toml: budget\[0\].exact_bytes: 'elt \* tokens': case .* 'elt' is unknown"):
        rule(ExactBytes(ByteExpr.parse("elt * tokens"))).byte_target(make_case("bf16", 1, [], dtype="int8"))


def test_row_text_helpers() -> None:
    assert (fmt_shape([]), fmt_shape([7]), fmt_shape([2, 3])) == ("()", "(7,)", "(2, 3)")
    assert (bytes_text(1023), bytes_text(1536)) == ("1023 B", "1.5 KiB (1536 B)")
    assert is_indexed("fc1.weight[2]") and not is_indexed("fc1.input")
    assert (operand_base("fc1.weight[12]"), operand_base("fc1.input")) == ("fc1.weight", "fc1.input")


def test_did_you_mean() -> None:
    assert did_you_mean("tokns", ("tokens", "hidden")) == " (did you mean 'tokens'?)"
    assert did_you_mean("zzz", ("tokens", "hidden")) == ""
    assert did_you_mean("x", iter(())) == ""


# ---- versions ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "spec", "hit"),
    [
        ("2.20.2", "<2.21", True),
        ("2.21.0", "<2.21", False),
        ("2.21", "<2.21", False),
        ("2.20.2", ">=2.20,<2.21", True),
        ("2.19.9", ">=2.20,<2.21", False),
        ("2.20.2", "==2.20.*", True),
        ("2.2", "==2.20.*", False),
        ("2.20.2", "!=2.20.*", False),
        ("2.20.2", "~=2.20.0", True),
        ("2.21.0", "~=2.20.0", False),
        ("2.20.2", "!=2.20.2", False),
        ("2.20.2+cu13", "<=2.20.2", True),
        ("3.0", ">2.99", True),
    ],
)
def test_version_specifiers(version: str, spec: str, hit: bool) -> None:
    assert version_in(version, spec) is hit


def test_a_version_packaging_rejects_is_compared_by_its_release() -> None:
    assert version_in("2.20.2-custom", "<2.21") and not version_in("2.21.0-custom", "<2.21")
    with pytest.raises(ValueError, match="not a version"):
        version_in("main", "<2.21")


def test_bad_specifiers_are_refused() -> None:
    for spec in ("<<2.21", "<2.20.*", "", "2.21"):
        with pytest.raises(ValueError):
            validate_specifier(spec)


def test_te_version_of_environment() -> None:
    assert te_version_of({"transformer_engine": "2.20.2"}) == "2.20.2"
    assert te_version_of({"transformer_engine": {"version": "2.21.0"}}) == "2.21.0"
    assert te_version_of({"transformer_engine": None}) is None
    assert te_version_of({}) is None


@pytest.mark.parametrize(
    "case",
    [bf16_case(4), fp8_case("fp8-current", 8), fused_case("nvfp4", 1, pruned=False)],
    ids=["bf16", "fp8", "nvfp4-dense"],
)
def test_measures_of_all_rows_agree_with_the_totals(case) -> None:
    from memaudit.judge.checks import measure_bytes

    t = case.totals
    assert measure_bytes(case.rows, "logical") == t.logical_bytes
    assert measure_bytes(case.rows, "physical") == t.physical_bytes
    assert measure_bytes(case.rows, "saved") == t.saved_bytes
