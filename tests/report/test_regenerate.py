"""The committed reports come out byte-identical from today's code: a guard for behaviour-preserving refactors.

* Every ``memaudit.report/*`` file under reports/ round-trips through ``load_report`` and
  ``Report.to_json`` (what ``write_report`` and ``baseline update`` write).
* ``reports/cpu/reference.json`` is re-run through the CLI (``memaudit run --target reference``) and
  ``reports/baseline/cpu-reference.json`` rebuilt from it (``memaudit baseline update``).
* On the H200 reports, the estimator's ``expected_bytes`` (``run --expected``) and the budget
  verdicts (``memaudit check``) are recomputed on CPU.

Regenerated files are compared byte for byte except ``created`` and ``environment`` (see IGNORED).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.report import load_report, write_report
from memaudit.te.estimate.expected import attach_expected

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
CPU_REPORT = REPORTS / "cpu" / "reference.json"
CPU_BASELINE = REPORTS / "baseline" / "cpu-reference.json"
SCENARIO_REPORT = REPORTS / "h200" / "scenario.json"
EXPECTED_REPORTS = ("reports/h200/expected-t4096.json", "reports/h200/expected-t2048.json")

KNOWN = {
    "reports/cpu/reference.json",
    "reports/baseline/cpu-reference.json",
    "reports/baseline/h200-te-grouped-mlp.json",
    "reports/h200/te-grouped-mlp.json",
    "reports/h200/scenario.json",
    "reports/h200/expected-t4096.json",
    "reports/h200/expected-t2048.json",
    "reports/h200/verify-allocator-te.json",
}

# Top-level keys left out of the regeneration comparisons (the round trip compares them exactly):
# ``created`` is the wall-clock time of the run; ``environment`` describes the machine that ran it
# (python, torch, CUDA and TE versions, device), and its TE keys (cublaslt, cudnn_frontend) appear
# only when something in this process imported transformer_engine.pytorch first, e.g. the TE tests.
IGNORED = ("created", "environment")

runner = CliRunner()


def _report_files() -> list[str]:
    out = []
    for path in sorted(REPORTS.glob("**/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and str(data.get("schema", "")).startswith("memaudit.report/"):
            out.append(path.relative_to(ROOT).as_posix())
    return out


REPORT_FILES = _report_files()


def canonical(data: Any) -> str:
    """The writer's documented format: sorted keys, indent 1, UTF-8, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def json_diff(a: Any, b: Any, where: str = "$") -> list[str]:
    """Every JSON path where ``a`` and ``b`` differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a.keys() | b.keys()):
            if k not in a:
                out.append(f"{where}.{k}: added {b[k]!r}")
            elif k not in b:
                out.append(f"{where}.{k}: removed {a[k]!r}")
            else:
                out += json_diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_diff(x, y, f"{where}[{i}]")]
    if a != b or type(a) is not type(b):
        return [f"{where}: {a!r} -> {b!r}"]
    return []


def assert_same_text(committed: bytes, produced: str, name: str) -> None:
    """``produced`` must be ``committed`` byte for byte; a failure lists the JSON paths that differ."""
    if produced.encode("utf-8") == committed:
        return
    try:
        diffs = json_diff(json.loads(committed), json.loads(produced))
    except json.JSONDecodeError as exc:
        diffs = [f"not JSON: {exc}"]
    shown = "\n  ".join(diffs[:20]) or "same JSON, different bytes (format)"
    pytest.fail(f"{name}: {len(diffs)} difference(s), committed -> produced:\n  {shown}", pytrace=False)


def assert_regenerated(committed: bytes, produced: str, name: str) -> None:
    """``produced`` equals ``committed`` byte for byte once the IGNORED keys are taken from ``committed``."""
    regen = json.loads(produced)
    assert produced == canonical(regen), f"{name}: regenerated file is not in the writer's format"
    base = json.loads(committed)
    assert set(IGNORED) <= base.keys() and set(IGNORED) <= regen.keys(), name
    regen.update({k: base[k] for k in IGNORED})
    assert_same_text(committed, canonical(regen), name)


def cli(*args: str) -> str:
    """Run ``memaudit ARGS`` in-process; return stdout (the exit code must be 0)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def fresh_cpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``memaudit run --target reference --json OUT``: the command reports/cpu/reference.json came from.

    The reference target's defaults (recipe bf16, groups 1,4,8, T=1024, H=256, F=512, bf16, CPU)
    are exactly the committed file's three case ids; ``--quiet`` only silences the tables.
    """
    out = tmp_path_factory.mktemp("regen") / "reference.json"
    cli("run", "--target", "reference", "--quiet", "--json", str(out))
    return out


def test_glob_finds_the_known_reports() -> None:
    assert KNOWN <= set(REPORT_FILES), KNOWN - set(REPORT_FILES)


@pytest.mark.parametrize("name", REPORT_FILES)
def test_round_trip_is_byte_identical(name: str) -> None:
    path = ROOT / name
    assert_same_text(path.read_bytes(), load_report(path).to_json(), name)


def test_cpu_reference_regenerates(fresh_cpu_report: Path) -> None:
    produced = fresh_cpu_report.read_text(encoding="utf-8")
    assert_regenerated(CPU_REPORT.read_bytes(), produced, "reports/cpu/reference.json")
    committed_env = json.loads(CPU_REPORT.read_bytes())["environment"]
    assert committed_env.keys() <= json.loads(produced)["environment"].keys()


def test_cpu_baseline_regenerates(fresh_cpu_report: Path, tmp_path: Path) -> None:
    """``memaudit baseline update reference.json --into cpu-reference.json``, written from nothing."""
    out = tmp_path / "cpu-reference.json"
    cli("baseline", "update", str(fresh_cpu_report), "--into", str(out))
    assert_regenerated(
        CPU_BASELINE.read_bytes(), out.read_text(encoding="utf-8"), "reports/baseline/cpu-reference.json"
    )


def test_cpu_baseline_refresh_leaves_it_unchanged(fresh_cpu_report: Path, tmp_path: Path) -> None:
    """Refreshing a copy of the baseline from the fresh run finds every case unchanged and writes nothing.

    The fresh report takes the committed environment first (see IGNORED): ``baseline update``
    rewrites the file whenever the environment differs.
    """
    current = load_report(fresh_cpu_report)
    current.environment = load_report(CPU_BASELINE).environment
    write_report(current, tmp_path / "reference.json")
    into = tmp_path / "cpu-reference.json"
    shutil.copyfile(CPU_BASELINE, into)
    stdout = cli("baseline", "update", str(tmp_path / "reference.json"), "--into", str(into))
    assert "3 cases unchanged" in stdout and "is up to date; not rewritten" in stdout, stdout
    assert_same_text(CPU_BASELINE.read_bytes(), into.read_text(encoding="utf-8"), "reports/baseline/cpu-reference.json")


def regenerate_expected(path: Path) -> str:
    """What ``run --expected`` adds, recomputed: clear every ``expected_bytes``, attach the estimate again."""
    report = load_report(path)
    for case in report.cases:
        case.rows = [dataclasses.replace(row, expected_bytes=None) for row in case.rows]
        attach_expected(case)
    return report.to_json()


@pytest.mark.parametrize("name", EXPECTED_REPORTS)
def test_estimator_expected_bytes_regenerate(name: str) -> None:
    path = ROOT / name
    assert_same_text(path.read_bytes(), regenerate_expected(path), name)


def test_scenario_verdicts_regenerate(tmp_path: Path) -> None:
    """``memaudit check scenario.json --scenario scenarios/grouped_mlp.toml --json OUT``, from a copy with no
    verdicts."""
    data = json.loads(SCENARIO_REPORT.read_bytes())
    assert any(c["budgets"] for c in data["cases"])
    for case in data["cases"]:
        case["budgets"] = []
    stripped = tmp_path / "unjudged.json"
    stripped.write_text(canonical(data), encoding="utf-8")
    out = tmp_path / "scenario.json"
    result = runner.invoke(
        app, ["check", str(stripped), "--scenario", str(ROOT / "scenarios" / "grouped_mlp.toml"), "--json", str(out)]
    )
    assert result.exit_code == exitcodes.CASE_ERROR, result.stdout  # fp8-block cells error, no budget fails
    assert_same_text(SCENARIO_REPORT.read_bytes(), out.read_text(encoding="utf-8"), "reports/h200/scenario.json")


# The comparisons above can fail: each is fed a copy with one change, made in tmp_path.


def _flip_digit(text: str, marker: str) -> str:
    """``text`` with the first digit after the first ``marker`` changed (one byte)."""
    at = text.index(marker) + len(marker)
    while not text[at].isdigit():
        at += 1
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


def test_round_trip_detects_one_flipped_byte(tmp_path: Path) -> None:
    copy = tmp_path / "reference.json"
    text = CPU_REPORT.read_text(encoding="utf-8")
    copy.write_text(_flip_digit(text, '"shape": '), encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"shape"):
        # the committed bytes against what the changed copy loads and writes back
        assert_same_text(CPU_REPORT.read_bytes(), load_report(copy).to_json(), "copy")
    # a flipped byte count no longer even loads: the totals disagree with the rows
    copy.write_text(_flip_digit(text, '"storage_bytes": '), encoding="utf-8")
    with pytest.raises(UsageError, match=r"rows\[\d+\]\.storage_bytes|totals\.(physical|saved|logical)_bytes"):
        load_report(copy)
    # and a copy whose bytes are not what the writer writes (one more space) fails its own round trip
    copy.write_text(text.replace('"bytes": ', '"bytes":  ', 1), encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match="format"):
        assert_same_text(copy.read_bytes(), load_report(copy).to_json(), "copy")


def test_regeneration_detects_a_changed_row_but_not_created(fresh_cpu_report: Path, tmp_path: Path) -> None:
    produced = fresh_cpu_report.read_text(encoding="utf-8")
    committed = CPU_REPORT.read_text(encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"rows\[\d+\]\.bytes"):
        assert_regenerated(_flip_digit(committed, '"bytes": ').encode("utf-8"), produced, "copy")
    with pytest.raises(pytest.fail.Exception, match=r"\$\.memaudit"):
        old = '"memaudit": "0.1.0"'
        at = committed.rindex(old)  # the top-level key; the first one is inside environment (ignored)
        changed = committed[:at] + '"memaudit": "0.1.1"' + committed[at + len(old) :]
        assert_regenerated(changed.encode("utf-8"), produced, "copy")
    moved = json.loads(committed)
    moved["created"] = "2000-01-01T00:00:00Z"
    assert_regenerated(canonical(moved).encode("utf-8"), produced, "copy")  # only created differs: passes


def test_baseline_refresh_detects_a_changed_row(fresh_cpu_report: Path, tmp_path: Path) -> None:
    current = load_report(fresh_cpu_report)
    current.environment = load_report(CPU_BASELINE).environment
    write_report(current, tmp_path / "reference.json")
    into = tmp_path / "cpu-reference.json"
    into.write_text(_flip_digit(CPU_BASELINE.read_text(encoding="utf-8"), '"shape": '), encoding="utf-8")
    stdout = cli("baseline", "update", str(tmp_path / "reference.json"), "--into", str(into))
    assert "updated reference/bf16/g1/" in stdout and "not rewritten" not in stdout, stdout


def test_expected_regeneration_detects_a_changed_estimate(tmp_path: Path) -> None:
    path = ROOT / EXPECTED_REPORTS[0]
    copy = tmp_path / path.name
    copy.write_text(_flip_digit(path.read_text(encoding="utf-8"), '"expected_bytes": '), encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"expected_bytes"):
        assert_same_text(copy.read_bytes(), regenerate_expected(copy), "copy")
