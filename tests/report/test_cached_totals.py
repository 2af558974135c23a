"""Cached copies (``Row.cached``, ``Totals.cached_bytes``) without TE: counted apart as parameters
are, read back strictly, shown beside parameters, noted (not gated) by compare."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from memaudit.errors import UsageError
from memaudit.judge.baseline import compare_reports
from memaudit.render.markdown import render_markdown
from memaudit.render.tables import summary_table, totals_line
from memaudit.report import CaseReport, Report, Row, compute_totals, replace_row
from memaudit.report.codec import validate_report
from memaudit.spec import CaseSpec

CACHE = "fp8 weight cache of fc1"


def _rows(cached: bool) -> list[Row]:
    mark = CACHE if cached else None
    return [
        Row(0, "data", "fp8", [64, 32], "uint8", 2048, operand="input", storage="s0", storage_bytes=2048),
        Row(1, "container", "fp8", [32, 64], "bf16", 0, operand="weight", container="Float8Tensor", cached=mark),
        Row(2, "data", "fp8", [32, 64], "uint8", 2048, operand="weight", container_index=1, storage="s1",
            storage_bytes=2048, cached=mark),
        Row(3, "data", "fp8", [64, 32], "uint8", 2048, operand="weight", container_index=1, storage="s2",
            storage_bytes=2048, cached=mark),
        Row(4, "tensor", "bf16", [32, 64], "bf16", 4096, operand="weight_param", storage="s3", storage_bytes=4096,
            is_parameter=True),
    ]  # fmt: skip


def _report(cached: bool) -> Report:
    rows = _rows(cached)
    spec = CaseSpec("t", "fp8-current", 1, (("tokens", 64),))
    case = CaseReport(spec, id="t-fp8", rows=rows, totals=compute_totals(rows))
    return Report(cases=[case], memaudit="0", created="now")


def test_cached_storages_are_counted_apart_as_parameters_are() -> None:
    t = compute_totals(_rows(True))
    assert (t.physical_bytes, t.parameter_bytes, t.cached_bytes, t.saved_bytes) == (10240, 4096, 4096, 2048)
    before = compute_totals(_rows(False))
    assert (before.cached_bytes, before.saved_bytes) == (0, 6144)
    assert "cached_bytes" not in before.to_dict() and t.to_dict()["cached_bytes"] == 4096
    # a parameter's storage stays a parameter's, whatever else marks it
    rows = [replace_row(r, cached=CACHE) if r.is_parameter else r for r in _rows(True)]
    assert compute_totals(rows).cached_bytes == 4096 and compute_totals(rows).parameter_bytes == 4096


def test_a_report_with_cached_rows_round_trips_and_a_lie_is_refused() -> None:
    text = _report(True).to_json()
    assert validate_report(json.loads(text)).to_json() == text
    plain = _report(False).to_json()
    assert '"cached' not in plain  # reports without a cache are as they were
    d = json.loads(text)
    d["cases"][0]["totals"]["saved_bytes"] += 4096
    with pytest.raises(UsageError, match="saved_bytes"):
        validate_report(d)
    d = json.loads(text)
    d["cases"][0]["rows"][2]["cached"] = ""
    with pytest.raises(UsageError, match="cached"):
        validate_report(d)


def test_tables_and_markdown_show_cached_bytes_beside_parameters() -> None:
    report = _report(True)
    line = totals_line(report.cases[0])
    assert "parameters 4.0 KiB · cached 4.0 KiB · [bold]saved 2.0 KiB" in line
    console = Console(width=200, record=True)
    console.print(summary_table(report.cases))
    head, cells = console.export_text().splitlines()[2:5:2]
    assert head.split() == "┃ case ┃ status ┃ rows ┃ saved ┃ parameters ┃ cached ┃ logical ┃".split()
    assert cells.split() == "│ t-fp8 │ ok │ 5 │ 2.0 KiB │ 4.0 KiB │ 4.0 KiB │ 10.0 KiB │".split()
    console = Console(width=200, record=True)
    console.print(summary_table(_report(False).cases))
    assert "cached" not in console.export_text()
    md = render_markdown(report)
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0] == "| case | status | saved | rows | cached | by kind |"
    assert table[2] == "| t-fp8 | ✅ ok | 2.0 KiB | 5 | 4.0 KiB | data 2.0 KiB |"
    assert "cached" not in render_markdown(_report(False))


def test_compare_notes_cached_bytes_without_failing() -> None:
    cmp = compare_reports(_report(False), _report(True))
    found = {f.metric: f for d in cmp.cases for f in d.findings}
    assert found["cached_bytes"].verdict == "note" and not found["cached_bytes"].failing
    assert found["saved_bytes"].verdict == "improvement"  # the copy left saved_bytes
    strict = compare_reports(_report(False), _report(True), fail_on="change")
    assert any(f.metric == "cached_bytes" and f.failing for d in strict.cases for f in d.findings)
