"""The reports measured on the H200 and the committed baselines, judged on CPU in CI.

These pin what the H200 measured (reports/h200/) against the shipped scenario, the estimator and
the baselines, so a change to any of them that disagrees with the measurement fails here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.judge import exitcodes
from memaudit.report import load_report
from memaudit.te.estimate.expected import attach_expected

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "h200"
BASELINE = ROOT / "reports" / "baseline"
runner = CliRunner()


def test_h200_matrix_cells_are_what_the_issue_says() -> None:
    report = load_report(H200 / "te-grouped-mlp.json")
    assert report.environment["device_class"] == "sm90"
    assert report.environment["transformer_engine"] == "2.20.2"
    by_recipe: dict[str, set[str]] = {}
    for case in report.cases:
        by_recipe.setdefault(case.recipe, set()).add(case.status)
    assert by_recipe["bf16"] == by_recipe["fp8-delayed"] == by_recipe["fp8-current"] == {"ok"}
    assert by_recipe["fp8-block"] == {"error"}
    assert by_recipe["mxfp8"] == by_recipe["nvfp4"] == {"skipped"}
    for case in report.cases:
        if case.recipe in ("mxfp8", "nvfp4"):
            assert (
                case.reason == f"Device compute capability 10.0 or higher required for {case.recipe.upper()} execution."
            )
        if case.recipe == "fp8-block":
            assert "CUBLAS_STATUS_NOT_SUPPORTED" in (case.reason or "")
        for row in case.rows:  # every row of an ok cell is classified
            assert row.operand, row
            assert not (row.container and row.kind == "tensor"), row


@pytest.mark.parametrize("name", ["te-grouped-mlp.json", "expected-t4096.json", "expected-t2048.json"])
def test_estimator_predicts_every_measured_h200_row(name: str) -> None:
    report = load_report(H200 / name)
    covered = 0
    for case in report.cases:
        case.rows = [dataclasses.replace(row, expected_bytes=None) for row in case.rows]
        case.warnings = []
        mismatches = attach_expected(case)
        if mismatches is None:
            continue
        covered += 1
        assert mismatches == 0, case.warnings
        assert all(r.expected_bytes == r.bytes for r in case.rows)
    assert covered >= 9


def test_check_on_cpu_gives_the_h200_verdicts(tmp_path: Path) -> None:
    report = load_report(H200 / "scenario.json")
    stored = {(c.id, b["rule"]): b["verdict"] for c in report.cases for b in c.budgets}
    assert stored and "fail" not in stored.values()
    out = tmp_path / "judged.json"
    result = runner.invoke(
        app,
        [
            "check",
            str(H200 / "scenario.json"),
            "--scenario",
            str(ROOT / "scenarios" / "grouped_mlp.toml"),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == exitcodes.CASE_ERROR, result.stdout  # fp8-block errors, nothing fails
    judged = load_report(out)
    again = {(c.id, b["rule"]): b["verdict"] for c in judged.cases for b in c.budgets}
    assert again == stored


def test_h200_baseline_compares_clean_against_the_measurement() -> None:
    for current in (BASELINE / "h200-te-grouped-mlp.json", H200 / "te-grouped-mlp.json", H200 / "scenario.json"):
        result = runner.invoke(app, ["compare", str(BASELINE / "h200-te-grouped-mlp.json"), str(current)])
        assert result.exit_code == exitcodes.OK, result.stdout + result.stderr


def test_cpu_reference_run_matches_its_baseline(tmp_path: Path) -> None:
    """The CPU gate: a fresh reference run must save exactly what the committed baseline says."""
    out = tmp_path / "reference.json"
    result = runner.invoke(app, ["run", "--target", "reference", "--quiet", "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.stdout
    result = runner.invoke(app, ["compare", str(BASELINE / "cpu-reference.json"), str(out), "--fail-on", "change"])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
