"""One error style and typer's idioms: choices in --help, bad usage as ``error: WHERE: WHAT``
(typer's own errors and memaudit's alike, exit 2, never a boxed panel), completion, --version."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.cli.root import _complete_recipe, _complete_target, version_line

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "cpu" / "reference.json"
SMALL = ["--target", "reference", "--groups", "1", "--tokens", "64", "--hidden", "16", "--ffn", "32"]


def invoke(*argv: str | Path, columns: int = 200):
    return CliRunner().invoke(app, [str(a) for a in argv], env={"COLUMNS": str(columns)})


@pytest.mark.parametrize(
    ("argv", "choices"),
    [
        (["run", "--help"], ["bf16|fp32", "real|emulated|standins", "sm90|sm100", "swiglu|clamped-qgeglu|srelu"]),
        (
            ["estimate", "--help"],
            [
                "fused|unfused-grouped|unfused-split",
                "te-2.20|pr3545|ideal",
                "sm90|sm100",
                "float32|bfloat16",
                "int64|int32",
            ],
        ),
        (["compare", "--help"], ["increase|change"]),
    ],
)
def test_help_lists_the_choices(argv: list[str], choices: list[str]) -> None:
    result = invoke(*argv, columns=250)
    assert result.exit_code == 0, result.output
    for c in choices:
        assert c in result.stdout, c
    if argv[0] == "run":  # strings with completion: the known values are in the help text (click wraps it)
        flat = " ".join(result.stdout.split())
        assert "reference | ep-grouped-mlp | te-grouped-mlp | PKG.MOD:FACTORY" in flat
        assert "fp8-current" in flat and "[tool.memaudit]" in flat  # not eaten as markup


def assert_error(result, *needles: str, hint: bool = True) -> None:
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert err.startswith("error: "), err
    assert "╭" not in err and "Traceback" not in err + result.stdout and result.stdout == ""
    assert ("\n  see '" in err) == hint, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["run", *SMALL, "--dtype", "fp64"], ["error: --dtype: 'fp64' is not one of 'bf16', 'fp32'"]),
        (["run", *SMALL, "--device", "tpu"], ["error: --device: unknown device 'tpu'"]),
        (["run", "--target", "te-grouped-mlp", "--kernels", "fake"], ["error: --kernels: 'fake' is not one of"]),
        (["run", *SMALL, "--groups", "0"], ["error: --groups: must be >= 1, got 0"]),  # memaudit's own check
        (["run", *SMALL, "--recipe", "[/x]"], ["error: --recipe: unknown recipe '[/x]'"]),  # markup shown, not read
        (["run", "--bogus"], ["error: no such option: --bogus"]),
        (
            ["estimate", "--recipe", "bf16", "--tokens", "64", "--hidden", "64", "--variant", "te-3"],
            ["error: --variant: 'te-3' is not one of 'te-2.20', 'pr3545', 'ideal'"],
        ),
        (["estimate", "--tokens", "64", "--hidden", "64"], ["error: missing option '--recipe'"]),
        (["compare", REPORT, REPORT, "--fail-on", "decrease"], ["error: --fail-on: 'decrease' is not one of"]),
        (["compare", REPORT, REPORT, "--tolerance", "lots"], ["error: --tolerance: malformed byte quantity 'lots'"]),
        (["nope"], ["error: no such command 'nope'"]),
    ],
)
def test_bad_usage_is_one_style(argv: list[str], needles: list[str]) -> None:
    assert_error(invoke(*argv), *needles)


def test_bad_files_are_the_same_style_naming_file_key_and_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads(REPORT.read_text(encoding="utf-8"))
    data["cases"][0]["rows"][0]["bytes"] = "[/x]"
    bad.write_text(json.dumps(data), encoding="utf-8")
    result = invoke("compare", REPORT, bad)
    assert_error(result, str(bad), "bytes", "'[/x]'", hint=False)  # a file's value: no --help hint
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[cases]\ntarget = "reference"\nrecipes = ["bf17"]\ngroups = [1]\ntokens = 64\nhidden = 16\nffn = 32\n',
        encoding="utf-8",
    )
    assert_error(invoke("check", REPORT, "--scenario", scenario), str(scenario), "recipes", "bf17", hint=False)


def test_missing_file() -> None:
    assert_error(invoke("compare", REPORT, "no/such.json"), "no/such.json", hint=False)


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == version_line() + "\n"
    assert re.fullmatch(
        r"memaudit \S+ \(torch (\S+|not installed), transformer-engine (\S+|not installed)\)", result.stdout.strip()
    ), result.stdout


def test_version_without_transformer_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import memaudit.te.machine.environment as env

    monkeypatch.setattr(env, "te_version", lambda **_: None)
    assert version_line().endswith(", transformer-engine not installed)")


def test_completion_lists_recipes_and_targets() -> None:
    class Ctx:
        params: dict = {}

    assert [t for t, _ in _complete_target("")] == [
        "reference",
        "ep-grouped-mlp",
        "te-grouped-mlp",
    ]  # reference, then by name
    assert _complete_recipe(Ctx(), "fp8-") == ["fp8-delayed", "fp8-current", "fp8-block"]  # type: ignore[arg-type]
    assert _complete_recipe(Ctx(), "bf16,nv") == ["bf16,nvfp4"]  # type: ignore[arg-type]
    assert "all" in _complete_recipe(Ctx(), "") and "bf16,all" not in _complete_recipe(Ctx(), "bf16,")  # type: ignore[arg-type]
    assert "bf16,bf16" not in _complete_recipe(Ctx(), "bf16,")  # type: ignore[arg-type]


def test_shell_completion_is_on() -> None:
    result = invoke("--help")
    assert result.exit_code == 0 and "--install-completion" in result.stdout and "--version" in result.stdout
    # what the shell asks for at ``memaudit run --recipe fp8-<TAB>``
    out = CliRunner().invoke(
        app,
        [],
        prog_name="memaudit",
        env={"_MEMAUDIT_COMPLETE": "complete_bash", "COMP_WORDS": "memaudit run --recipe fp8-", "COMP_CWORD": "3"},
    )
    assert "fp8-current" in out.stdout, out.output
