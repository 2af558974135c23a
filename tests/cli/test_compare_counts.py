"""``compare``'s two summary lines count the same cases: "No changes in N cases" names the ones
it did not compare byte for byte (skipped or errored in both) beside the verdict's "over K
compared cases"."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from memaudit.cli.root import app

ROOT = Path(__file__).resolve().parents[2]


def test_no_changes_and_compared_counts_agree() -> None:
    base = ROOT / "reports/baseline/h200-te-grouped-mlp.json"  # 9 ok, 6 skipped (n/a), 3 error (fp8-block)
    result = CliRunner().invoke(app, ["compare", str(base), str(base)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    first, verdict = result.stdout.splitlines()[:2]
    n = int(re.search(r"No changes in (\d+) cases", first).group(1))
    k = int(re.search(r"over (\d+) compared cases", verdict).group(1))
    assert (n, k) == (18, 9)
    assert f"{k} ok in both reports and compared byte for byte" in first
    assert f"{n - k} with the same status in both (3 error, 6 skipped)" in first


def test_all_compared_says_just_that() -> None:
    base = ROOT / "reports/baseline/cpu-reference.json"
    out = CliRunner().invoke(app, ["compare", str(base), str(base)], env={"COLUMNS": "300"}).stdout
    assert re.match(r"No changes in \d+ cases\.\n", out), out
