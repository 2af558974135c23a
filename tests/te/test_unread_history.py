"""``te-history`` with read verdicts: unread bytes per version in the history, and a bisect on the
bytes backward never read (a fake runner gives each commit's verdicts; the git history is
test_te_history's synthetic TE repository)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_te_history import CASE, te_repo  # noqa: F401 - the module-scoped fixture

from memaudit.errors import UsageError
from memaudit.report import Report, Unread, load_report, with_verdicts
from memaudit.te.history.model import VersionInfo, build, unread_state

ROOT = Path(__file__).resolve().parents[2]


def _report(unread_rows: set[int] | None, case_id: str = "c") -> Report:
    """The committed reference case, renamed, with rows in ``unread_rows`` unread and the rest read
    (None: not analysed)."""
    report = load_report(ROOT / "reports" / "cpu" / "reference.json")
    case = report.cases[0]
    case.id = case_id
    if unread_rows is not None:
        with_verdicts(
            case,
            {r.index: ("unread", None) if r.index in unread_rows else ("read", "aten.mm") for r in case.rows},
            Unread(["observed"]),
        )
    report.cases = [case]
    return report


def _versions(*labels: str) -> list[VersionInfo]:
    return [VersionInfo(x, {}, f"{x}.json") for x in labels]


def test_the_history_has_unread_bytes_per_version_and_names_their_change() -> None:
    h = build(_versions("a", "b"), [_report(set()), _report({1, 6})], ["c"], "sm100")
    cells = h.to_dict()["cases"][0]["cells"]
    assert [c["unread_bytes"] for c in cells] == [0, 524288 + 1048576]
    [change] = h.cases[0].changes
    assert change.what == "unread" and "unread +1,572,864 B" in change.text


def test_a_history_without_the_analysis_is_written_as_before() -> None:
    h = build(_versions("a", "b"), [_report(None), _report(None)], ["c"], "sm100")
    assert all("unread_bytes" not in c for c in h.to_dict()["cases"][0]["cells"])
    assert h.cases[0].changes == []


def test_unread_state_refuses_a_case_not_analysed() -> None:
    with pytest.raises(ValueError, match="not analysed"):
        unread_state(_report(None).cases[0])
    assert unread_state(_report({1}).cases[0])[1] == 524288


def _fake_runner(late: set[str], analysed: bool = True) -> Any:
    """Each commit's report (the commit read off its version, ``2.20.2+gHASH``): at the commits in
    ``late`` fc1.input is never read; the saved rows are the same everywhere."""

    def run(source: Any, cases: list[Any]) -> Report:
        commit = source.version.rsplit("+g", 1)[-1]
        return _report(({1} if commit in late else set()) if analysed else None, cases[0].id)

    return run


def test_bisect_on_unread_bytes_names_the_commit(te_repo: dict[str, Any]) -> None:  # noqa: F811
    from memaudit.te.history.bisect import bisect

    a, b, c, d = te_repo["commits"]
    run = _fake_runner({c[:12], d[:12]})
    result = bisect(te_repo["repo"], a, d, CASE, te_repo["cache"], run=run, on="unread")
    assert result.first == c and result.on == "unread"
    data = result.to_dict()
    assert data["on"] == "unread" and data["after"]["unread_bytes"] == 524288 and data["before"]["unread_bytes"] == 0
    assert {p["unread_bytes"] for p in data["probes"]} == {0, 524288}
    # the same commits on the saved state: nothing changed (same buffers, read differently)
    with pytest.raises(UsageError, match="same saved state"):
        bisect(te_repo["repo"], a, d, CASE, te_repo["cache"], run=run)


def test_bisect_on_unread_bytes_refuses_cases_not_analysed(te_repo: dict[str, Any]) -> None:  # noqa: F811
    from memaudit.te.history.bisect import bisect

    a, _b, _c, d = te_repo["commits"]
    with pytest.raises(UsageError, match="not analysed"):
        bisect(te_repo["repo"], a, d, CASE, te_repo["cache"], run=_fake_runner(set(), analysed=False), on="unread")
    with pytest.raises(UsageError, match="saved, unread"):
        bisect(te_repo["repo"], a, d, CASE, te_repo["cache"], on="bytes")


def test_cell_text_shows_unread_bytes() -> None:
    from memaudit.te.history.render import history_markdown

    h = build(_versions("a", "b"), [_report(set()), _report({1, 6})], ["c"], "sm100")
    assert "1.5 MiB never read" in history_markdown(h)
    assert dataclasses.replace(h.cases[0].cells[0]).unread_bytes == 0


def test_te_history_flags_are_checked_before_anything_runs(tmp_path: Path) -> None:

    from typer.testing import CliRunner

    from memaudit.cli import app
    from memaudit.judge import exitcodes

    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(app, ["te-history", "--te", "2.15", "--bisect-on", "unread", "--out", str(out)])
    assert result.exit_code == exitcodes.USAGE and "--bisect-on" in result.stderr and "add --bisect" in result.stderr
    result = runner.invoke(
        app, ["te-history", "--te", "2.15", "--bisect", "a..b", "--bisect-on", "bytes", "--out", str(out)]
    )
    assert result.exit_code == exitcodes.USAGE and "expected saved or unread" in result.stderr
    assert not out.exists()
