"""Streamed JSON reports: the same bytes as ``write_report``, one case in memory at a time."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from memaudit.report import (
    CaseReport,
    Report,
    load_report,
    validate_case,
    write_report,
    write_report_streaming,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "name", ["reports/cpu/reference.json", "reports/h200/te-grouped-mlp.json", "reports/emulated/sm100-fused.json"]
)
def test_streamed_bytes_equal_write_report(name: str, tmp_path: Path) -> None:
    report = load_report(ROOT / name)
    write_report(report, tmp_path / "a.json")
    assert write_report_streaming(report, iter(report.cases), tmp_path / "b.json") == len(report.cases)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_no_cases_streams_an_empty_list(tmp_path: Path) -> None:
    report = Report(environment={"device": "cpu"}, memaudit="0", created="now")
    write_report(report, tmp_path / "a.json")
    write_report_streaming(report, iter(()), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_each_case_is_released_before_the_next_is_made(tmp_path: Path) -> None:
    template = load_report(ROOT / "reports/cpu/reference.json")
    alive: list[weakref.ref[CaseReport]] = []
    most = 0

    def make(i: int) -> CaseReport:
        nonlocal most
        gc.collect()
        most = max(most, sum(r() is not None for r in alive))
        case = validate_case({**template.cases[0].to_dict(), "id": f"c{i}"})
        alive.append(weakref.ref(case))
        return case

    def cases() -> Iterator[CaseReport]:
        for i in range(20):
            yield make(i)

    write_report_streaming(Report(), cases(), tmp_path / "s.json")
    assert most == 0, f"{most} earlier cases were still alive while a new one was made"
    assert [c.id for c in load_report(tmp_path / "s.json").cases] == [f"c{i}" for i in range(20)]


def test_a_failing_case_leaves_no_file(tmp_path: Path) -> None:
    def cases() -> Iterator[CaseReport]:
        yield from load_report(ROOT / "reports/cpu/reference.json").cases
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_report_streaming(Report(), cases(), tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []
