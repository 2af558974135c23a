"""``memaudit compare --benchmark-json``: github-action-benchmark's ``customSmallerIsBetter`` input.

The action reads a JSON array of ``{name: string, value: number, unit: string, range?: string,
extra?: string}`` (its ``BenchmarkResult``) and keeps one chart per name. memaudit writes one entry
per ok case of the current report, value = saved bytes, in the current report's case order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _reports import (
    REF_BF16,
    TE_BF16,
    TE_FP8,
    TE_NVFP4,
    copy_report,
    make_case,
    make_report,
    resize_row,
    sample_report,
    write,
)
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.judge.baseline import compare_reports
from memaudit.render.benchmark import benchmark_entries, render_benchmark_json
from memaudit.report import load_report

ROOT = Path(__file__).resolve().parents[2]
H200_BASE = ROOT / "reports" / "baseline" / "h200-te-grouped-mlp.json"
H200 = ROOT / "reports" / "h200" / "te-grouped-mlp.json"


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_benchmark_format(entries: object) -> None:
    """What the action's customSmallerIsBetter parser takes: a list of BenchmarkResult objects."""
    assert isinstance(entries, list) and entries
    for e in entries:
        assert isinstance(e, dict) and set(e) == {"name", "unit", "value", "extra"}, e
        assert isinstance(e["name"], str) and e["name"]
        assert e["unit"] == "bytes"
        assert isinstance(e["value"], int) and not isinstance(e["value"], bool) and e["value"] >= 0
        assert isinstance(e["extra"], str)
    names = [e["name"] for e in entries]
    assert len(set(names)) == len(names)


def test_one_entry_per_ok_case_valued_in_saved_bytes_in_report_order(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = invoke("compare", H200_BASE, H200, "--benchmark-json", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    entries = json.loads(out.read_text(encoding="utf-8"))
    assert_benchmark_format(entries)
    current = load_report(H200)
    ok = [c for c in current.cases if c.status == "ok"]
    assert len(ok) < len(current.cases)  # the H200 report has error (fp8-block) and skipped (mxfp8, nvfp4) cells
    assert [e["name"] for e in entries] == [c.id for c in ok]
    assert [e["value"] for e in entries] == [c.totals.saved_bytes for c in ok]
    first = entries[0]["extra"]
    assert "baseline 58,728,456 B · delta +0 B" in first and "device sm90 · TE 2.20.2" in first


def test_the_same_reports_give_the_same_bytes(tmp_path: Path) -> None:
    for name in ("a.json", "b.json"):
        assert invoke("compare", H200_BASE, H200, "--benchmark-json", tmp_path / name).exit_code == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == render_benchmark_json(
        load_report(H200), compare_reports(load_report(H200_BASE), load_report(H200))
    )


def test_a_regression_is_written_too_with_its_delta(tmp_path: Path) -> None:
    base = sample_report()
    grown = resize_row(base, TE_FP8, 3, 4096)
    out = tmp_path / "bench.json"
    result = invoke(
        "compare", write(base, tmp_path / "base.json"), write(grown, tmp_path / "cur.json"), "--benchmark-json", out
    )
    assert result.exit_code == 1, result.output
    entries = {e["name"]: e for e in json.loads(out.read_text(encoding="utf-8"))}
    assert list(entries) == [TE_FP8, TE_BF16, REF_BF16]  # the skipped NVFP4 cell has no saved bytes
    fp8 = entries[TE_FP8]
    assert fp8["value"] == grown.case(TE_FP8).totals.saved_bytes == base.case(TE_FP8).totals.saved_bytes + 4096
    assert "delta +4,096 B" in fp8["extra"]


def test_new_skipped_emulated_and_incomplete_cases() -> None:
    base = make_report([make_case(TE_BF16), make_case(TE_FP8, status="error", reason="boom")])
    cur = copy_report(
        make_report(
            [
                make_case(TE_BF16),
                make_case(TE_FP8),
                make_case(REF_BF16),
                make_case(TE_NVFP4, status="skipped", reason="needs sm100"),
            ]
        )
    )
    cur.case(REF_BF16).complete = False
    entries = {e["name"]: e["extra"] for e in benchmark_entries(cur, compare_reports(base, cur, allow_incomplete=True))}
    assert list(entries) == [TE_BF16, TE_FP8, REF_BF16]
    assert "baseline: error" in entries[TE_FP8]
    assert "not in the baseline" in entries[REF_BF16] and "incomplete" in entries[REF_BF16]
    assert "incomplete" not in entries[TE_BF16]
    emulated = load_report(ROOT / "reports" / "emulated" / "sm100-fused.json")
    extras = [e["extra"] for e in benchmark_entries(emulated)]
    assert extras and all("emulated sm100" in x and "not in the baseline" in x for x in extras)


def test_nothing_is_written_on_bad_input(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    good = write(sample_report(), tmp_path / "good.json")
    (tmp_path / "trunc.json").write_text(good.read_text(encoding="utf-8")[:100], encoding="utf-8")
    out = tmp_path / "bench.json"
    for argv in (
        [good, tmp_path / "missing.json", "--benchmark-json", out],
        [good, tmp_path / "trunc.json", "--benchmark-json", out],
        [good, good, "--tolerance", "lots", "--benchmark-json", out],
        [good, good, "--benchmark-json", out, "--markdown", out],
        [good, good, "--benchmark-json", tmp_path / "adir"],
        [good, good, "--benchmark-json", "/proc/memaudit-bench.json"],
        [good, good, "--benchmark-json", good.parent / "good.json" / "x.json"],
    ):
        before = sorted(p.name for p in tmp_path.iterdir())
        result = invoke("compare", *argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "Traceback" not in result.output and result.stderr.startswith("error: ")
        assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not out.exists()


def test_the_example_in_docs_ci_is_what_compare_writes() -> None:
    from markdown_it import MarkdownIt

    text = (ROOT / "docs" / "guides" / "ci.md").read_text(encoding="utf-8")
    (block,) = [t.content for t in MarkdownIt().parse(text) if t.type == "fence" and t.info.strip() == "json"]
    documented = json.loads(block)
    entries = benchmark_entries(load_report(H200), compare_reports(load_report(H200_BASE), load_report(H200)))
    assert documented == entries[: len(documented)]


def test_the_workflow_history_job_is_the_one_docs_ci_shows() -> None:
    yaml = pytest.importorskip("yaml")
    from markdown_it import MarkdownIt

    text = (ROOT / "docs" / "guides" / "ci.md").read_text(encoding="utf-8")
    (block,) = [
        t.content
        for t in MarkdownIt().parse(text)
        if t.type == "fence" and t.info.strip() == "yaml" and t.content.startswith("  history:")
    ]
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "memaudit.yml").read_text(encoding="utf-8"))
    assert yaml.safe_load(block) == {"history": workflow["jobs"]["history"]}
    (step,) = [s for s in workflow["jobs"]["history"]["steps"] if "github-action-benchmark" in s.get("uses", "")]
    assert step["with"]["tool"] == "customSmallerIsBetter" and step["with"]["output-file-path"] == "bench.json"
    # the GPU job runs the action (action.yml), whose script writes bench.json into the uploaded folder
    assert any(s.get("uses") == "./" for s in workflow["jobs"]["saved-memory"]["steps"])
    assert '--benchmark-json "$OUT/bench.json"' in (ROOT / "memaudit" / "gate.sh").read_text(encoding="utf-8")
