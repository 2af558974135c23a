"""Benchmark byte expressions: parsing, evaluation, and ``memaudit check`` of a huge scenario.

Measures, for ``--budgets N`` distinct expressions (default 250,000) of the form
``"tokens * hidden * elt + tokens * I + 2 KiB"`` (every text differs, so the parse cache never hits):

* ``parse_seconds``: :meth:`ByteExpr.parse` of all N;
* ``value_seconds``: :meth:`ByteExpr.value` of all N for each of the three cases of
  ``reports/cpu/reference.json``;
* ``check_seconds``: ``memaudit check reports/cpu/reference.json --scenario S`` where S has the
  first ``--check-budgets`` (default 20,000: a scenario file is at most 2 MiB) expressions as
  ``max_bytes`` budgets, in-process, output discarded (most of them fail: exit 1).

Usage: ``python bench/perf/byte_expr_speed.py [--budgets 250000] [--check-budgets 20000] [--skip-check]``.
Prints the JSON result.
The expressions use only ``+`` and ``*``, so the same script times the older parser too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from memaudit.judge.rules import ByteExpr  # noqa: E402
from memaudit.report import load_report  # noqa: E402

SCENARIO_HEAD = """[cases]
target = "reference"
recipes = ["bf16"]
groups = [1, 4, 8]
tokens = 1024
hidden = 256
ffn = 512
dtype = "bf16"
"""


def texts(n: int) -> list[str]:
    return [f"tokens * hidden * elt + tokens * {i} + 2 KiB" for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budgets", type=int, default=250_000)
    ap.add_argument("--check-budgets", type=int, default=20_000)
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()
    report = ROOT / "reports" / "cpu" / "reference.json"
    cases = load_report(report).cases
    out: dict[str, object] = {"budgets": args.budgets, "cases": len(cases)}

    dims = ("tokens", "hidden", "ffn")
    start = time.perf_counter()
    exprs = [ByteExpr.parse(t, dims=dims) for t in texts(args.budgets)]
    out["parse_seconds"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    total = sum(e.value(c) for c in cases for e in exprs)
    out["value_seconds"] = round(time.perf_counter() - start, 3)
    out["value_checksum"] = total

    if not args.skip_check:
        from typer.testing import CliRunner

        from memaudit.cli import app

        with tempfile.TemporaryDirectory() as tmp:
            scen = Path(tmp) / "huge.toml"
            n = min(args.check_budgets, args.budgets)
            budgets = "".join(f'\n[[budget]]\nname = "b{i}"\nmax_bytes = "{t}"\n' for i, t in enumerate(texts(n)))
            scen.write_text(SCENARIO_HEAD + budgets, encoding="utf-8")
            start = time.perf_counter()
            result = CliRunner().invoke(app, ["check", str(report), "--scenario", str(scen)])
            out["check_budgets"] = n
            out["check_seconds"] = round(time.perf_counter() - start, 3)
            out["check_exit"] = result.exit_code
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
