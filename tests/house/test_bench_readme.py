"""bench/README.md gives every script in bench/ a line, and names no script that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
README = BENCH / "README.md"
HELPERS = {"_emulated.py", "_fake_cuda.py", "_grouped_mlp.py", "_suite_mode.py"}
"""Modules in bench/ that scripts and tests import; not scripts (the README names them apart)."""

ENTRY = re.compile(r"^- `([^`\s]+)`:", re.MULTILINE)
"""A list item that starts with a backticked path relative to bench/."""


def scripts() -> set[str]:
    found = {p.relative_to(BENCH).as_posix() for p in [*BENCH.rglob("*.py"), *BENCH.rglob("*.sh")]}
    return {p for p in found if Path(p).name != "__init__.py" and p not in HELPERS and "__pycache__" not in p}


def listed() -> set[str]:
    return set(ENTRY.findall(README.read_text(encoding="utf-8")))


def test_every_script_has_a_line() -> None:
    missing = sorted(scripts() - listed())
    assert not missing, f"bench/README.md has no line for: {', '.join(missing)}"


def test_every_listed_file_exists() -> None:
    gone = sorted(p for p in listed() if not (BENCH / p).is_file())
    assert not gone, f"bench/README.md lists files that are not in bench/: {', '.join(gone)}"


def test_the_helpers_are_modules_in_bench() -> None:
    """The helpers the first test leaves out are there, and the README names each one."""
    assert HELPERS <= {p.name for p in BENCH.glob("*.py")}
    assert HELPERS <= listed()


def test_the_check_sees_both_kinds() -> None:
    """The test would notice a missing line: the README lists .py and .sh scripts in subfolders."""
    assert {"perf/run.py", "device/h200.sh", "mutation/mutate.py"} <= scripts() & listed()
