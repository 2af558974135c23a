"""``memaudit run`` through typer's CliRunner: JSON contract, bad usage (exit 2), case errors (exit 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memaudit.cli import app
from memaudit.report import SCHEMA, load_report
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

SHAPE = ["--tokens", "256", "--hidden", "64", "--ffn", "128"]
REF_IDS = [CaseSpec.make(get_target("reference"), "bf16", g, tokens=256, hidden=64, ffn=128).id for g in (1, 4)]


def floats_in(obj: Any, path: str = "$") -> list[str]:
    if isinstance(obj, float):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in floats_in(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in floats_in(v, f"{path}[{i}]")]
    return []


def run_reference(cli_runner: Any, path: Path, *extra: str) -> Any:
    return cli_runner.invoke(
        app, ["run", "--target", "reference", "--groups", "1,4", *SHAPE, "--json", str(path), *extra]
    )


def test_run_writes_the_json_report(cli_runner: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = run_reference(cli_runner, out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["schema"] == SCHEMA == "memaudit.report/3"
    assert (
        [c["id"] for c in data["cases"]]
        == REF_IDS
        == ["reference/bf16/g1/t256-h64-f128/bf16", "reference/bf16/g4/t256-h64-f128/bf16"]
    )
    assert [c["status"] for c in data["cases"]] == ["ok", "ok"]
    # sorted keys, stable layout
    assert text == json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    assert floats_in(data) == []
    # the numbers are the reference model's (see test_reference.py for the derivation)
    e, T, H, F = 2, 256, 64, 128
    for case, G in zip(data["cases"], (1, 4), strict=True):
        assert case["totals"]["rows"] == len(case["rows"]) == 4 * G + 4
        assert case["totals"]["saved_bytes"] == T * H * e + T * 2 * F * e + T * 4 + T * F * e + G * 8
        assert case["totals"]["parameter_bytes"] == 3 * G * H * F * e
        assert sum(case["splits"]) == T and len(case["splits"]) == G
    assert str(out) in result.output


def test_two_runs_are_byte_identical_apart_from_created(cli_runner: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_reference(cli_runner, a).exit_code == 0
    assert run_reference(cli_runner, b).exit_code == 0
    created = re.compile(r'"created": "[^"]*"')
    ta, tb = a.read_text(encoding="utf-8"), b.read_text(encoding="utf-8")
    assert len(created.findall(ta)) == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", json.loads(ta)["created"])
    assert created.sub('"created": ""', ta) == created.sub('"created": ""', tb)


def test_report_round_trips(cli_runner: Any, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert run_reference(cli_runner, out).exit_code == 0
    report = load_report(out)
    assert [c.id for c in report.cases] == REF_IDS
    assert report.to_json() == out.read_text(encoding="utf-8")
    assert report.case(REF_IDS[1]).totals.rows == 20


def test_quiet_prints_only_the_summary(cli_runner: Any, tmp_path: Path) -> None:
    loud = run_reference(cli_runner, tmp_path / "loud.json", "-v")
    default = run_reference(cli_runner, tmp_path / "default.json")
    quiet = run_reference(cli_runner, tmp_path / "quiet.json", "--quiet")
    assert loud.exit_code == quiet.exit_code == default.exit_code == 0
    assert "fc1.weight[0]" in loud.stdout  # per-case row tables, with -v only
    assert "fc1.weight[0]" not in default.stdout
    assert "fc1.weight[0]" not in quiet.stdout
    for case_id in REF_IDS:
        assert case_id in quiet.stdout  # the summary still names every case
    assert len(quiet.stdout) < len(loud.stdout)


BAD_USAGE = [
    (["--groups", "0"], "--groups", "0"),
    (["--tokens", "-3"], "--tokens", "-3"),
    (["--groups", "a"], "--groups", "'a'"),
    (["--groups", "1,,4"], "--groups", "''"),
    (["--hidden", "0"], "--hidden", "0"),
    (["--recipe", "nope"], "--recipe", "'nope'"),
    (["--target", "nosuchmod.x:y"], "--target", "nosuchmod.x:y"),
    (["--target", "custom_factory:nope"], "--target", "'nope'"),
    (["--target", "custom_factory:NOT_CALLABLE"], "--target", "NOT_CALLABLE"),
    (["--target", "bogus"], "--target", "'bogus'"),
    (["--dtype", "fp64"], "--dtype", "'fp64'"),
    (["--tokens", "250"], "--tokens", "250"),  # not a multiple of bf16's alignment (16)
    (["--groups", "8", "--tokens", "16"], "--tokens", "16"),  # too few tokens for 7 live groups
    (["--splits", "128,64", "--groups", "2", "--tokens", "256"], "--splits", "192"),  # sum != tokens
    (["--device", "tpu"], "--device", "'tpu'"),
]


@pytest.mark.parametrize(("args", "flag", "value"), BAD_USAGE, ids=[" ".join(a) for a, _, _ in BAD_USAGE])
def test_bad_usage_exits_2_naming_flag_and_value_and_writes_nothing(
    cli_runner: Any, tmp_path: Path, tests_on_path: Path, args: list[str], flag: str, value: str
) -> None:
    out = tmp_path / "out.json"
    md = tmp_path / "out.md"
    base = {"--target": "reference", "--groups": "1", "--tokens": "256", "--hidden": "64", "--ffn": "128"}
    for k in args[::2]:
        base.pop(k, None)
    argv = ["run", *[x for kv in base.items() for x in kv], *args, "--json", str(out), "--markdown", str(md)]
    result = cli_runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert flag in result.stderr
    assert value in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists() and not md.exists()
    assert list(tmp_path.iterdir()) == []


def test_custom_factory_target_runs(cli_runner: Any, tmp_path: Path, tests_on_path: Path) -> None:
    out = tmp_path / "c.json"
    result = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "custom_factory:make",
            "--groups",
            "1",
            "--tokens",
            "32",
            "--hidden",
            "8",
            "--ffn",
            "16",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    (case,) = load_report(out).cases
    assert case.id == "custom_factory:make/g1/t32-h8-f16/fp32"  # no recipe (it runs none), its real dtype
    assert case.status == "ok"
    # Linear(8,16) -> tanh -> Linear(16,8) on x (32, 8) fp32: exactly these saved tensors
    got = sorted((r.op, r.saved_as, tuple(r.shape), r.bytes, r.is_parameter) for r in case.rows)
    assert got == sorted(
        [
            ("MmBackward0", "_saved_self", (32, 8), 32 * 8 * 4, False),  # x
            ("MmBackward0", "_saved_mat2", (8, 16), 8 * 16 * 4, True),  # up.weight.t()
            ("TanhBackward0", "_saved_result", (32, 16), 32 * 16 * 4, False),
            ("MmBackward0", "_saved_self", (32, 16), 32 * 16 * 4, False),  # tanh output, again
            ("MmBackward0", "_saved_mat2", (16, 8), 16 * 8 * 4, True),  # down.weight.t()
        ]
    )
    t = case.totals
    assert t.parameter_bytes == 2 * 8 * 16 * 4
    assert t.saved_bytes == (32 * 8 + 32 * 16) * 4  # x and the tanh output (saved twice, one storage)


def test_custom_factory_without_arguments(cli_runner: Any, tmp_path: Path, tests_on_path: Path) -> None:
    out = tmp_path / "c.json"
    result = cli_runner.invoke(app, ["run", "--target", "custom_factory:make_no_args", "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (case,) = load_report(out).cases
    assert case.status == "ok" and len(case.rows) == 5


def test_case_error_exits_3_and_other_cases_complete(cli_runner: Any, tmp_path: Path, tests_on_path: Path) -> None:
    out = tmp_path / "e.json"
    result = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "custom_factory:make_failing_for_two_groups",
            "--groups",
            "1,2,3",
            "--tokens",
            "48",
            "--hidden",
            "8",
            "--ffn",
            "16",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 3, result.output
    report = load_report(out)
    assert [(c.groups, c.status) for c in report.cases] == [(1, "ok"), (2, "error"), (3, "ok")]
    failed = report.cases[1]
    assert failed.reason == "RuntimeError: custom model failed on purpose"
    assert failed.rows == [] and failed.totals.rows == 0
    assert report.cases[0].totals.rows == report.cases[2].totals.rows == 5


def test_quantized_recipe_on_reference_is_skipped_not_an_error(cli_runner: Any, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    result = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "reference",
            "--recipe",
            "bf16,mxfp8",
            "--groups",
            "1",
            *SHAPE,
            "--fallback",
            "none",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = load_report(out)
    assert [(c.recipe, c.status) for c in report.cases] == [("bf16", "ok"), ("mxfp8", "skipped")]
    assert "bf16" in (report.cases[1].reason or "")


def test_verify_allocator_without_cuda_is_bad_usage_and_writes_nothing(cli_runner: Any, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "r.json"
    result = cli_runner.invoke(app, ["run", "--target", "reference", "--verify-allocator", "--json", str(out)])
    assert result.exit_code == 2, result.output
    assert "--verify-allocator" in result.output and "CUDA" in result.output
    assert not out.exists()


def test_run_options_of_a_target_come_from_its_declaration(cli_runner: Any, tmp_path: Path) -> None:
    """``run`` has every option a built-in target declares (``Target.flags``), and the value goes to
    that target's ``configure``: the TE target refuses an unknown activation before TE is imported."""
    from memaudit.targets import registry
    from memaudit.te.targets.ep import EPGroupedMLPTarget
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    flags = registry.union_flags(registry.builtin_targets())
    assert {f.name for f in flags} == {f.name for f in (*TEGroupedMLPTarget.flags, *EPGroupedMLPTarget.flags)}
    help_text = cli_runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    for option in ("--fused", "--no-fused", "--single-grouped-weight", "--activation", "--routing"):
        assert option in help_text
    # the target named first drives the options: the TE target's, not the expert-parallel one's
    te_help = cli_runner.invoke(app, ["run", "--target", "te-grouped-mlp", "--help"], env={"COLUMNS": "200"}).output
    assert "--activation" in te_help and "--routing" not in te_help
    ref_help = cli_runner.invoke(app, ["run", "--target=reference", "--help"], env={"COLUMNS": "200"}).output
    assert "--tokens" in ref_help and "--activation" not in ref_help
    out = tmp_path / "r.json"
    result = cli_runner.invoke(app, ["run", "--target", "te-grouped-mlp", "--activation", "gelu", "--json", str(out)])
    assert result.exit_code == 2, result.output
    assert "--activation" in result.output and "gelu" in result.output
    assert not out.exists()


def test_the_expert_parallel_target_takes_the_te_targets_flags_for_its_te_experts(cli_runner: Any) -> None:
    """Its help says the TE target's flags apply to ``--experts te``: they are its options, and with
    the reference experts a TE flag is bad usage naming the flag and what it needs."""
    help_text = cli_runner.invoke(app, ["run", "--target", "ep-grouped-mlp", "--help"]).output
    for flag in ("--kernels", "--arch", "--fused"):
        assert flag in help_text
    out = cli_runner.invoke(app, ["run", "--target", "ep-grouped-mlp", "--kernels", "emulated", "--groups", "2"])
    assert out.exit_code == 2
    assert "--kernels" in out.output and "--experts te" in out.output
