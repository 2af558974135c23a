"""Benchmark ``memaudit estimate``: configurations per second on one CPU core.

Two grids (every point resolved as ``memaudit estimate`` resolves it; invalid points left out):

* the **bench/perf/run.py grid** (6 recipes x T 4096, 8192, 65536 x H 1024, 4096, 7168 x F 1024, 2048
  x G 1, 4, 8, 32, default paths; 432 points, 100 rows on average), measured as bench/perf/run.py
  measures ``estimate_full_configs_per_second``: ``estimate(make_spec(...))``, every row built;
* the **sweep grid** ``--recipe all --tokens 1024:131072:x2 --groups 1,8,64`` (H 3072, F 1536, the
  default path and every valid explicit one; 440 points, 188 rows on average): resolve + the
  closed-form totals (``configs_per_second``) and resolve + every row (``rows_configs_per_second``).

Each rate is the median of ``--windows`` windows of ``--seconds`` each, after one pass over the
grid (which compiles the structures the grid uses, see memaudit/te/estimate/compiled.py); the
first pass itself, from a cold cache, is reported as ``*_first_pass_configs_per_second``. The
windows repeat the grid, so whatever the estimator keeps between calls is warm there;
``rows_new_tokens_configs_per_second`` is resolve + every row for the sweep grid's structures at
token counts no other measurement uses (8192 + 128 k, not powers of two), each configuration
once: the structures are compiled, the rows H and F decide may be kept, the rest is new. Also
``sweep_1000_seconds``: a 1,000-point sweep computed and rendered as the CLI's text table.

    python bench/perf/bench_estimate.py [--json PATH]                       # this checkout
    python bench/perf/bench_estimate.py --compare-with OLD_TREE --json PATH  # before/after, alternating

``--compare-with`` runs this script on this checkout and on OLD_TREE (another checkout of
memaudit) in turn, ``--rounds`` times each, in fresh processes, and reports each side's medians
and the after/before ratios of the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _tree_from_argv() -> Path:
    if "--tree" in sys.argv:
        return Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
    return ROOT


sys.path.insert(0, str(_tree_from_argv()))

from memaudit.errors import UsageError  # noqa: E402
from memaudit.te.estimate import (  # noqa: E402
    PATHS,
    estimate,
    estimate_config,
    estimate_totals,
    make_spec,
    resolve,
    sweep_point,
)
from memaudit.te.machine.recipes import RECIPES  # noqa: E402

try:
    from memaudit.te.estimate import compiled as _compiled  # noqa: E402
except ImportError:  # a tree from before the compiled path
    _compiled = None

Point = tuple[Any, ...]


def grid() -> list[Point]:
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


def run_grid() -> list[Point]:
    """bench/perf/run.py's estimator grid: (recipe, tokens, hidden, ffn, groups), default paths."""
    out = []
    for recipe in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"):
        for tokens in (4096, 8192, 65536):
            for hidden in (1024, 4096, 7168):
                for ffn in (1024, 2048):
                    for groups in (1, 4, 8, 32):
                        try:
                            resolve(recipe, tokens, hidden, ffn, groups)
                        except UsageError:
                            continue
                        out.append((recipe, tokens, hidden, ffn, groups))
    return out


def totals(p: Point) -> None:
    recipe, t, h, f, g, path = p
    estimate_totals(resolve(recipe, t, h, f, g, path=path))


def rows(p: Point) -> None:
    recipe, t, h, f, g, path = p
    estimate_config(resolve(recipe, t, h, f, g, path=path))


def full(p: Point) -> None:
    estimate(make_spec(*p))


def first_pass(fn: Callable[[Point], Any], points: list[Point]) -> float:
    """Configurations per second of one pass from a cold cache (compiling included)."""
    if _compiled is not None:
        _compiled.clear()
    start = time.perf_counter()
    for p in points:
        fn(p)
    return len(points) / (time.perf_counter() - start)


def rates(fn: Callable[[Point], Any], points: list[Point], seconds: float, windows: int) -> list[float]:
    """Configurations per second of ``fn`` over ``points`` in each of ``windows`` windows of at
    least ``seconds``, after one warm pass."""
    for p in points:
        fn(p)
    out = []
    for _ in range(windows):
        n = 0
        start = time.perf_counter()
        while True:
            for p in points:
                fn(p)
            n += len(points)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        out.append(n / elapsed)
    return out


def new_token_rates(points: list[Point], seconds: float, windows: int) -> list[float]:
    """Configurations per second of :func:`rows` over the structures of ``points`` at token
    counts 8192 + 128 k, k = 1, 2, ... (valid for every structure of the sweep grid, and none of
    its token counts), each configuration once, in each of ``windows`` windows of at least
    ``seconds``; after one pass over ``points``."""
    structures = sorted({(r, g, path) for r, _, _, _, g, path in points}, key=repr)
    _, _, hidden, ffn, _, _ = points[0]
    for p in points:
        rows(p)
    k = 0
    out = []
    for _ in range(windows):
        n = 0
        start = time.perf_counter()
        while True:
            k += 1
            tokens = 8192 + 128 * k
            if tokens & (tokens - 1) == 0:
                continue
            for recipe, groups, path in structures:
                rows((recipe, tokens, hidden, ffn, groups, path))
            n += len(structures)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        out.append(n / elapsed)
    return out


def sweep_1000() -> float:
    """Seconds to compute and render a 1,000-point sweep (4 recipes x 250 token counts, G=8)."""
    from memaudit.te.estimate.tables import sweep_lines

    start = time.perf_counter()
    pts = []
    for recipe in ("nvfp4", "mxfp8", "fp8-current", "bf16"):
        for t in range(1024, 256001, 1024):
            pts.append(sweep_point(recipe, t, 3072, 1536, 8))
    text = "\n".join(sweep_lines(pts, "te-2.20", None))
    assert len(pts) == 1000 and all(p.totals is not None for p in pts) and text
    return time.perf_counter() - start


def _median(xs: list[float]) -> int:
    return round(statistics.median(xs))


def measure(seconds: float, windows: int) -> dict[str, Any]:
    sweep, runs = grid(), run_grid()
    full_first = first_pass(full, runs)
    rows_first = first_pass(rows, sweep)
    r_full = rates(full, runs, seconds, windows)
    r_rows = rates(rows, sweep, seconds, windows)
    r_tot = rates(totals, sweep, seconds, windows)
    r_new = new_token_rates(sweep, seconds, windows)
    return {
        "estimate_full_configs_per_second": _median(r_full),
        "estimate_full_windows": [round(x) for x in r_full],
        "estimate_full_first_pass_configs_per_second": round(full_first),
        "run_grid_points": len(runs),
        "configs_per_second": _median(r_tot),
        "configs_windows": [round(x) for x in r_tot],
        "rows_configs_per_second": _median(r_rows),
        "rows_windows": [round(x) for x in r_rows],
        "rows_first_pass_configs_per_second": round(rows_first),
        "rows_new_tokens_configs_per_second": _median(r_new),
        "rows_new_tokens_windows": [round(x) for x in r_new],
        "grid_points": len(sweep),
        "sweep_1000_seconds": round(min(sweep_1000() for _ in range(3)), 4),
        "compiled_path": _compiled is not None,
    }


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "one_core": hasattr(os, "sched_setaffinity"),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def compare(old: Path, rounds: int, seconds: float, windows: int) -> dict[str, Any]:
    """This checkout and ``old`` in turn, each in a fresh process, ``rounds`` times."""
    keys = (
        "estimate_full_configs_per_second",
        "rows_configs_per_second",
        "rows_new_tokens_configs_per_second",
        "configs_per_second",
    )
    sides: dict[str, list[dict[str, Any]]] = {"after": [], "before": []}
    for _ in range(rounds):
        for side, tree in (("after", ROOT), ("before", old)):
            argv = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--tree",
                str(tree),
                "--seconds",
                str(seconds),
                "--windows",
                str(windows),
            ]
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            sides[side].append(json.loads(out))
    result: dict[str, Any] = {"rounds": rounds}
    for side, runs in sides.items():
        result[side] = {
            k: [r[k] for r in runs]
            for k in (*keys, "estimate_full_first_pass_configs_per_second", "rows_first_pass_configs_per_second")
        }
        result[side]["compiled_path"] = runs[0]["compiled_path"]
        for k in keys:
            result[side][k + "_median"] = _median(result[side][k])
    result["ratio_same_round"] = {
        k: [round(a[k] / b[k], 2) for a, b in zip(sides["after"], sides["before"], strict=True)] for k in keys
    }
    result["ratio_median"] = {k: round(statistics.median(v), 2) for k, v in result["ratio_same_round"].items()}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one measurement window")
    ap.add_argument("--windows", type=int, default=5, help="windows per rate (the median is reported)")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    ap.add_argument("--tree", type=Path, default=None, help="import memaudit from this checkout (default: this one)")
    ap.add_argument("--compare-with", type=Path, default=None, help="another checkout: measure both, alternating")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare-with: runs of each side")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one CPU core
        except OSError:
            pass
    if args.compare_with is not None:
        result: dict[str, Any] = {
            "benchmark": "memaudit estimate, before/after",
            "compare": compare(args.compare_with, args.rounds, args.seconds, args.windows),
        }
    else:
        result = {"benchmark": "memaudit estimate", **measure(args.seconds, args.windows)}
    result["command"] = [
        "bench/perf/bench_estimate.py",
        *(a if not Path(a).is_absolute() else Path(a).name for a in sys.argv[1:]),
    ]
    result["settings"] = {"seconds": args.seconds, "windows": args.windows}
    result["environment"] = environment()
    text = json.dumps(result, indent=1)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
