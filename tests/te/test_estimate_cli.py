"""``memaudit estimate`` through typer's CliRunner, on a tiny app built with ``register()``."""

from __future__ import annotations

import json
import sys

import pytest
import typer
from typer.testing import CliRunner

from memaudit.report import load_report
from memaudit.te.commands import estimate as estimate_cmd

MiB = 1024**2


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:
        """test app"""

    estimate_cmd.register(app)
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, app: typer.Typer, *args: str):
    return runner.invoke(app, ["estimate", *args], env={"COLUMNS": "240"})


PR_ARGS = ["--recipe", "nvfp4", "--tokens", "82944", "--hidden", "3072", "--groups", "1"]


def test_pr3545_command_shows_rows_and_the_difference(runner, app, tmp_path) -> None:
    res = invoke(runner, app, *PR_ARGS, "--variant", "te-2.20", "--diff", "pr3545", "--json", str(tmp_path / "a.json"))
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "GroupedTensor.rowwise_data" in out and "121.5 MiB" in out and "15.2 MiB" in out
    assert "te-2.20 -> pr3545" in out and "-121.5 MiB" in out and "-15.2 MiB" in out
    assert "saved bytes: te-2.20" in out
    report = load_report(tmp_path / "a.json")
    (case,) = report.cases
    assert case.options == {"estimate": True, "variant": "te-2.20", "path": "fused", "arch": "sm100", "te": "2.20.2"}
    assert case.path["estimated"] is True and case.path["name"] == "fused" and case.path["fused"] is True
    data = [r for r in case.rows if r.operand == "fc1.input" and r.slot == "rowwise_data"]
    assert data[0].bytes // MiB == 121


def test_compare_works_on_two_variants(runner, app, tmp_path) -> None:
    from memaudit.judge.baseline import compare_reports

    for v in ("te-2.20", "pr3545"):
        res = invoke(runner, app, *PR_ARGS, "--variant", v, "--quiet", "--json", str(tmp_path / f"{v}.json"))
        assert res.exit_code == 0, res.stderr
    a, b = load_report(tmp_path / "te-2.20.json"), load_report(tmp_path / "pr3545.json")
    cmp = compare_reports(a, b)
    assert not cmp.regressed and cmp.saved_delta == b.cases[0].totals.saved_bytes - a.cases[0].totals.saved_bytes < 0
    assert compare_reports(b, a).regressed  # going back to te-2.20 is a regression


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--recipe", "nvfp4", "--tokens", "1000", "--hidden", "3072"], "--tokens"),
        (["--recipe", "nvfp5", "--tokens", "1024", "--hidden", "3072"], "--recipe"),
        (["--recipe", "bf16", "--tokens", "1024", "--hidden", "3072", "--path", "fused"], "--path"),
        (["--recipe", "bf16", "--tokens", "1024", "--hidden", "3072", "--path", "nope"], "--path"),
        (["--recipe", "bf16", "--tokens", "1024", "--hidden", "3072", "--variant", "te-3"], "--variant"),
        (["--recipe", "bf16", "--tokens", "1024", "--hidden", "3072", "--diff", "x"], "--diff"),
        (["--recipe", "mxfp8", "--tokens", "1024", "--hidden", "3000"], "--hidden"),
        (["--recipe", "mxfp8", "--tokens", "1024", "--hidden", "3072", "--arch", "sm90"], "--arch"),
        (["--recipe", "bf16", "--tokens", "1:64:x1", "--hidden", "64"], "--tokens"),
        (["--recipe", "bf16", "--tokens", "1024,2048", "--hidden", "64", "--splits", "512,512"], "--splits"),
        (
            ["--recipe", "bf16", "--tokens", "1024", "--hidden", "64", "--groups", "2", "--splits", "1000,24"],
            "--splits",
        ),
        (["--recipe", "nvfp4", "--tokens", "100:120:+10", "--hidden", "3072"], "--tokens"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(runner, app, tmp_path, args, flag) -> None:
    out = tmp_path / "never.json"
    res = invoke(runner, app, *args, "--json", str(out))
    assert res.exit_code == 2, res.stdout
    assert flag in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert not out.exists()


def test_plot_without_matplotlib_is_a_clear_usage_error(runner, app, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = invoke(
        runner,
        app,
        "--recipe",
        "all",
        "--tokens",
        "1024:4096:x2",
        "--hidden",
        "1024",
        "--plot",
        str(tmp_path / "p.svg"),
    )
    assert res.exit_code == 2
    assert "--plot" in res.stderr and "torch-memaudit[plot]" in res.stderr
    assert not (tmp_path / "p.svg").exists()


def test_plot_with_matplotlib(runner, app, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    res = invoke(
        runner,
        app,
        "--recipe",
        "all",
        "--tokens",
        "1024:131072:x2",
        "--groups",
        "1,8,64",
        "--hidden",
        "3072",
        "--ffn",
        "1536",
        "--plot",
        str(tmp_path / "saved.svg"),
        "--quiet",
    )
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "saved.svg").read_text().lstrip().startswith("<?xml")


def test_sweep_prints_one_line_per_point_and_skips_invalid_ones(runner, app, tmp_path) -> None:
    res = invoke(
        runner,
        app,
        "--recipe",
        "bf16,nvfp4",
        "--tokens",
        "1024:4096:x2",
        "--groups",
        "1,64",
        "--hidden",
        "1024",
        "--ffn",
        "512",
        "--diff",
        "ideal",
        "--json",
        str(tmp_path / "s.json"),
        "--markdown",
        str(tmp_path / "s.md"),
    )
    assert res.exit_code == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("bf16", "nvfp4"))]
    assert len(lines) == 2 * 3 * 2
    skipped = [ln for ln in lines if "skipped" in ln]
    # nvfp4 needs 128 tokens per live group: 64 groups (63 live) do not fit in 1024..4096 tokens
    assert len(skipped) == 3 and all(ln.startswith("nvfp4") and "--tokens" in ln for ln in skipped)
    report = load_report(tmp_path / "s.json")
    assert len(report.cases) == 12
    assert sorted(c.status for c in report.cases).count("skipped") == 3
    assert len({c.id for c in report.cases}) == 12
    md = (tmp_path / "s.md").read_text()
    assert md.count("\n| bf16 |") == 6 and "saved ideal" in md


def test_single_config_markdown_has_the_diff(runner, app, tmp_path) -> None:
    md_path = tmp_path / "e.md"
    res = invoke(runner, app, *PR_ARGS, "--diff", "pr3545", "--markdown", str(md_path), "--quiet")
    assert res.exit_code == 0, res.stderr
    md = md_path.read_text()
    assert "### te-2.20 -> pr3545" in md and "rowwise_data" in md and "grouped_mlp.py:1934" in md


def test_split_path_default_for_fp8(runner, app, tmp_path) -> None:
    res = invoke(
        runner,
        app,
        "--recipe",
        "fp8-current",
        "--tokens",
        "1024",
        "--hidden",
        "256",
        "--ffn",
        "128",
        "--groups",
        "4",
        "--json",
        str(tmp_path / "f.json"),
    )
    assert res.exit_code == 0, res.stderr
    case = load_report(tmp_path / "f.json").cases[0]
    assert case.path["name"] == "unfused-split" and case.path["fused"] is False and case.options["arch"] == "sm90"
    assert "Float8TensorStorage._transpose" in res.stdout
    assert json.loads((tmp_path / "f.json").read_text())["schema"] == "memaudit.report/3"


def test_padding_table_lists_padded_scales(runner, app) -> None:
    res = invoke(runner, app, "--recipe", "mxfp8", "--tokens", "256", "--hidden", "96", "--ffn", "96")
    assert res.exit_code == 0, res.stderr
    assert "padding (TE's 128x4" in res.stdout and "columnwise_scale_inv" in res.stdout
