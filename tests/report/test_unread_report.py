"""Read verdicts in the report: the model (``Row.read``/``read_by``, ``Totals.unread_bytes``,
``CaseReport.unread``, :func:`memaudit.report.with_verdicts`), the strict reader (a report that lies
about them is bad input, exit 2), the ``max_unread_bytes`` budget, the gate, and how the console
and markdown show them. All on synthetic verdicts given to a committed report's rows."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.judge.baseline import compare_reports
from memaudit.judge.budgets import evaluate_case
from memaudit.judge.scenario import parse_rule, parse_scenario
from memaudit.render.console import SafeConsole
from memaudit.render.markdown import render_markdown
from memaudit.render.tables import case_table, summary_table
from memaudit.render.unread import unread_block, unread_buffers
from memaudit.report import (
    SCHEMA,
    CaseReport,
    Report,
    Unread,
    load_report,
    schema,
    validate_report,
    with_verdicts,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reports" / "cpu" / "reference.json"
runner = CliRunner()

# reference/bf16/g1: 0 split_sizes s0, 1 fc1.input s1, 2 fc1.weight[0] s2 (param), 3 fc1.output s3,
# 4 activation.scales s4, 5 split_sizes s0, 6 fc2.input s5, 7 fc2.weight[0] s6 (param)
VERDICTS: dict[int, tuple[str, str | None]] = {
    0: ("read", "aten.split_with_sizes"),
    1: ("unread", None),
    2: ("read", "aten.mm"),
    3: ("read", "aten.gelu_backward"),
    4: ("unknown", "received by mylib.kernel, which memaudit does not observe"),
    5: ("unread", None),
    6: ("unread", None),
    7: ("unread", None),
}


def _report(verdicts: dict[int, tuple[str, str | None]] | None = VERDICTS) -> Report:
    report = load_report(REFERENCE)
    report.cases = report.cases[:1]
    if verdicts is not None:
        with_verdicts(report.cases[0], verdicts, Unread(["observed"], ["a note"]))
    return report


def _case(report: Report) -> CaseReport:
    return report.cases[0]


# ---- the model ---------------------------------------------------------------------------------
def test_with_verdicts_sets_rows_and_only_adds_unread_bytes() -> None:
    before = _report(None)
    after = _report()
    case = _case(after)
    assert [(r.read, r.read_by) for r in case.rows] == [VERDICTS[i] for i in range(8)]
    assert case.unread == Unread(["observed"], ["a note"])
    # s0 is read (row 0) though row 5 is unread; s1 (fc1.input) and s5 (fc2.input) are unread; s6 is a parameter
    assert case.totals.unread_bytes == 524288 + 1048576
    assert dataclasses.replace(case.totals, unread_bytes=None) == _case(before).totals


def test_a_storage_with_an_unknown_row_and_no_read_is_not_counted() -> None:
    verdicts = dict(VERDICTS)
    verdicts[0] = ("unknown", "why")  # s0: unknown + unread
    assert _case(_report(verdicts)).totals.unread_bytes == 524288 + 1048576
    verdicts[0] = ("unread", None)  # s0: every row unread
    assert _case(_report(verdicts)).totals.unread_bytes == 8 + 524288 + 1048576


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({1: None}, "have no verdict"),
        ({1: ("never", None)}, "not one of read, unread, unknown"),
        ({1: ("unread", "aten.mm")}, "names no reader"),
        ({4: ("unknown", None)}, "says why"),
        ({9: ("read", "x")}, "verdicts for row"),
    ],
)
def test_with_verdicts_refuses_what_a_row_cannot_hold(change: dict[int, Any], message: str) -> None:
    report = _report(None)
    verdicts = {i: v for i, v in {**VERDICTS, **change}.items() if v is not None}
    rows = list(_case(report).rows)
    with pytest.raises(ValueError, match=message):
        with_verdicts(_case(report), verdicts, Unread(["observed"]))
    assert _case(report).rows == rows and _case(report).unread is None  # left as it was


def test_with_verdicts_refuses_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="methods"):
        with_verdicts(_case(_report(None)), VERDICTS, Unread(["guessed"]))


def test_a_report_without_the_analysis_writes_none_of_the_keys() -> None:
    text = _report(None).to_json()
    data = json.loads(text)
    case = data["cases"][0]
    assert "unread" not in case and "unread_bytes" not in case["totals"]
    assert not any("read" in r or "read_by" in r for r in case["rows"])
    assert data["schema"] == SCHEMA == "memaudit.report/3"


def test_verdicts_round_trip(tmp_path: Path) -> None:
    report = _report()
    write_report(report, tmp_path / "r.json")
    again = load_report(tmp_path / "r.json")
    assert again.to_json() == report.to_json()
    data = json.loads(report.to_json())["cases"][0]
    assert data["unread"] == {"methods": ["observed"], "notes": ["a note"]}
    assert data["totals"]["unread_bytes"] == 1572864
    assert data["rows"][1]["read"] == "unread" and "read_by" not in data["rows"][1]
    assert data["rows"][2]["read_by"] == "aten.mm"


def test_the_json_schema_names_the_verdicts() -> None:
    s = schema()
    defs = s["$defs"]
    assert s["title"] == "memaudit.report/3"
    row = json.dumps(defs["Row"]["properties"]["read"])
    assert all(v in row for v in ("read", "unread", "unknown"))
    assert "unread_bytes" in defs["Totals"]["properties"]
    assert "unread" in defs["Case"]["properties"] and "unread" not in defs["Case"]["required"]


# ---- a report that lies fails with exit 2 --------------------------------------------------------
def _lie(edit: Any) -> dict[str, Any]:
    data = json.loads(_report().to_json())
    edit(data["cases"][0])
    return data


def _set(path: str, value: Any) -> Any:
    def edit(case: dict[str, Any]) -> None:
        *head, last = path.split(".")
        obj: Any = case
        for p in head:
            obj = obj[int(p)] if p.isdigit() else obj[p]
        if value is _DELETE:
            del obj[last]
        else:
            obj[last] = value

    return edit


_DELETE = object()
LIES = {
    "a verdict outside the three": (_set("rows.1.read", "skipped"), r"rows\[1\]\.read"),
    "read_by on an unread row": (_set("rows.1.read_by", "aten.mm"), r"rows\[1\]\.read_by.*names no reader"),
    "a live row without a verdict": (_set("rows.1.read", _DELETE), r"rows\[1\]\.read.*has no verdict"),
    "verdicts without the unread key": (_set("unread", _DELETE), r"rows\[0\]\.read.*records no analysis"),
    "unread_bytes that disagree": (_set("totals.unread_bytes", 1572865), r"totals\.unread_bytes.*1,572,865.*1,572,864"),
    "unread_bytes missing": (_set("totals.unread_bytes", _DELETE), r"totals\.unread_bytes.*says none"),
    "an unknown row that says nothing": (_set("rows.4.read_by", _DELETE), r"rows\[4\]\.read_by.*says why"),
    "a method no one knows": (_set("unread.methods", ["guessed"]), r"unread\.methods"),
    "no method": (_set("unread.methods", []), r"unread\.methods"),
}


@pytest.mark.parametrize("name", LIES)
def test_a_report_that_lies_about_verdicts_is_refused(name: str, tmp_path: Path) -> None:
    edit, where = LIES[name]
    data = _lie(edit)
    with pytest.raises(UsageError, match=where):
        validate_report(data, source="r.json")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = runner.invoke(app, ["check", str(path), "--scenario", _scenario_file(tmp_path)])
    assert result.exit_code == exitcodes.USAGE, result.stdout + result.stderr
    assert "r.json" in result.stderr


def _scenario_file(tmp_path: Path, budget: str = 'max_bytes = "1 GiB"') -> str:
    """A scenario whose one case is the report's (reference, bf16, g1, T=1024, H=256, F=512)."""
    path = tmp_path / "s.toml"
    path.write_text(
        '[cases]\ntarget = "reference"\nrecipes = "bf16"\ngroups = [1]\ntokens = 1024\nhidden = 256\nffn = 512\n\n'
        f'[[budget]]\nname = "b"\n{budget}\n',
        encoding="utf-8",
    )
    return str(path)


def test_the_honest_report_passes_the_same_check(tmp_path: Path) -> None:
    write_report(_report(), tmp_path / "r.json")
    result = runner.invoke(app, ["check", str(tmp_path / "r.json"), "--scenario", _scenario_file(tmp_path)])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    result = runner.invoke(
        app, ["check", str(tmp_path / "r.json"), "--scenario", _scenario_file(tmp_path, "max_unread_bytes = 0")]
    )
    assert result.exit_code == exitcodes.FAIL and "saved for backward and never read" in result.stdout, result.stdout
    write_report(_report(None), tmp_path / "plain.json")
    result = runner.invoke(
        app, ["check", str(tmp_path / "plain.json"), "--scenario", _scenario_file(tmp_path, "max_unread_bytes = 0")]
    )
    assert result.exit_code == exitcodes.FAIL and "not analysed" in result.stdout, result.stdout


def test_unread_bytes_without_verdicts_is_refused() -> None:
    data = json.loads(_report(None).to_json())
    data["cases"][0]["totals"]["unread_bytes"] = 0
    with pytest.raises(UsageError, match=r"totals\.unread_bytes.*says 0 but the rows add up to none"):
        validate_report(data)


def test_a_version_2_report_reads_but_has_no_verdicts() -> None:
    plain = json.loads(_report(None).to_json())
    plain["schema"] = "memaudit.report/2"
    assert validate_report(plain).cases[0].unread is None
    lying = json.loads(_report().to_json())
    lying["schema"] = "memaudit.report/2"
    with pytest.raises(UsageError, match=r"unread.*new in memaudit.report/3"):
        validate_report(lying)


# ---- the budget ----------------------------------------------------------------------------------
def _judge(case: CaseReport, rule: dict[str, Any]) -> Any:
    [verdict] = evaluate_case(case, [parse_rule({"name": "unread", **rule}, source="t", key="budget")])
    return verdict


def test_max_unread_bytes_passes_and_fails_on_the_totals() -> None:
    case = _case(_report())
    assert _judge(case, {"max_unread_bytes": "1.5 MiB"}).verdict == "pass"
    v = _judge(case, {"max_unread_bytes": 0})
    assert v.verdict == "fail" and "1.5 MiB (1572864 B) saved for backward and never read" in v.message
    assert "fc2.input" in v.message and "never read" in v.message
    assert sorted(v.rows) == [1, 6]


def test_max_unread_bytes_with_a_selection() -> None:
    case = _case(_report())
    assert _judge(case, {"select": {"operand": "fc1.*"}, "max_unread_bytes": 524288}).verdict == "pass"
    assert _judge(case, {"select": {"operand": "fc1.*"}, "max_unread_bytes": 524287}).verdict == "fail"
    assert _judge(case, {"select": {"operand": "fc1.output"}, "max_unread_bytes": 0}).verdict == "pass"


def test_max_unread_bytes_on_a_case_not_analysed_fails() -> None:
    v = _judge(_case(_report(None)), {"max_unread_bytes": "1 GiB"})
    assert v.verdict == "fail" and v.actual == "not analysed"
    assert "was not analysed for reads" in v.message and "--unread" in v.message


def test_max_unread_bytes_takes_no_measure() -> None:
    with pytest.raises(UsageError, match="'measure' = 'saved' does not go with a max_unread_bytes check"):
        parse_rule({"name": "u", "max_unread_bytes": 0, "measure": "saved"}, source="t", key="budget")


SCENARIO = {
    "cases": {"target": "reference", "recipes": "bf16", "groups": [1], "tokens": 1024, "hidden": 256, "ffn": 512}
}


@pytest.mark.parametrize(
    ("value", "method"), [(True, "observed"), (False, None), ("poisoned", "poisoned"), ("both", "both")]
)
def test_scenario_case_option_unread(value: Any, method: str | None) -> None:
    data = copy.deepcopy(SCENARIO)
    data["cases"]["unread"] = value
    data["budget"] = [{"name": "none unread", "max_unread_bytes": 0}]
    s = parse_scenario(data, source="s.toml")
    assert s.unread_methods() == [method] * len(s.specs())
    assert s.rules[0].kind == "max_unread_bytes"


@pytest.mark.parametrize("value", ["observe", 1, "true", ["observed"]])
def test_scenario_unread_refuses_other_values(value: Any) -> None:
    data = copy.deepcopy(SCENARIO)
    data["cases"]["unread"] = value
    with pytest.raises(UsageError, match=r"s\.toml: cases\.unread.*observed"):
        parse_scenario(data, source="s.toml")


# ---- the gate -------------------------------------------------------------------------------------
def _unread_findings(base: Report, cur: Report, **kw: Any) -> list[Any]:
    cmp = compare_reports(base, cur, **kw)
    return [f for f in cmp.findings if f.metric == "unread_bytes"]


def test_the_gate_fails_on_more_unread_bytes() -> None:
    base = _report()
    more = dict(VERDICTS)
    more[3] = ("unread", None)
    [f] = _unread_findings(base, _report(more))
    assert f.failing and f.baseline == 1572864 and f.current == 1572864 + 2097152
    assert "unread_bytes grew by 2.0 MiB" in f.text
    assert not _unread_findings(base, _report())  # unchanged: nothing to say
    [f] = _unread_findings(_report(more), base)
    assert not f.failing and f.direction == "better"


def test_the_gate_says_when_one_side_was_not_analysed() -> None:
    analysed, plain = _report(), _report(None)
    [f] = _unread_findings(plain, analysed)
    assert f.failing and "the baseline was not analysed" in f.text
    [f] = _unread_findings(analysed, plain)
    assert f.failing and "not analysed in the current case" in f.text
    none_unread = {i: ("read", "aten.mm") for i in range(8)}
    [f] = _unread_findings(plain, _report(none_unread))
    assert not f.failing and "nothing unread now" in f.text
    [f] = _unread_findings(plain, _report(none_unread), fail_on="change")
    assert f.failing
    assert not _unread_findings(plain, plain)


def test_one_unread_byte_against_a_baseline_not_analysed_fails() -> None:
    """Any unread byte now, where the baseline cannot say how many there were, could be growth."""
    one = _report({i: ("read", "aten.mm") for i in range(8)})
    _case(one).totals = dataclasses.replace(_case(one).totals, unread_bytes=1)  # the gate reads the total
    [f] = _unread_findings(_report(None), one)
    assert f.failing and f.direction == "worse" and "the gate cannot tell whether it grew" in f.text


def test_compare_cli_exits_1_on_unread_growth(tmp_path: Path) -> None:
    more = dict(VERDICTS)
    more[3] = ("unread", None)
    write_report(_report(), tmp_path / "base.json")
    write_report(_report(more), tmp_path / "cur.json")
    result = runner.invoke(
        app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"), "--markdown", str(tmp_path / "c.md")]
    )
    assert result.exit_code == exitcodes.FAIL, result.stdout + result.stderr
    assert "unread_bytes grew" in result.stdout
    md = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert "saved for backward, never read" in md and "fc1.output tensor 2,097,152 B" in md


# ---- showing them ---------------------------------------------------------------------------------
def _render(renderable: Any, width: int = 200) -> str:
    console = SafeConsole(width=width, record=True, color_system=None)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get()


def test_unread_buffers_by_storage_largest_first() -> None:
    bufs = unread_buffers(_case(_report()))
    assert [b.text() for b in bufs] == ["fc2.input[0] tensor 1,048,576 B", "fc1.input[0] tensor 524,288 B"]
    assert unread_buffers(_case(_report(None))) == []


def test_console_shows_unread_first_and_a_read_column() -> None:
    case = _case(_report())
    block = _render(unread_block([case]))
    assert block.splitlines()[0] == "saved for backward, never read: fc2.input[0] tensor 1,048,576 B"
    table = _render(case_table(case, width=240), 240)
    assert "read (aten.mm)" in table and "unread" in table and "unknown: received by mylib.kernel" in table
    assert "never read 1.5 MiB" in table and "verdicts by observed" in table
    compact = _render(case_table(case, width=60), 60)
    assert "unread" in compact
    summary = _render(summary_table([case, _case(_report(None))]))
    assert "never read" in summary and "not analysed" in summary
    assert unread_block([_case(_report(None))]) is None
    plain = _render(case_table(_case(_report(None)), width=240), 240)
    assert "never read" not in plain and "read (" not in plain


def test_user_strings_are_escaped_in_console_and_markdown() -> None:
    report = _report()
    case = _case(report)
    case.rows = [dataclasses.replace(r, operand="[bold]@alice*x*") if r.index == 6 else r for r in case.rows]
    out = _render(unread_block([case]))
    assert "[bold]@alice*x*" in out
    md = render_markdown(report)
    line = next(ln for ln in md.splitlines() if "1,048,576 B" in ln)
    assert "\\[bold\\]" in line and "@\u200dalice" in line and "\\*x\\*" in line


def test_markdown_lists_unread_buffers_before_the_tables() -> None:
    md = render_markdown(_report())
    lines = md.splitlines()
    first = next(i for i, ln in enumerate(lines) if "saved for backward, never read" in ln)
    table = next(i for i, ln in enumerate(lines) if ln.startswith("| case"))
    assert first < table
    assert "fc2.input\\[0\\] tensor 1,048,576 B" in md and "| never read |" in md
    assert "saved for backward, never read" not in render_markdown(_report(None))


# ---- the command line ----------------------------------------------------------------------------
def test_unread_method_without_unread_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", "--target", "reference", "--unread-method", "poisoned", "--json", str(out)])
    assert (
        result.exit_code == exitcodes.USAGE and "--unread-method" in result.stderr and "add --unread" in result.stderr
    )
    assert not out.exists()


def test_an_unknown_unread_method_is_a_usage_error() -> None:
    result = runner.invoke(app, ["run", "--target", "reference", "--unread", "--unread-method", "guess"])
    assert result.exit_code == exitcodes.USAGE


def test_unread_needs_backward(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", "--target", "reference", "--unread", "--no-backward", "--json", str(out)])
    assert result.exit_code == exitcodes.USAGE and "needs backward" in result.stderr
    assert not out.exists()


def test_check_and_compare_show_unread_buffers_first(tmp_path: Path) -> None:
    write_report(_report(), tmp_path / "r.json")
    result = runner.invoke(app, ["check", str(tmp_path / "r.json"), "--scenario", _scenario_file(tmp_path)])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "saved for backward, never read: fc2.input[0] tensor 1,048,576 B", (
        result.stdout
    )
    result = runner.invoke(app, ["compare", str(tmp_path / "r.json"), str(tmp_path / "r.json")])
    assert result.exit_code == exitcodes.OK and result.stdout.splitlines()[0].startswith(
        "saved for backward, never read: "
    )


@pytest.fixture
def stand_in_analysis(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], str | None]]:
    """A stand-in for the read analysis, to test how ``run`` passes ``unread=`` through: a
    ``memaudit.unread`` module and a ``run_matrix`` that takes ``unread`` and gives every row of each
    case it ran ``read`` (by ``stand-in``). Records (case ids, unread) per call."""
    import importlib.machinery
    import sys
    import types

    from memaudit import runner as run_module

    if "memaudit.unread" not in sys.modules:
        fake = types.ModuleType("memaudit.unread")
        fake.__spec__ = importlib.machinery.ModuleSpec("memaudit.unread", None)
        fake.METHODS = ("observed", "poisoned", "both")  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "memaudit.unread", fake)
    real = run_module.run_matrix
    calls: list[tuple[list[str], str | None]] = []

    def run_matrix(target: Any, specs: Any, *, unread: str | None = None, **kw: Any) -> Report:
        specs = list(specs)
        report = real(target, specs, **kw)
        calls.append(([c.id for c in report.cases], unread))
        if unread is not None:
            methods = ["observed", "poisoned"] if unread == "both" else [unread]
            for case in report.cases:
                with_verdicts(case, {r.index: ("read", "stand-in") for r in case.rows}, Unread(methods))
        return report

    from memaudit import audit

    monkeypatch.setattr(run_module, "run_matrix", run_matrix)
    monkeypatch.setattr(audit, "run_matrix", run_matrix)  # the run object calls it
    return calls


def test_run_passes_each_cases_unread_through(tmp_path: Path, stand_in_analysis: list[Any]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[[cases]]\ntarget = "reference"\nrecipes = "bf16"\ngroups = [1, 2]\ntokens = 64\nhidden = 16\nffn = '
        '32\nunread = "both"\n\n'
        '[[cases]]\ntarget = "reference"\nrecipes = "bf16"\ngroups = [1]\ntokens = 128\nhidden = 16\nffn = 32\n\n'
        '[[budget]]\nname = "nothing unread"\ngroups = [2]\nmax_unread_bytes = 0\n',
        encoding="utf-8",
    )
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["run", "--scenario", str(scenario), "--json", str(out), "--quiet"])
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    assert [(len(ids), method) for ids, method in stand_in_analysis] == [(2, "both"), (1, None)]
    cases = load_report(out).cases
    assert [c.unread.methods if c.unread else None for c in cases] == [["observed", "poisoned"]] * 2 + [None]
    assert [c.totals.unread_bytes for c in cases] == [0, 0, None]
    assert [c.id for c in cases] == [i for ids, _ in stand_in_analysis for i in ids]
    assert "not analysed" in result.stdout  # the summary's never-read column for the third case
    stand_in_analysis.clear()
    result = runner.invoke(
        app, ["run", "--scenario", str(scenario), "--unread", "--unread-method", "poisoned", "--quiet"]
    )
    assert result.exit_code == exitcodes.OK, result.stdout + result.stderr
    assert stand_in_analysis and [m for _, m in stand_in_analysis] == ["poisoned"]  # the command line wins, one matrix
