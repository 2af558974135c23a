"""``memaudit run --unread`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.cli.root import UnreadMethod
from memaudit.judge import exitcodes
from memaudit.report import UNREAD_CHOICES, load_report

runner = CliRunner()
WASTE = [
    "--target",
    "tests.custom_factory:make_wasteful",
    "--tokens",
    "64",
    "--hidden",
    "32",
    "--ffn",
    "48",
    "--groups",
    "1",
]


def test_the_methods_agree_with_the_analysis() -> None:
    import memaudit.unread

    assert tuple(memaudit.unread.METHODS) == UNREAD_CHOICES == tuple(m.value for m in UnreadMethod)


def test_reference_target_has_nothing_unread(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", "--target", "reference", "--groups", "1,4", "--unread", "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    for case in load_report(out).cases:
        assert case.unread is not None and case.unread.methods == ["observed"]
        assert case.totals.unread_bytes == 0
        assert all(r.read in ("read", "unread", "unknown") for r in case.rows)


@pytest.mark.parametrize("method", ["observed", "poisoned", "both"])
def test_the_planted_waste_is_found_with_its_bytes(tmp_path: Path, method: str) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", *WASTE, "--unread", "--unread-method", method, "--json", str(out)])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    [case] = load_report(out).cases
    assert case.totals.unread_bytes == 64 * 32 * 4
    assert "saved for backward, never read" in result.stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["cases"][0]["totals"]["unread_bytes"] == 8192


def test_max_unread_bytes_0_fails_on_the_waste(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[cases]\ntarget = "tests.custom_factory:make_wasteful"\nrecipes = "bf16"\ngroups = [1]\n'
        "tokens = 64\nhidden = 32\nffn = 48\nunread = true\n\n"
        '[[budget]]\nname = "nothing unread"\nmax_unread_bytes = 0\n',
        encoding="utf-8",
    )
    result = runner.invoke(
        app, ["run", "--scenario", str(scenario), "--allow-target", "tests.custom_factory:make_wasteful"]
    )
    assert result.exit_code == exitcodes.FAIL, result.stdout + result.stderr
    assert "saved for backward and never read" in result.stdout


def test_te_grouped_mlp_nvfp4_emulated(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "run",
            "--target",
            "te-grouped-mlp",
            "--kernels",
            "emulated",
            "--arch",
            "sm100",
            "--recipe",
            "nvfp4",
            "--groups",
            "8",
            "--unread",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code in (exitcodes.OK, exitcodes.CASE_ERROR), result.stdout + result.stderr
    for case in load_report(out).cases:
        if case.status == "ok":
            assert case.unread is not None and case.totals.unread_bytes is not None
