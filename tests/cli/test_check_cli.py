"""``memaudit check REPORT --scenario FILE``: verdicts, exit codes, and every kind of bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from _budget_cases import h200_report
from typer.testing import CliRunner

from memaudit.cli import check as check_cmd
from memaudit.judge import exitcodes
from memaudit.report import Report, load_report, write_report

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests" / "data" / "bad_scenarios").glob("*.toml"))
GROUPED = ROOT / "scenarios" / "grouped_mlp.toml"


def make_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.callback()
    def main() -> None:
        """Test shell."""

    check_cmd.register(app)
    return app


APP = make_app()
RUNNER = CliRunner()


def run(*args: str):
    return RUNNER.invoke(APP, ["check", *map(str, args)])


@pytest.fixture(scope="module")
def reference_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real reference-target report for groups 1 and 4 at tokens 256, hidden 64, ffn 128, fp32."""
    from memaudit.runner import run_matrix
    from memaudit.spec import CaseSpec
    from memaudit.targets.registry import get_target

    specs = [
        CaseSpec.make(get_target("reference"), "bf16", g, tokens=256, hidden=64, ffn=128, dtype="fp32") for g in (1, 4)
    ]
    report = run_matrix(get_target("reference"), specs)
    assert [c.status for c in report.cases] == ["ok", "ok"]
    path = tmp_path_factory.mktemp("check") / "reference.json"
    write_report(report, path)
    return path


def expectations(path: Path) -> dict[str, str]:
    head = {}
    for line in path.read_text().splitlines():
        m = re.match(r"# (reject|key|value): (.*)$", line)
        if m:
            head[m.group(1)] = m.group(2)
    return head


def test_there_are_enough_bad_scenarios() -> None:
    assert len(BAD) >= 20
    for p in BAD:
        assert set(expectations(p)) == {"reject", "key", "value"}, p.name


@pytest.mark.parametrize("bad", BAD, ids=[p.stem for p in BAD])
def test_bad_scenario_is_exit_2_naming_file_key_and_value(bad: Path, reference_report: Path, tmp_path: Path) -> None:
    want = expectations(bad)
    out = tmp_path / "judged.json"
    result = run(reference_report, "--scenario", bad, "--json", out)
    assert result.exit_code == exitcodes.USAGE, (result.stdout, result.stderr)
    err = result.stderr
    assert "Traceback" not in err + result.stdout
    assert err.startswith("error: ")
    assert str(bad) in err
    assert want["key"] in err, err
    assert want["value"] in err, err
    assert not out.exists()


def test_syntax_error_shows_the_line(reference_report: Path) -> None:
    result = run(reference_report, "--scenario", ROOT / "tests/data/bad_scenarios/syntax_error.toml")
    assert "TOML syntax error" in result.stderr


def test_passing_report_exit_0_and_verdict_table(reference_report: Path, tmp_path: Path) -> None:
    scen = tmp_path / "ok.toml"
    scen.write_text(
        (ROOT / "scenarios" / "reference.toml").read_text().replace("groups = [1, 4, 8]", "groups = [1, 4]")
    )
    out = tmp_path / "judged.json"
    result = run(reference_report, "--scenario", scen, "--json", out)
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    assert "budgets" in result.stdout and "weights-are-parameters" in result.stdout
    assert "14 pass, 0 fail, 0 xfail, 0 XPASS, 0 n/a" in result.stdout
    judged = load_report(out)
    assert {b["verdict"] for c in judged.cases for b in c.budgets} == {"pass"}
    assert not load_report(reference_report).cases[0].budgets  # the input is left alone


def test_failing_budget_exit_1_with_rule_numbers_and_rows(reference_report: Path, tmp_path: Path) -> None:
    scen = tmp_path / "tight.toml"
    scen.write_text(
        (ROOT / "tests/data/bad_scenarios/zero_tokens.toml").read_text().replace("tokens = 0", "tokens = 256")
        + '\n# too tight on purpose\n[[budget]]\nname = "tight"\nmax_bytes = "100 KiB"\n'
        + '\n[[budget]]\nname = "no-fc1-output"\nselect = { operand = "fc1.output" }\nforbid = true\n'
    )
    result = run(reference_report, "--scenario", scen)
    assert result.exit_code == exitcodes.FAIL
    text = result.stdout
    assert "FAIL reference/bf16/g4/t256-h64-f128/fp32  tight" in text
    assert "expected <= 100.0 KiB (102400 B) (saved)" in text
    assert "#9  fc1.output  fp32  tensor  -  (256, 256)  float32  256.0 KiB" in text
    assert "no-fc1-output: forbidden rows were saved (1 row)" in text


def _write(report: Report, path: Path) -> Path:
    write_report(report, path)
    return path


def _structural(tmp_path: Path) -> Path:
    """The shipped scenario without its measured per-case ceilings (the synthetic report's bytes differ)."""
    text = GROUPED.read_text()
    path = tmp_path / "structural.toml"
    path.write_text(text[: text.index("# Ceilings at")])
    return path


def test_h200_report_errored_cell_is_exit_3_or_1(tmp_path: Path) -> None:
    report = _write(h200_report(), tmp_path / "h200.json")
    structural = _structural(tmp_path)
    result = run(report, "--scenario", structural)
    assert result.exit_code == exitcodes.CASE_ERROR, result.stdout + result.stderr
    assert "3 case(s) errored" in result.stderr
    assert "(all)" in result.stdout  # a skipped or errored case is one n/a row
    strict = tmp_path / "strict.toml"
    strict.write_text(structural.read_text().replace('on_error = "warn"', 'on_error = "fail"'))
    assert run(report, "--scenario", strict).exit_code == exitcodes.FAIL


def test_xfail_and_xpass(tmp_path: Path) -> None:
    from _budget_cases import blackwell_report

    grouped = _structural(tmp_path)
    xfail = _write(blackwell_report(pruned=False), tmp_path / "pre.json")
    result = run(xfail, "--scenario", grouped)
    assert result.exit_code == exitcodes.OK, result.stdout
    assert "xfail" in result.stdout and "TE PR #3545 not in 2.20.2" in result.stdout
    xpass = _write(blackwell_report(pruned=True), tmp_path / "post.json")
    result = run(xpass, "--scenario", grouped)
    assert result.exit_code == exitcodes.FAIL
    assert "XPASS" in result.stdout and "narrow or remove known_failure" in result.stdout
    none = _write(blackwell_report(pruned=False, te=None), tmp_path / "none.json")
    result = run(none, "--scenario", grouped)
    assert result.exit_code == exitcodes.FAIL
    assert "known_failure entries do not apply" in result.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("{", "not valid JSON"),
        ('{"schema": "other/1", "cases": []}', "unsupported schema"),
    ],
)
def test_bad_report_is_exit_2(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    result = run(path, "--scenario", GROUPED)
    assert result.exit_code == exitcodes.USAGE
    assert str(path) in result.stderr and needle in result.stderr


def test_report_from_another_scenario_is_exit_2(reference_report: Path) -> None:
    result = run(reference_report, "--scenario", GROUPED)
    assert result.exit_code == exitcodes.USAGE
    assert f"{reference_report}: cases: the report has no case te-grouped-mlp/bf16/g1" in result.stderr


def test_help_documents_exit_codes() -> None:
    result = RUNNER.invoke(APP, ["check", "--help"])
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    for text in ("0 every budget passes or is xfail", "1 a budget fails or XPASSes", "2 bad input", "3 a case errored"):
        assert text in flat


def test_registered_in_the_memaudit_cli() -> None:
    from memaudit.cli import app

    result = RUNNER.invoke(app, ["check", "--help"])
    assert result.exit_code == 0 and "--scenario" in result.stdout


def test_judged_json_keeps_the_schema(reference_report: Path, tmp_path: Path) -> None:
    out = tmp_path / "j.json"
    scen = tmp_path / "s.toml"
    scen.write_text(
        (ROOT / "tests/data/bad_scenarios/zero_tokens.toml").read_text().replace("tokens = 0", "tokens = 256")
    )
    assert run(reference_report, "--scenario", scen).exit_code == 1  # no budgets: a check of nothing fails
    assert run(reference_report, "--scenario", scen, "--json", out, "--allow-na").exit_code == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "memaudit.report/3" and all(c["budgets"] == [] for c in data["cases"])


def test_judging_a_report_imports_no_torch() -> None:
    """``check`` runs where only reports are: loading a scenario (its targets' recipes included),
    judging a report and naming paths import neither torch nor TE."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from memaudit.judge.scenario import evaluate, load_scenario\n"
        "from memaudit.report import load_report\n"
        "from memaudit.targets import registry\n"
        "s = load_scenario('scenarios/grouped_mlp.toml')\n"
        "r = load_report('reports/h200/te-grouped-mlp.json')\n"
        "assert evaluate(r, s)\n"
        "assert registry.path_label(r.cases[0]) == 'split-quantize'\n"
        "print('torch' in sys.modules, 'transformer_engine' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split()
    assert out == ["False", "False"]
