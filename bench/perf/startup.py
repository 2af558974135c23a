#!/usr/bin/env python
"""How long each pure-data command takes, start to exit, as a user runs it (a fresh process).

``compare``, ``check``, ``merge``, ``schema`` and ``baseline update`` on real inputs (the committed
CPU baseline, the H200 TE report, two rank files made here); ``run --target reference`` beside them
for scale (it imports torch). Wall time of the whole process, median of ``--repeat`` runs with min
and max; the 0.5 s goal is for the pure-data commands.

    python bench/perf/startup.py [--repeat 7] [--md reports/bench/cpu-startup.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOAL_S = 0.5


def rank_files(folder: Path) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
        "from tests.distributed.test_ranks import rank_reports\n"
        "for name, rep in rank_reports('reference', world=2): (Path(sys.argv[2]) / name).write_text(rep.to_json())\n"
    )
    subprocess.run([sys.executable, "-c", code, str(ROOT), str(folder)], check=True, cwd=ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    if args.md is not None and not args.md.parent.is_dir():
        ap.error(f"--md: folder {args.md.parent} does not exist")
    base = ROOT / "reports/baseline/cpu-reference.json"
    te = ROOT / "reports/h200/te-grouped-mlp.json"
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        ranks = t / "ranks"
        ranks.mkdir()
        rank_files(ranks)
        commands = {
            "compare": ["compare", base, base, "--markdown", t / "c.md"],
            "check": ["check", te, "--scenario", "grouped_mlp", "--json", t / "j.json"],
            "merge": ["merge", ranks, "--json", t / "m.json"],
            "schema": ["schema"],
            "baseline update": ["baseline", "update", base, "--into", t / "b.json"],
            "run --target reference (imports torch)": ["run", "--target", "reference", "--groups", "1"],
        }
        rows = []
        for name, argv in commands.items():
            helped = [*name.split(" (")[0].split(), "--help"]
            spans = []
            for cmd in (helped, argv):
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    subprocess.run(
                        [sys.executable, "-m", "memaudit", *map(str, cmd)], cwd=t, capture_output=True, check=False
                    )
                    times.append(time.perf_counter() - t0)
                spans.append((statistics.median(times), min(times), max(times)))
            rows.append((name, *spans))
            print(f"{name}: started {spans[0][0]:.3f} s, ran {spans[1][0]:.3f} s", flush=True)
    lines = [
        "# Start-up of the pure-data commands",
        "",
        f"`python bench/perf/startup.py --repeat {args.repeat}`; Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores. Wall time of a fresh `python -m memaudit ...` process, "
        f"start to exit, median of {args.repeat} [min, max]: started (`COMMAND --help`: Python, the imports and "
        "the command line, nothing read) and the whole command on real inputs (the committed CPU baseline, the "
        "H200 TE report with its shipped scenario, two rank files). Goal for the pure-data commands: start in "
        f"under {GOAL_S} s (they import neither torch nor TE: `tests/cli/test_startup_imports.py`).",
        "",
        "| command | started, median s [min, max] | start under 0.5 s | whole command, median s [min, max] |",
        "|---|---:|---|---:|",
    ]
    for name, (med, lo, hi), (rmed, rlo, rhi) in rows:
        pure = "torch" not in name
        ok = ("yes" if med < GOAL_S else "no") if pure else "-"
        lines.append(f"| `{name}` | {med:.3f} [{lo:.3f}, {hi:.3f}] | {ok} | {rmed:.3f} [{rlo:.3f}, {rhi:.3f}] |")
    text = "\n".join(lines) + "\n"
    if args.md is not None:
        tmp_md = args.md.with_suffix(".tmp")
        tmp_md.write_text(text)
        tmp_md.replace(args.md)
    print(text)


if __name__ == "__main__":
    main()
