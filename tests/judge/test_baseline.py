"""The comparison logic of the regression gate and the baseline refresh (memaudit.judge.baseline)."""

from __future__ import annotations

import dataclasses

import pytest
from _reports import (
    REF_BF16,
    TE_BF16,
    TE_FP8,
    TE_NVFP4,
    RowBuilder,
    bf16_rows,
    copy_report,
    make_case,
    make_report,
    resize_row,
    sample_report,
)

from memaudit.errors import UsageError
from memaudit.judge.baseline import (
    Tolerance,
    compare_reports,
    env_differences,
    parse_tolerance,
    update_baseline,
)
from memaudit.report import PathInfo, compute_totals


def failing_labels(cmp) -> set[tuple[str, str]]:
    return {(f.case, f.label) for f in cmp.failures}


def test_identical_reports_have_no_findings() -> None:
    base = sample_report()
    cmp = compare_reports(base, copy_report(base))
    assert not cmp.regressed
    assert cmp.findings == []
    assert cmp.env_warnings == []
    assert cmp.saved_delta == 0
    # Only the cases ok in both are summed: three of four (NVFP4 is skipped).
    assert len(cmp.compared) == 3
    assert cmp.baseline_saved == sum(c.totals.saved_bytes for c in base.cases if c.status == "ok") > 0


def test_one_buffer_grown_by_one_byte_is_a_regression_that_names_it() -> None:
    base = sample_report()
    cur = resize_row(base, TE_FP8, 4, +1)  # fc2.input data columnwise
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    labels = failing_labels(cmp)
    assert (TE_FP8, "saved_bytes") in labels
    assert (TE_FP8, "operand fc2.input") in labels
    assert (TE_FP8, "kind data") in labels
    assert (TE_FP8, "orientation columnwise") in labels
    # Nothing else moved.
    assert {c for c, _ in labels} == {TE_FP8}
    assert not any(f.key == "fc1.input" for f in cmp.findings)
    op = next(f for f in cmp.failures if f.label == "operand fc2.input")
    assert op.delta == 1 and op.verdict == "regression"
    assert "fc2.input" in op.message() and "+1 B" in op.message()
    assert cmp.saved_delta == 1
    diff = cmp.case(TE_FP8)
    assert diff is not None and [rd.key for rd in diff.row_diffs] == ["fc2.input data columnwise fp8"]


def test_growth_inside_an_unchanged_storage_is_still_caught() -> None:
    # The buffer grows but its storage does not (a view into a larger allocation): saved_bytes is
    # unchanged, the operand bytes are not.
    base = sample_report()
    cur = resize_row(base, TE_BF16, 0, +1, storage=False)
    cmp = compare_reports(base, cur)
    assert cmp.case(TE_BF16).saved_delta == 0
    assert (TE_BF16, "operand fc1.input") in failing_labels(cmp)
    assert (TE_BF16, "saved_bytes") not in failing_labels(cmp)


def test_shrink_is_an_improvement_and_passes() -> None:
    base = sample_report()
    cur = resize_row(base, TE_FP8, 3, -4096)  # activation.input
    cmp = compare_reports(base, cur)
    assert not cmp.regressed
    improved = {f.label for f in cmp.improvements}
    assert {"saved_bytes", "operand activation.input", "kind tensor"} <= improved
    assert all(f.verdict == "improvement" for f in cmp.improvements)
    assert cmp.saved_delta == -4096


def test_fail_on_change_fails_a_shrink() -> None:
    base = sample_report()
    cur = resize_row(base, TE_FP8, 3, -4096)
    cmp = compare_reports(base, cur, fail_on="change")
    assert cmp.regressed
    assert {f.verdict for f in cmp.failures} == {"changed"}


@pytest.mark.parametrize(
    ("tolerance", "growth", "regressed"),
    [
        (0, 1, True),
        ("1 MiB", 1, False),
        ("1 MiB", 1024 * 1024, False),
        ("1 MiB", 1024 * 1024 + 1, True),
        ("0.5%", 1, False),
        ("0.5%", 10**6, True),
    ],
)
def test_tolerance(tolerance, growth, regressed) -> None:
    base = sample_report()
    cur = resize_row(base, TE_FP8, 0, growth)
    cmp = compare_reports(base, cur, tolerance=tolerance)
    assert cmp.regressed is regressed
    grown = [f for f in cmp.findings if f.label == "operand fc1.input"]
    assert len(grown) == 1 and grown[0].delta == growth
    assert grown[0].verdict == ("regression" if regressed else "within tolerance")


def test_percent_tolerance_is_of_the_case_saved_bytes() -> None:
    base = sample_report()
    saved = base.case(TE_FP8).totals.saved_bytes
    allowed = int(saved * 0.005)
    # A growth of a small operand (4-byte scale_inv) far beyond 0.5 % of itself but within 0.5 % of the case.
    assert not compare_reports(base, resize_row(base, TE_FP8, 1, allowed), tolerance="0.5%").regressed
    assert compare_reports(base, resize_row(base, TE_FP8, 1, allowed + 1), tolerance="0.5%").regressed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Tolerance(bytes=0)),
        (0, Tolerance(bytes=0)),
        ("4096", Tolerance(bytes=4096)),
        ("1 MiB", Tolerance(bytes=1024 * 1024)),
        ("0.5%", Tolerance(fraction=0.005)),
        (" 2 % ", Tolerance(fraction=0.02)),
    ],
)
def test_parse_tolerance(text, expected) -> None:
    assert parse_tolerance(text) == expected


@pytest.mark.parametrize("text", ["-1", "abc", "1 parsec", "150%", "-3%", ""])
def test_parse_tolerance_rejects(text) -> None:
    with pytest.raises(UsageError) as info:
        parse_tolerance(text)
    assert info.value.key == "--tolerance"
    assert "--tolerance" in str(info.value)


def test_bad_fail_on() -> None:
    with pytest.raises(UsageError, match="--fail-on"):
        compare_reports(sample_report(), sample_report(), fail_on="sometimes")


@pytest.mark.parametrize(
    ("before", "after", "regressed", "direction"),
    [
        ("ok", "error", True, "worse"),
        ("ok", "skipped", True, "worse"),
        ("skipped", "error", True, "worse"),
        ("error", "ok", False, "better"),
        ("skipped", "ok", False, "better"),
        ("error", "skipped", False, "neutral"),
    ],
)
def test_status_changes(before, after, regressed, direction) -> None:
    def rep(status: str):  # with a case ok in both, so that something is compared
        reason = None if status == "ok" else f"{status} because of reasons"
        return make_report([make_case(REF_BF16, status=status, reason=reason), make_case(TE_BF16)])

    cmp = compare_reports(rep(before), rep(after))
    assert cmp.regressed is regressed
    [f] = [f for f in cmp.findings if f.metric == "status"]
    assert f.direction == direction
    assert f"{before}" in f.text and f"{after}" in f.text
    # Under --fail-on change every status change fails.
    assert compare_reports(rep(before), rep(after), fail_on="change").regressed


def test_new_error_case_is_a_regression() -> None:
    base = sample_report()
    cur = copy_report(base)
    new_id = REF_BF16.replace("/g1/", "/g2/")
    cur.cases.append(make_case(new_id, status="error", reason="RuntimeError: CUDA out of memory"))
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    [f] = cmp.failures
    assert f.case == new_id and "new case" in f.text and "out of memory" in f.text
    assert cmp.case(new_id).state == "new"


def test_new_ok_case_is_a_note_unless_fail_on_change() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases.append(make_case(REF_BF16.replace("/g1/", "/g2/")))
    cmp = compare_reports(base, cur)
    assert not cmp.regressed
    assert [f.verdict for f in cmp.findings] == ["note"]
    assert compare_reports(base, cur, fail_on="change").regressed


def test_missing_case_fails_unless_allowed() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases = [c for c in cur.cases if c.id != TE_BF16]
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    diff = cmp.case(TE_BF16)
    assert diff.state == "missing" and diff.regressed
    assert "missing" in diff.findings[0].text
    assert not compare_reports(base, cur, allow_missing=True).regressed
    assert compare_reports(base, cur, allow_missing=True, fail_on="change").regressed


def test_a_comparison_of_nothing_fails() -> None:
    base = sample_report()
    other = make_report([make_case(REF_BF16.replace("t256", "t512"))])  # other shapes: no id in common
    cmp = compare_reports(base, other, allow_missing=True)
    assert cmp.compared == [] and cmp.nothing_compared and cmp.regressed
    assert not compare_reports(base, copy_report(base)).nothing_compared


def test_fused_path_lost_is_a_regression() -> None:
    base = sample_report()
    base.case(TE_BF16).path = PathInfo({"fused": True})
    cur = copy_report(base)
    cur.case(TE_BF16).path = PathInfo({"fused": False})
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    assert failing_labels(cmp) == {(TE_BF16, "path.fused")}
    back = compare_reports(cur, base)  # false -> true
    assert not back.regressed
    assert [f.label for f in back.improvements] == ["path.fused"]


def test_row_count_growth() -> None:
    base = make_report([make_case(REF_BF16, bf16_rows())])
    cur = copy_report(base)
    case = cur.cases[0]
    # A new zero-byte container row: bytes unchanged, one more row.
    b = RowBuilder()
    b.rows = case.rows
    b.add("fc1.input", "container", nbytes=0, container="Float8Tensor", shape=(0,))
    case.totals = compute_totals(case.rows)
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    # the counts say which operand and kind gained a row, though no byte changed
    assert failing_labels(cmp) == {
        (REF_BF16, "rows"),
        (REF_BF16, "operand fc1.input rows"),
        (REF_BF16, "kind container rows"),
    }
    # A byte tolerance does not gate counts; a percent tolerance gates them by the same fraction.
    assert not compare_reports(base, cur, tolerance="1 MiB").regressed
    assert not compare_reports(base, cur, tolerance="30%").regressed
    assert compare_reports(base, cur, tolerance="10%").regressed


def test_duplicates_and_parameters_do_not_count_as_saved_bytes() -> None:
    base = make_report([make_case(REF_BF16, bf16_rows())])
    cur = copy_report(base)
    case = cur.cases[0]
    b = RowBuilder()
    b.rows = case.rows
    b.add("fc1.input", "tensor", nbytes=case.rows[0].bytes, duplicate_of=0)
    w = case.rows[3]  # the parameter (fc1.weight)
    case.rows[3] = dataclasses.replace(w, bytes=w.bytes * 2, storage_bytes=w.storage_bytes * 2)
    case.totals = compute_totals(case.rows)
    cmp = compare_reports(base, cur)
    assert {f.label for f in cmp.findings} == {"rows"}
    keys = [rd.key for rd in cmp.cases[0].row_diffs]
    assert "fc1.weight tensor bf16 (parameter)" in keys
    assert "fc1.input tensor bf16 #2" in keys


def test_env_differences_name_each_difference() -> None:
    a = {"transformer_engine": "2.20.2", "device_class": "sm90", "torch": "2.11.0", "python": "3.12"}
    b = {"transformer_engine": "2.21.0", "device_class": "sm100", "torch": "2.11.0", "python": "3.11"}
    diffs = env_differences(a, b)
    assert len(diffs) == 2
    assert "TransformerEngine version" in diffs[0] and "2.20.2" in diffs[0] and "2.21.0" in diffs[0]
    assert "device class" in diffs[1] and "SM90" in diffs[1] and "SM100" in diffs[1]
    torch_diff = env_differences({"torch": "2.11.0"}, {"torch": "2.14.1"})
    assert len(torch_diff) == 1 and "torch version" in torch_diff[0]
    assert "not installed" in env_differences({"transformer_engine": "2.20.2"}, {"transformer_engine": None})[0]
    assert env_differences(a, dict(a)) == []


def test_env_mismatch_warns_or_fails_under_strict_env() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.environment["transformer_engine"] = "2.21.0"
    cmp = compare_reports(base, cur)
    assert not cmp.regressed and len(cmp.env_warnings) == 1
    strict = compare_reports(base, cur, strict_env=True)
    assert strict.regressed and strict.env_failed and strict.failures == []


def test_duplicate_case_ids_are_bad_input() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases.append(copy_report(base).cases[0])
    with pytest.raises(UsageError, match="twice"):
        compare_reports(base, cur)


def test_update_baseline_merges_keeps_and_prunes() -> None:
    old = sample_report()
    cur = resize_row(old, TE_FP8, 0, +1)
    cur.cases = [c for c in cur.cases if c.id != TE_BF16]  # not measured this time
    new_id = REF_BF16.replace("/g1/", "/g2/")
    cur.cases.append(make_case(new_id))
    cur.environment["torch"] = "2.15.0"

    merged, changes = update_baseline(cur, old, prune=False)
    assert [c.id for c in merged.cases] == [TE_FP8, TE_BF16, TE_NVFP4, REF_BF16, new_id]
    actions = {ch.case: ch.action for ch in changes}
    assert actions == {
        TE_FP8: "updated",
        TE_BF16: "kept",
        TE_NVFP4: "unchanged",
        REF_BF16: "unchanged",
        new_id: "added",
    }
    upd = next(ch for ch in changes if ch.case == TE_FP8)
    assert upd.after - upd.before == 1 and "+1 B" in upd.text()
    assert merged.environment["torch"] == "2.15.0"
    assert merged.case(TE_FP8).totals.saved_bytes == cur.case(TE_FP8).totals.saved_bytes
    # The merged baseline compares clean against the current report (the kept case is only "missing").
    assert not compare_reports(merged, cur, allow_missing=True).regressed

    pruned, changes = update_baseline(cur, old, prune=True)
    assert [c.id for c in pruned.cases] == [TE_FP8, TE_NVFP4, REF_BF16, new_id]
    assert {ch.case: ch.action for ch in changes}[TE_BF16] == "removed"


def test_update_baseline_without_existing_and_status_note() -> None:
    cur = sample_report()
    merged, changes = update_baseline(cur, None)
    assert [c.id for c in merged.cases] == [c.id for c in cur.cases]
    assert {ch.action for ch in changes} == {"added"}
    broken = copy_report(cur)
    broken.cases[0] = make_case(TE_FP8, status="error", reason="cublas_gemm failed")
    _, changes = update_baseline(broken, cur)
    note = next(ch for ch in changes if ch.case == TE_FP8).note
    assert "ok -> error" in note and "expect error" in note
