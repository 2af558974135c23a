"""Output that fits the console: every table rendered at 80 and 120 columns (and the CLI under
``COLUMNS``), captured and checked line by line.

At a fixed width: no line is longer than the width; ids, byte quantities and operand names appear
whole on one line; columns empty in every row are left out; below 100 columns the compact layout
is used (no vertical rules, fewer columns), and a wide console gets the boxed table.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console, RenderableType
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.judge.baseline import compare_reports
from memaudit.judge.budgets import Verdict
from memaudit.render.compare_table import comparison_table, print_comparison, rows_table
from memaudit.render.console import LOG_WIDTH, make_console
from memaudit.render.layout import COMPACT_WIDTH, Prose, Sheet, fit, text_col, value_col, wrap_text
from memaudit.render.tables import case_table, summary_table
from memaudit.render.verdicts import render_verdicts
from memaudit.report import load_report
from memaudit.te.estimate import estimate_config, resolve
from memaudit.te.estimate.tables import diff_table, padding_table
from memaudit.te.estimate.tables import rows_table as estimate_rows_table
from memaudit.units import fmt_bytes
from tests._reports import REF_BF16, TE_BF16, TE_FP8, make_case, resize_row, sample_report, write

ROOT = Path(__file__).resolve().parents[2]
H200 = load_report(ROOT / "reports" / "h200" / "te-grouped-mlp.json")
"""The measured TE matrix: 18 cases, ok, error (a long cuBLAS message) and skipped ones."""
WIDTHS = (80, 120)
BOX = "┃│┏┡└"


def render(renderable: RenderableType, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text().splitlines()


def assert_fits(lines: list[str], width: int) -> None:
    long = [ln for ln in lines if len(ln) > width]
    assert not long, f"{len(long)} lines over {width} columns: {long[:3]}"


def assert_whole(lines: list[str], *values: str) -> None:
    """Each value on some line, unbroken."""
    for v in values:
        assert any(v in ln for ln in lines), f"{v!r} is not on one line"


def headers(lines: list[str]) -> set[str]:
    return {w for ln in lines for w in re.split(r"[\s┃│]+", ln) if w}


def fp8_case():
    return next(c for c in H200.cases if c.id.startswith("te-grouped-mlp/fp8-current/g8/"))


# ---- run: the case table and the summary --------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_case_table_fits_and_keeps_values_whole(width: int) -> None:
    case = fp8_case()
    lines = render(case_table(case, width=width), width)
    assert_fits(lines, width)
    assert_whole(
        lines,
        case.id,
        "fc1.weight[7]",
        "activation.activation_in",
        "(4096, 4096)",
        "32.0 MiB",
        "960.0 KiB",
        "fp8 data columnwise",
    )
    assert_whole(lines, fmt_bytes(case.totals.saved_bytes))
    assert not any(c in "".join(lines) for c in BOX)  # the compact layout: no vertical rules
    assert "where" not in headers(lines[:3])  # the compact layout drops the slot and storage columns


def test_case_table_is_wide_on_a_wide_console() -> None:
    case = fp8_case()
    lines = render(case_table(case, width=LOG_WIDTH), LOG_WIDTH)
    assert_fits(lines, LOG_WIDTH)
    assert "┃" in "".join(lines) and {"where", "storage"} <= headers(lines[:4])
    assert_whole(lines, "Float8TensorStorage._transpose", "(_OperationFuserAutogradFunctionBackward)")


@pytest.mark.parametrize("width", WIDTHS)
def test_summary_puts_each_case_id_on_its_own_line(width: int) -> None:
    lines = render(summary_table(H200.cases, width=width), width)
    assert_fits(lines, width)
    for case in H200.cases:
        assert case.id in lines, case.id  # a line of its own, whole
    assert_whole(lines, "split-quantize", "92.0 MiB", "CUBLAS_STATUS_NOT_SUPPORTED.", "Device compute capability")
    assert {"status", "path", "rows", "saved", "reason"} <= headers(lines)
    assert "parameters" not in headers(lines)  # compact: fewer columns


def test_summary_drops_columns_that_are_empty_in_every_row() -> None:
    ok = [c for c in H200.cases if c.status == "ok"]  # no reason in any row
    for width in (*WIDTHS, LOG_WIDTH):
        lines = render(summary_table(ok, width=width), width)
        assert "reason" not in headers(lines) and "saved" in headers(lines)
    reference = make_case(REF_BF16)  # no path
    lines = render(summary_table([reference], width=LOG_WIDTH), LOG_WIDTH)
    assert "path" not in headers(lines) and "reason" not in headers(lines)


def test_case_table_with_expected_bytes_keeps_the_column_at_80() -> None:
    lines = render(case_table(fp8_case(), show_expected=True, width=80), 80)
    assert_fits(lines, 80)
    assert "expected" in headers(lines[:3])


# ---- compare --------------------------------------------------------------------------------------
def _comparison():
    base = sample_report()
    cur = resize_row(base, TE_FP8, 0, 1536)
    cur = resize_row(cur, REF_BF16, 1, -512)
    cur.cases[1] = make_case(
        TE_BF16,
        status="error",
        reason="cublas_gemm: Assertion failed: status != "
        "CUBLAS_STATUS_NOT_SUPPORTED. Unable to find suitable cuBLAS GEMM algorithm",
    )
    return compare_reports(base, cur)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_table_does_not_collapse(width: int) -> None:
    cmp = _comparison()
    lines = render(
        comparison_table(cmp, title="memaudit compare: reports/baseline/h200.json -> current.json", width=width), width
    )
    assert_fits(lines, width)
    for case_id in (TE_FP8, TE_BF16, REF_BF16):
        assert case_id in lines  # the id on a line of its own, not a squeezed column
    assert {"change", "current", "baseline", "delta", "verdict"} <= headers(lines)  # no header folded to 3 columns
    assert_whole(
        lines,
        "+1.5 KiB",
        "4.0 MiB",
        "44.0 MiB",
        "-512 B",
        "operand fc1.input",
        "orientation columnwise",
        "regression",
        "improvement",
        "reports/baseline/h200.json",
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_output_with_rows_and_messages_fits(width: int) -> None:
    console = Console(width=width, record=True, file=io.StringIO())
    print_comparison(console, _comparison(), verbose=True, title="memaudit compare: a.json -> b.json")
    lines = console.export_text().splitlines()
    assert_fits(lines, width)
    assert_whole(
        lines,
        f"rows behind {TE_FP8}",
        "fc1.input data columnwise fp8",
        "(1024, 4096)",
        "(44.0 MiB -> 44.0 MiB; +1536 B)" if width >= 120 else "+1536 B",
        "FAIL: 2 cases regressed",
    )
    assert not any(
        re.search(r"\d$", ln.rstrip()) and re.match(r"^\s*(B|KiB|MiB)\b", nxt)
        for ln, nxt in zip(lines, lines[1:], strict=False)
    ), "a quantity split from its unit"


def test_rows_table_compact_keeps_dtype_and_baseline_shape() -> None:
    cmp = _comparison()
    diff = next(d for d in cmp.cases if d.row_diffs)
    lines = render(rows_table(diff, width=80), 80)
    assert_fits(lines, 80)
    assert_whole(lines, "(1024, 4096) uint8", "+1.5 KiB")
    assert "dtype" not in headers(lines)


# ---- check: verdicts --------------------------------------------------------------------------------
def _verdicts() -> list[Verdict]:
    out = []
    for case in H200.cases[:6]:
        out.append(
            Verdict(case.id, "saved-at-most", "max_bytes", "pass", "<= 96.0 MiB", fmt_bytes(case.totals.saved_bytes))
        )
        out.append(
            Verdict(
                case.id,
                "weights-are-parameters",
                "parameters",
                "fail",
                "every fc*.weight row is a parameter",
                "3 rows are not: #17 fc1.weight[0] data columnwise 4.0 MiB, #19, #21",
            )
        )
    out.append(
        Verdict(H200.cases[9].id, "saved-at-most", "max_bytes", "n/a", "", message="case error: RuntimeError: cuBLAS")
    )
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_verdict_table_fits(width: int) -> None:
    lines = render(render_verdicts(_verdicts(), width=width), width)
    assert_fits(lines, width)
    assert_whole(
        lines, *(c.id for c in H200.cases[:6]), "weights-are-parameters", "<= 96.0 MiB", "56.0 MiB", "fc1.weight[0]"
    )
    if width < COMPACT_WIDTH:
        assert lines.count(H200.cases[0].id) == 1  # compact: one id line above its rules


def test_verdict_table_without_width_is_the_boxed_table() -> None:
    table = render_verdicts(_verdicts())
    assert table.row_count == 13  # type: ignore[attr-defined]


# ---- estimate ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_estimate_tables_fit(width: int) -> None:
    config = resolve("mxfp8", 4096, 1024, 1024, 2)
    case = estimate_config(config, "te-2.20")
    ideal = estimate_config(config, "ideal")
    lines = render(estimate_rows_table(case, "te-2.20", width=width), width)
    assert_fits(lines, width)
    assert_whole(lines, "fc1.weight[0]", "(2048, 1024) uint8", "128.0 KiB", "GroupedTensorStorage.", "fc1.input")
    assert "source" not in headers(lines)  # compact
    table, summary = diff_table(case, ideal, "te-2.20", "ideal", width=width)
    lines = render(table, width) + render(Prose(summary), width)
    assert_fits(lines, width)
    assert_whole(lines, "-2.0 MiB", "-64.0 KiB", "fc2.weight[1]", "saved bytes: te-2.20")


def test_estimate_padding_table_fits_at_80() -> None:
    case = estimate_config(resolve("mxfp8", 256, 96, 96, 1), "te-2.20")
    lines = render(padding_table(case, width=80), 80)
    assert_fits(lines, 80)
    assert_whole(lines, "columnwise_scale_inv", "padding (TE's 128x4")


# ---- the layout itself ---------------------------------------------------------------------------------
def test_wrap_keeps_a_quantity_with_its_unit_and_folds_after_a_dot() -> None:
    text = "te-grouped-mlp/fp8-current/g4/t4096-h1024-f2048/bf16: saved_bytes grew by 1.5 KiB (44.0 MiB -> 44.0 MiB)"
    for width in range(24, 90, 3):
        lines = wrap_text(text, width, indent=2, hang=4).plain.splitlines()
        assert all(len(ln) <= width for ln in lines)
        assert not any(re.search(r"[0-9]$", ln) for ln in lines[:-1]), lines  # never "1.5" | "KiB"
    assert wrap_text("MXFP8TensorStorage._rowwise_scale_inv", 25).plain.splitlines()[0] == "MXFP8TensorStorage."


def test_fit_goes_compact_below_the_threshold_even_when_the_wide_table_would_fit() -> None:
    sheet = Sheet([value_col("a"), value_col("b", "right"), text_col("empty")])
    sheet.add_row("x", "1 B", "")
    assert "┃" in "".join(render(fit(COMPACT_WIDTH, sheet), COMPACT_WIDTH))
    narrow = render(fit(COMPACT_WIDTH - 1, sheet), COMPACT_WIDTH - 1)
    assert "┃" not in "".join(narrow) and "empty" not in headers(narrow)


# ---- the CLI under COLUMNS ---------------------------------------------------------------------------------
def test_make_console_respects_columns_on_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert make_console().width == 80 and make_console(stderr=True).width == 80
    monkeypatch.delenv("COLUMNS")
    assert make_console().width == LOG_WIDTH  # not a terminal (pytest captures): the log width


@pytest.mark.parametrize("width", WIDTHS)
def test_cli_compare_at_columns(width: int, tmp_path: Path) -> None:
    base = write(sample_report(), tmp_path / "base.json")
    cur = write(resize_row(sample_report(), TE_FP8, 0, 1536), tmp_path / "cur.json")
    result = CliRunner().invoke(app, ["compare", str(base), str(cur), "-v"], env={"COLUMNS": str(width)})
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert_fits([ln for ln in lines if not ln.startswith("memaudit compare:")], width)  # the title names the paths
    assert TE_FP8 in lines and "FAIL: 1 case regressed" in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_cli_run_at_columns(width: int) -> None:
    argv = ["run", "-v", "--target", "reference", "--groups", "1,4", "--tokens", "64", "--hidden", "16", "--ffn", "32"]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert_fits(lines, width)
    assert_whole(lines, "reference/bf16/g4/t64-h16-f32/bf16", "fc1.weight[3]", "14.3 KiB", "(64, 64)")
    if width < COMPACT_WIDTH:
        assert "reference/bf16/g4/t64-h16-f32/bf16" in lines  # the summary's id on a line of its own


def test_cli_estimate_at_80() -> None:
    result = CliRunner().invoke(
        app,
        ["estimate", "--recipe", "mxfp8", "--tokens", "4096", "--hidden", "1024", "--groups", "2", "--diff", "ideal"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert_fits(lines, 80)
    assert_whole(lines, "saved bytes: te-2.20 36.6 MiB -> ideal 30.5 MiB", "36.6 MiB")


# ---- 60 columns: every column's values still shown, whole ------------------------------------------
def test_every_column_survives_60_columns() -> None:
    """At 60 columns the compact case and compare tables leave free text too little room; its cells
    go on lines of their own under each row's values (the old layout dropped the case table's
    ``what`` column, cut ``uint8`` to ``uint`` and folded ``change`` to 4 columns)."""
    case = fp8_case()
    lines = render(case_table(case, width=60), 60)
    assert_fits(lines, 60)
    assert_whole(lines, "(1024, 4096) uint8", "fp8 data columnwise", "activation.activation_in", "32.0 MiB")
    lines = render(render_verdicts(_verdicts(), width=60), 60)
    assert_fits(lines, 60)
    assert_whole(
        lines, "<= 96.0 MiB", "56.0 MiB", "weights-are-parameters", "columnwise", "4.0 MiB,"
    )  # the old one cut "96.|0 MiB"
    console = Console(width=60, record=True, file=io.StringIO())
    print_comparison(console, _comparison(), verbose=True, title="a -> b")
    lines = console.export_text().splitlines()
    assert_fits(lines, 60)
    assert_whole(lines, "operand fc1.input", "orientation columnwise", "+1.5 KiB", "regression", "improvement")
    assert not any(
        re.search(r"\d$", ln.rstrip()) and re.match(r"^\s*(B|KiB|MiB)\b", nxt)
        for ln, nxt in zip(lines, lines[1:], strict=False)
    ), "a quantity split from its unit"
