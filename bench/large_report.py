#!/usr/bin/env python
"""How long ``compare`` and ``baseline update`` take on a large report (issue 29's goal).

Makes a report of about ``--mb`` megabytes from a committed one (its ok cases repeated at other
FFN sizes, so every case id is new and every case is self-consistent: totals from its rows), then
times the commands in fresh processes, each ``--repeat`` times, and writes the medians:

    python bench/large_report.py --mb 100 --out reports/bench/cpu-large-report.json

The goal (``GOAL_S``): each command under 10 s on a 100 MB report on the CI runner (2 cores),
with every read check on (duplicate keys, schema, case fields, totals against rows, nesting).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reports" / "emulated" / "measured-default.json"
GOAL_S = 10.0
"""Each command, on a 100 MB report, on the 2-core CI runner."""


def make_report(mb: float, source: Path = SOURCE) -> dict[str, Any]:
    """A report of about ``mb`` MB (as written: sorted keys, indent 1): the source's ok cases at
    FFN sizes ``F + 16 k``, ids and ``ffn`` changed together."""
    base = json.loads(source.read_text(encoding="utf-8"))
    ok = [c for c in base["cases"] if c["status"] == "ok"]
    one = sum(len(json.dumps(c, indent=1, sort_keys=True)) for c in ok)
    rounds = max(1, round(mb * 1e6 / one))
    cases = []
    for k in range(rounds):
        for c in ok:
            new = dict(c)
            ffn = c["ffn"] + 16 * (k + 1)
            new["id"] = c["id"].replace(f"-f{c['ffn']}", f"-f{ffn}", 1)
            new["ffn"] = ffn
            cases.append(new)
    return {**base, "cases": cases}


def timed(argv: list[str], cwd: Path) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from memaudit.cli import main; main()", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    return time.perf_counter() - start, proc.returncode, (proc.stderr or proc.stdout)[-300:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="write the measurement here (JSON)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        report = make_report(args.mb)
        text = json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        (t / "big.json").write_text(text, encoding="utf-8")
        size = len(text.encode("utf-8"))
        rows = sum(len(c["rows"]) for c in report["cases"])
        print(f"{size / 1e6:.1f} MB, {len(report['cases'])} cases, {rows} rows", flush=True)
        commands = {
            "compare": ["compare", "big.json", "big.json"],
            "baseline update (new file)": ["baseline", "update", "big.json", "--into", "out/base.json"],
            "baseline update (up to date)": ["baseline", "update", "big.json", "--into", "out/base.json"],
        }
        results: dict[str, Any] = {}
        for name, cmd in commands.items():
            times = []
            for i in range(args.repeat):
                if name == "baseline update (new file)":
                    (t / "out" / "base.json").unlink(missing_ok=True)
                s, rc, tail = timed(cmd, t)
                if rc != 0:
                    print(f"{name}: exit {rc}: {tail}", file=sys.stderr)
                    return 1
                times.append(round(s, 2))
                if name == "baseline update (new file)" and i < args.repeat - 1:
                    (t / "out" / "base.json").unlink()
            results[name] = {"median_s": statistics.median(times), "runs_s": times, "goal_s": GOAL_S * args.mb / 100,
                             "met": statistics.median(times) < GOAL_S * args.mb / 100}
            print(f"{name}: median {statistics.median(times):.2f} s {times}", flush=True)
    out = {
        "schema": "memaudit.bench.large-report/1",
        "report_mb": round(size / 1e6, 1),
        "cases": len(report["cases"]),
        "rows": rows,
        "goal": f"each command under {GOAL_S:g} s per 100 MB on the 2-core CI runner",
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "results": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0 if all(r["met"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
