"""Reading and writing report files (memaudit.report.io): the depth scan's escapes, the longest output
name, and what an atomic write leaves on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memaudit.errors import UsageError
from memaudit.report import MAX_DEPTH, atomic_write_text, check_depth, check_output
from memaudit.report import io as report_io

DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)


def test_a_backslash_before_a_letter_escapes_nothing_the_depth_scan_visits() -> None:
    """``"a\\n"`` ends at its quote: the brackets after it nest."""
    with pytest.raises(UsageError, match=f"nested {MAX_DEPTH + 1} levels deep"):
        check_depth('x = "a\\n" ' + DEEP, "s.toml")
    check_depth('x = "a\\', "s.toml")  # a backslash that ends the text (an unterminated string) is no error here


def test_an_output_name_of_235_bytes_is_written_and_236_refused(tmp_path: Path) -> None:
    """The limit leaves 20 bytes of the OS's 255 to spare: 235 is the longest name memaudit writes."""
    longest = tmp_path / ("y" * 235)
    assert check_output(longest, "--json") == longest
    atomic_write_text(longest, "x")
    assert longest.read_text(encoding="utf-8") == "x"
    with pytest.raises(UsageError, match=r"--json: cannot write .*: its name is 236 bytes \(at most 235\)"):
        check_output(tmp_path / ("y" * 236), "--json")


def test_a_write_through_a_symlink_replaces_its_target_and_the_link_stays(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "report.md"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "report.md"]  # no temp file left beside it
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["report.md"]


def test_the_whole_text_is_in_the_file_when_it_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fsync`` makes durable what the OS holds: Python's buffer is flushed to it first."""
    synced: list[int] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        fsync(fd)

    monkeypatch.setattr(report_io.os, "fsync", recording_fsync)
    text = "memaudit\n" * 10
    atomic_write_text(tmp_path / "r.md", text)
    assert synced == [len(text)]
