"""What ``report()`` without outputs costs against ``report(outputs=...)`` (CPU).

    python bench/perf/report_cost.py [--rounds 31] [--heap 1000000] [--json OUT]

The pytest marker and fixture report without outputs at the end of every test, in a process
whose heap holds the test session (``--heap`` plain objects stand for it). Each round makes a
fresh capture of a small MLP's forward (a module: ``Linear -> Tanh -> Linear``), then times, back
to back and in that order, ``report(outputs=y)``, ``report()``, and after backward ``report()``
again (what a test's teardown asks). Reported: the median of each and the median over rounds of
each round's ratio to ``report(outputs=y)`` (ratios within one run, one process).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
import torch.nn as nn

import memaudit


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--heap", type=int, default=1_000_000)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    heap = [[] for _ in range(args.heap)]  # noqa: F841 - the session's objects, alive while timing
    torch.manual_seed(0)
    m, x = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64)), torch.randn(32, 64)
    times: dict[str, list[float]] = {"outputs": [], "no outputs": [], "no outputs, after backward": []}
    for _ in range(args.rounds + 3):  # three warm-up rounds
        with memaudit.capture() as cap:
            y = m(x)
        t0 = time.perf_counter()
        cap.report(outputs=y)
        t1 = time.perf_counter()
        cap.report()
        t2 = time.perf_counter()
        y.sum().backward()
        t3 = time.perf_counter()
        cap.report()
        t4 = time.perf_counter()
        times["outputs"].append(t1 - t0)
        times["no outputs"].append(t2 - t1)
        times["no outputs, after backward"].append(t4 - t3)
    out: dict[str, Any] = {"heap_objects": args.heap, "rounds": args.rounds}
    base = times["outputs"][3:]
    for name, ts in times.items():
        ts = ts[3:]
        out[name] = {
            "median_ms": round(statistics.median(ts) * 1e3, 3),
            "ratio_to_outputs": round(statistics.median(a / b for a, b in zip(ts, base, strict=True)), 2),
        }
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return out


if __name__ == "__main__":
    main()
