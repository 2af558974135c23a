"""``memaudit compare`` and ``memaudit baseline update`` through typer's CliRunner (exit codes, messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from _reports import (
    REF_BF16,
    TE_BF16,
    TE_FP8,
    copy_report,
    make_case,
    resize_row,
    sample_report,
    write,
)
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from memaudit.cli import baseline as baseline_cmd
from memaudit.cli import compare as compare_cmd
from memaudit.report import load_report


def make_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.callback()
    def main() -> None:
        """Test shell."""

    compare_cmd.register(app)
    baseline_cmd.register(app)
    return app


APP = make_app()


def invoke(*args: str | Path):
    return CliRunner().invoke(APP, [str(a) for a in args])


def assert_clean_usage_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")
    for n in needles:
        assert n in result.stderr, result.stderr


@pytest.fixture
def base_path(tmp_path: Path) -> Path:
    return write(sample_report(), tmp_path / "baseline" / "h200-te-grouped-mlp.json")


def test_identical_reports_exit_0(tmp_path: Path, base_path: Path) -> None:
    cur = write(sample_report(), tmp_path / "current.json")
    r = invoke("compare", base_path, cur)
    assert r.exit_code == 0, r.output
    assert "No changes in 4 cases: 3 ok in both reports" in r.stdout and "over 3 compared cases" in r.stdout
    assert "OK: no regression" in r.stdout
    assert r.stderr == ""


def test_one_byte_growth_exits_1_and_names_the_buffer(tmp_path: Path, base_path: Path) -> None:
    cur = write(resize_row(sample_report(), TE_FP8, 4, +1), tmp_path / "current.json")
    r = invoke("compare", base_path, cur)
    assert r.exit_code == 1, r.output
    assert f"{TE_FP8}: operand fc2.input grew by 1 B" in r.stdout
    assert "FAIL: 1 case regressed" in r.stdout
    assert "rows behind" not in r.stdout
    v = invoke("compare", base_path, cur, "-v")
    assert v.exit_code == 1
    assert f"rows behind {TE_FP8}" in v.stdout and "fc2.input data columnwise fp8" in v.stdout


def test_shrink_exits_0_and_is_listed_as_improvement(tmp_path: Path, base_path: Path) -> None:
    cur = write(resize_row(sample_report(), TE_BF16, 1, -2048), tmp_path / "current.json")
    r = invoke("compare", base_path, cur)
    assert r.exit_code == 0, r.output
    assert "Improvements (3):" in r.stdout
    assert f"{TE_BF16}: operand activation.input shrank by 2.0 KiB" in r.stdout
    assert "OK: no regression, 3 improvements" in r.stdout
    # --fail-on change makes any change fail.
    assert invoke("compare", base_path, cur, "--fail-on", "change").exit_code == 1


def test_tolerance_flag(tmp_path: Path, base_path: Path) -> None:
    cur = write(resize_row(sample_report(), TE_FP8, 4, +100), tmp_path / "current.json")
    assert invoke("compare", base_path, cur, "--tolerance", "99").exit_code == 1
    ok = invoke("compare", base_path, cur, "--tolerance", "1 KiB")
    assert ok.exit_code == 0 and "within tolerance" in ok.stdout
    assert invoke("compare", base_path, cur, "--tolerance", "0.5%").exit_code == 0


def test_new_error_cell_fails(tmp_path: Path, base_path: Path) -> None:
    rep = sample_report()
    rep.cases.append(make_case(REF_BF16.replace("/g1/", "/g8/"), status="error", reason="CUDA out of memory"))
    r = invoke("compare", base_path, write(rep, tmp_path / "current.json"))
    assert r.exit_code == 1
    assert "new case with status error (CUDA out of memory)" in r.stdout


def test_ok_to_error_fails(tmp_path: Path, base_path: Path) -> None:
    rep = sample_report()
    rep.cases[0] = make_case(TE_FP8, status="error", reason="cublas_gemm: Assertion failed")
    r = invoke("compare", base_path, write(rep, tmp_path / "current.json"))
    assert r.exit_code == 1
    assert f"{TE_FP8}: status ok -> error (cublas_gemm: Assertion failed)" in r.stdout


def test_missing_case_fails_unless_allowed(tmp_path: Path, base_path: Path) -> None:
    rep = sample_report()
    rep.cases = rep.cases[1:]
    cur = write(rep, tmp_path / "current.json")
    r = invoke("compare", base_path, cur)
    assert r.exit_code == 1 and "missing" in r.stdout
    assert invoke("compare", base_path, cur, "--allow-missing").exit_code == 0
    assert invoke("compare", base_path, cur, "--allow-missing", "--fail-on", "change").exit_code == 1


def test_compare_of_disjoint_reports_fails(tmp_path: Path, base_path: Path) -> None:
    rep = sample_report()
    for c in rep.cases:
        c.id = c.id + "/renamed"
    cur = write(rep, tmp_path / "current.json")
    md = tmp_path / "comment.md"
    r = invoke("compare", base_path, cur, "--allow-missing", "--markdown", md)
    assert r.exit_code == 1 and "nothing was compared" in r.stdout
    assert (
        "nothing compared" in md.read_text(encoding="utf-8")
        and "✅" not in md.read_text(encoding="utf-8").splitlines()[1]
    )


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ('{"schema": "memaudit.report/1", "cases": [{"id": "x", ', ["not valid JSON", "truncated or corrupted"]),
        ("", ["not valid JSON"]),
        ("\x00\x01garbage", ["not valid JSON"]),
        (
            '{"schema": "memaudit.report/0", "cases": []}',
            ["unsupported schema 'memaudit.report/0'", "memaudit.report/3"],
        ),
        ('{"cases": []}', ["unsupported schema None"]),
        ("[1, 2]", ["expected a JSON object", "list"]),
        ('{"schema": "memaudit.report/1", "cases": [{"id": "x"}]}', ["cases[x]", "missing key(s)"]),
        ('{"schema": "memaudit.report/1", "cases": {}}', ["cases", "expected a list"]),
    ],
)
def test_corrupted_baseline_exits_2(tmp_path: Path, content: str, needles: list[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    cur = write(sample_report(), tmp_path / "current.json")
    md = tmp_path / "comment.md"
    r = invoke("compare", bad, cur, "--markdown", md)
    assert_clean_usage_error(r, str(bad), *needles)
    assert not md.exists()  # nothing written on bad input
    # The same file as the current report is just as bad.
    assert_clean_usage_error(invoke("compare", cur, bad), str(bad), *needles)


def test_missing_file_exits_2(tmp_path: Path, base_path: Path) -> None:
    r = invoke("compare", base_path, tmp_path / "nope.json")
    assert_clean_usage_error(r, "nope.json", "no such file")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tolerance", "lots"], "--tolerance"),
        (["--tolerance", "-5"], "--tolerance"),
        (["--fail-on", "decrease"], "--fail-on"),
        (["--name", "bad name"], "--name"),
    ],
)
def test_bad_flags_exit_2(tmp_path: Path, base_path: Path, flags: list[str], needle: str) -> None:
    cur = write(sample_report(), tmp_path / "current.json")
    assert_clean_usage_error(invoke("compare", base_path, cur, *flags), needle)


def test_environment_mismatch_warns_or_fails_under_strict_env(tmp_path: Path, base_path: Path) -> None:
    rep = sample_report()
    rep.environment.update(transformer_engine="2.21.0", device_class="sm100")
    cur = write(rep, tmp_path / "current.json")
    r = invoke("compare", base_path, cur)
    assert r.exit_code == 0, r.output
    assert (
        "warning: environment differs from the baseline: TransformerEngine version differs: baseline 2.20.2, current "
        "2.21.0" in r.stderr
    )
    assert "device class differs: baseline SM90, current SM100" in r.stderr
    s = invoke("compare", base_path, cur, "--strict-env")
    assert s.exit_code == 1
    assert "error: environment differs" in s.stderr
    assert "environment differs (--strict-env)" in s.stdout


def test_markdown_comment_is_written(tmp_path: Path, base_path: Path) -> None:
    cur = write(resize_row(sample_report(), TE_FP8, 4, +1), tmp_path / "current.json")
    md = tmp_path / "out" / "comment.md"
    r = invoke("compare", base_path, cur, "--markdown", md)
    assert r.exit_code == 1
    assert f"wrote {md}" in r.stdout
    text = md.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "<!-- memaudit:h200-te-grouped-mlp -->"  # default name: the baseline's stem
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    # the regressed case's table of changed buffers, then the unchanged cases' table (collapsed)
    assert sum(t.type == "table_open" for t in tokens) == 2
    assert sum(t.type == "html_block" and t.content.startswith("<details") for t in tokens) == 2
    assert text.index("### ❌ Regressions") < text.index("<summary>Unchanged: 3 cases")
    named = invoke("compare", base_path, cur, "--markdown", md, "--name", "gate.cpu")
    assert named.exit_code == 1
    assert md.read_text(encoding="utf-8").startswith("<!-- memaudit:gate.cpu -->\n❌")


def test_default_comment_name() -> None:
    assert compare_cmd.default_comment_name(Path("reports/baseline/h200-te-grouped-mlp.json")) == "h200-te-grouped-mlp"
    assert compare_cmd.default_comment_name(Path("my base--line.json")) == "my-base-line"
    assert compare_cmd.default_comment_name(Path("---.json")) == "default"


# ------------------------------------------------------------------------------------------------
# baseline update


def test_baseline_update_writes_keeps_and_prunes(tmp_path: Path) -> None:
    into = tmp_path / "reports" / "baseline" / "gate.json"
    first = write(sample_report(), tmp_path / "first.json")
    r = invoke("baseline", "update", first, "--into", into)
    assert r.exit_code == 0, r.output
    assert r.stdout.count("added ") == 4 and f"wrote {into} (4 cases)" in r.stdout
    assert load_report(into).to_dict() == sample_report().to_dict()

    again = invoke("baseline", "update", first, "--into", into)
    assert again.exit_code == 0 and "4 cases unchanged" in again.stdout and "up to date; not rewritten" in again.stdout

    rep = resize_row(sample_report(), TE_FP8, 4, +1)
    rep.cases = [c for c in rep.cases if c.id != TE_BF16]
    second = write(rep, tmp_path / "second.json")
    r = invoke("baseline", "update", second, "--into", into)
    assert r.exit_code == 0, r.output
    assert f"updated {TE_FP8}: saved 44.0 MiB -> 44.0 MiB (+1 B)" in r.stdout
    assert f"kept {TE_BF16}; not in the current report" in r.stdout
    merged = load_report(into)
    assert [c.id for c in merged.cases] == [c.id for c in sample_report().cases]
    assert (
        invoke("compare", into, second, "--allow-missing").exit_code == 0
    )  # the refreshed baseline accepts the change

    r = invoke("baseline", "update", second, "--into", into, "--prune")
    assert r.exit_code == 0 and f"removed {TE_BF16}" in r.stdout
    assert TE_BF16 not in [c.id for c in load_report(into).cases]
    assert not list(into.parent.glob("*.tmp"))  # the atomic write left no temp file


def test_baseline_update_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(sample_report(), tmp_path / "h200-te-grouped-mlp.json")
    r = invoke("baseline", "update", "h200-te-grouped-mlp.json")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "reports" / "baseline" / "h200-te-grouped-mlp.json").is_file()


def test_baseline_update_refuses_another_environment_unless_forced(tmp_path: Path, base_path: Path) -> None:
    rep = copy_report(sample_report())
    rep.environment["torch"] = "2.15.0"
    rep.cases = rep.cases[:1]
    before = base_path.read_bytes()
    r = invoke("baseline", "update", write(rep, tmp_path / "cur.json"), "--into", base_path)
    assert r.exit_code == 2 and "another environment" in r.stderr and "--force" in r.stderr
    assert base_path.read_bytes() == before
    r = invoke("baseline", "update", tmp_path / "cur.json", "--into", base_path, "--force")
    assert r.exit_code == 0
    assert "torch version differs: baseline 2.14.1, current 2.15.0" in r.stderr
    assert "3 kept case(s) were measured in the old environment" in r.stderr
    assert load_report(base_path).environment["torch"] == "2.15.0"


def test_baseline_update_refuses_a_corrupted_baseline(tmp_path: Path) -> None:
    into = tmp_path / "gate.json"
    into.write_text('{"schema": "memaudit.report/1", "cases": [', encoding="utf-8")
    before = into.read_bytes()
    r = invoke("baseline", "update", write(sample_report(), tmp_path / "cur.json"), "--into", into)
    assert_clean_usage_error(r, str(into), "not valid JSON", "left as it is")
    assert into.read_bytes() == before


def test_baseline_update_bad_current(tmp_path: Path) -> None:
    into = tmp_path / "gate.json"
    assert_clean_usage_error(invoke("baseline", "update", tmp_path / "missing.json", "--into", into), "no such file")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something.else/2", "cases": []}), encoding="utf-8")
    assert_clean_usage_error(
        invoke("baseline", "update", other, "--into", into), "unsupported schema 'something.else/2'"
    )
    assert not into.exists()


def test_concurrent_baseline_updates_keep_every_case(tmp_path: Path) -> None:
    """Two processes updating one baseline at once: the folder lock makes them merge in turn."""
    import subprocess
    import sys

    into = tmp_path / "gate.json"
    reps = []
    for i, case in enumerate(sample_report().cases[:2]):
        rep = sample_report()
        rep.cases = [case]
        reps.append(write(rep, tmp_path / f"r{i}.json"))
    for _ in range(5):
        into.unlink(missing_ok=True)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import memaudit.cli as c; c.main()",
                    "baseline",
                    "update",
                    str(r),
                    "--into",
                    str(into),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for r in reps
        ]
        assert [p.wait() for p in procs] == [0, 0]
        assert len(load_report(into).cases) == 2
