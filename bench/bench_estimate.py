"""Benchmark ``memaudit estimate``: configurations per second on one CPU core.

Measures, on the sweep grid ``--recipe all --tokens 1024:131072:x2 --groups 1,8,64`` (hidden 3072,
ffn 1536, every path TE would take by default plus the explicit alternatives that are valid):

* ``configs_per_second``: resolve + closed-form totals (what sweeps, plots and the sweep table use);
* ``rows_configs_per_second``: resolve + the full per-buffer rows (a CaseReport per config);
* ``sweep_1000_seconds``: a 1,000-point sweep computed and rendered as the CLI's text table.

Usage: ``python bench/bench_estimate.py [--seconds 2] [--json PATH]``. Prints the JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memaudit.errors import UsageError  # noqa: E402
from memaudit.render.estimate import sweep_lines  # noqa: E402
from memaudit.te.estimate import PATHS, estimate_config, estimate_totals, resolve, sweep_point  # noqa: E402
from memaudit.te.recipes import RECIPES  # noqa: E402


def grid() -> list[tuple[str, int, int, int, int, str | None]]:
    """Valid (recipe, tokens, hidden, ffn, groups, path) points of the documented sweep."""
    out = []
    for recipe in RECIPES:
        for tokens in (1024 << i for i in range(8)):
            for groups in (1, 8, 64):
                for path in (None, *PATHS):
                    try:
                        resolve(recipe, tokens, 3072, 1536, groups, path=path)
                    except UsageError:
                        continue
                    out.append((recipe, tokens, 3072, 1536, groups, path))
    return out


def rate(fn, points, seconds: float) -> float:
    """Configurations per second of ``fn`` over ``points``, repeated for at least ``seconds``."""
    n = 0
    start = time.perf_counter()
    while True:
        for p in points:
            fn(p)
        n += len(points)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def totals(p) -> None:
    recipe, t, h, f, g, path = p
    estimate_totals(resolve(recipe, t, h, f, g, path=path))


def rows(p) -> None:
    recipe, t, h, f, g, path = p
    estimate_config(resolve(recipe, t, h, f, g, path=path))


def sweep_1000() -> float:
    """Seconds to compute and render a 1,000-point sweep (4 recipes x 250 token counts, G=8)."""
    start = time.perf_counter()
    pts = []
    for recipe in ("nvfp4", "mxfp8", "fp8-current", "bf16"):
        for t in range(1024, 256001, 1024):
            pts.append(sweep_point(recipe, t, 3072, 1536, 8))
    text = "\n".join(sweep_lines(pts, "te-2.20", None))
    assert len(pts) == 1000 and all(p.totals is not None for p in pts) and text
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="minimum time per measurement")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one CPU core
        except OSError:
            pass
    points = grid()
    result = {
        "benchmark": "memaudit estimate",
        "grid_points": len(points),
        "configs_per_second": round(rate(totals, points, args.seconds)),
        "rows_configs_per_second": round(rate(rows, points, args.seconds)),
        "sweep_1000_seconds": round(min(sweep_1000() for _ in range(3)), 4),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "one_core": hasattr(os, "sched_setaffinity"),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
