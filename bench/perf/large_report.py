#!/usr/bin/env python
"""How long ``compare`` and ``baseline update`` take on a large report.

Makes a report of about ``--mb`` megabytes from a committed one (its ok cases repeated at other
FFN sizes, so every case id is new and every case is self-consistent: totals from its rows), then
times the commands in fresh processes, each ``--repeat`` times, and writes the medians:

    python bench/perf/large_report.py --mb 100 --out reports/bench/cpu-large-report.json [--before DIR]

``--before DIR`` times another checkout's memaudit (``git archive COMMIT | tar -x -C DIR``) in
turn with this one, so that both see the same machine load.

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

ROOT = Path(__file__).resolve().parents[2]
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


def timed(argv: list[str], cwd: Path, checkout: Path = ROOT) -> tuple[float, int, str]:
    """Seconds for one ``memaudit ARGV`` in a fresh process, with ``checkout``'s memaudit."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "from memaudit.cli import main; main()", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(checkout)},
    )
    return time.perf_counter() - start, proc.returncode, (proc.stderr or proc.stdout)[-300:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="write the measurement here (JSON)")
    ap.add_argument(
        "--before", type=Path, help="another checkout (e.g. an extracted older commit) timed in turn with this one"
    )
    ap.add_argument("--before-label", default="before")
    args = ap.parse_args(argv)
    checkouts = {"this": ROOT, **({args.before_label: args.before.resolve()} if args.before else {})}
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
        results: dict[str, Any] = {label: {} for label in checkouts}
        goal = GOAL_S * args.mb / 100
        for name, cmd in commands.items():
            times: dict[str, list[float]] = {label: [] for label in checkouts}
            for _ in range(args.repeat):
                for label, checkout in checkouts.items():  # alternating: the machine's load falls on both alike
                    if name != "baseline update (up to date)":
                        (t / "out" / "base.json").unlink(missing_ok=True)
                    if name == "baseline update (up to date)" and not (t / "out" / "base.json").exists():
                        timed(commands["baseline update (new file)"], t, checkout)
                    s, rc, tail = timed(cmd, t, checkout)
                    if rc != 0:
                        print(f"{label}: {name}: exit {rc}: {tail}", file=sys.stderr)
                        return 1
                    times[label].append(round(s, 2))
            for label in checkouts:
                med = statistics.median(times[label])
                results[label][name] = {"median_s": med, "runs_s": times[label], "goal_s": goal, "met": med < goal}
                print(f"{label}: {name}: median {med:.2f} s {times[label]}", flush=True)
    out = {
        "schema": "memaudit.bench.large-report/1",
        "report_mb": round(size / 1e6, 1),
        "cases": len(report["cases"]),
        "rows": rows,
        "goal": f"each command under {GOAL_S:g} s per 100 MB on the 2-core CI runner",
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_at_end": os.getloadavg(),
        "repeat": args.repeat,
        "results": results["this"],
        **({"before": {"label": args.before_label, "results": results[args.before_label]}} if args.before else {}),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0 if all(r["met"] for r in results["this"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
