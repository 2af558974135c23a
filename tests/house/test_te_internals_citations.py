"""Every ``te-internals §N.M`` citation resolves: docs/internals/te-internals.md has that section.

A file that mentions te-internals anywhere cites it with each ``§`` it holds (code, tests, bench,
scenarios, docs, the README); ``§1.1-1.2`` and ``§2.1-§2.4`` cite both ends."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "internals" / "te-internals.md"
SECTION = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.M)
CITED = re.compile(r"§(\d+(?:\.\d+)?)(?:\s*-\s*§?(\d+(?:\.\d+)?))?")


def sections() -> set[str]:
    return set(SECTION.findall(DOC.read_text(encoding="utf-8")))


def citing_files() -> list[Path]:
    files = [
        *ROOT.glob("memaudit/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("bench/**/*.py"),
        *ROOT.glob("scenarios/*.toml"),
        *ROOT.glob("docs/**/*.md"),
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
    ]
    me = Path(__file__).resolve()
    return sorted(
        p for p in files if p != DOC and p.resolve() != me and "te-internals" in p.read_text(encoding="utf-8")
    )


def citations(text: str) -> list[str]:
    return [c for m in CITED.finditer(text) for c in m.groups() if c]


def test_every_citation_resolves() -> None:
    have = sections()
    missing = [
        f"{p.relative_to(ROOT)}: §{c}"
        for p in citing_files()
        for c in citations(p.read_text(encoding="utf-8"))
        if c not in have
    ]
    assert missing == []


def test_the_check_reads_what_it_should() -> None:
    """Controls: the code does cite the page, the page has its sections, and a made-up one is caught."""
    files = {p.relative_to(ROOT).as_posix() for p in citing_files()}
    assert {
        "memaudit/te/capture/classify.py",
        "memaudit/te/capture/layout.py",
        "memaudit/te/machine/probes.py",
    } <= files
    assert {"1.1", "2.0", "2.4", "5.4", "10"} <= sections()
    assert citations("te-internals §1.1-1.2, §2.1-§2.4 and §5.4.") == ["1.1", "1.2", "2.1", "2.4", "5.4"]
    assert "9.9" not in sections()
