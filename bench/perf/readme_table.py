#!/usr/bin/env python
"""Regenerate the overhead table of docs/investigations/overhead.md from a bench JSON (``bench/perf/run.py`` output).

    python bench/perf/readme_table.py                                   # reports/bench/h200.json ->
    docs/investigations/overhead.md
    python bench/perf/readme_table.py --json OUT/bench/h200.json --check   # exit 1 if the page is stale

Rewrites only the text between ``<!-- overhead-table:start -->`` and ``<!-- overhead-table:end -->``.
Reads JSON from before and after the runs were repeated (without ``runs``, a single run is assumed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- overhead-table:start -->", "<!-- overhead-table:end -->"
RECIPES = ("bf16", "fp8-current")
GOALS_OVER_FLOOR = {"production": 1.01, "small": 1.05}


def _x(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}×"


def _spread(s: dict[str, Any] | None, single: float | None) -> str:
    if s and s.get("min") is not None and s.get("max") is not None and s["min"] != s["max"]:
        return f"{_x(s.get('median'))} ({s['min']:.3f}–{s['max']:.3f})"
    return _x(s.get("median") if s else single)


def _num(v: Any, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{digits}f}"


def render(r: dict[str, Any]) -> str:
    runs = int(r.get("runs") or 1)
    shapes = (r.get("settings") or {}).get("shapes") or {}
    prod = shapes.get("production") or {}
    small = shapes.get("small") or {}
    label = {
        "production": f"production (T={prod.get('tokens')}, H={prod.get('hidden')}, F={prod.get('ffn')}, "
        f"G={prod.get('groups')})",
        "small": f"small (T={small.get('tokens')})",
    }
    how = f"median (min–max) of {runs} independent invocations" if runs > 1 else "one invocation"
    smoke = r.get("mode") == "cpu-smoke"
    where, clock = (
        ("a CPU smoke run (proves the harness, not the targets)", "perf_counter")
        if smoke
        else ("the H200", "CUDA events")
    )
    lines = [
        f"`bash bench/device/h200.sh OUT --bench` on {where} ({r.get('created')}): {how}, each "
        f"{(r.get('settings') or {}).get('run_pairs') or (r.get('settings') or {}).get('pairs')} alternating rounds of "
        f"bare / `capture()` / floor, {clock} (see [bench.md](bench.md) and `reports/bench/h200.md`). "
        "The floor is a minimal metadata-only hook pair in the same runs; memaudit is judged over it.",
        "",
        "| | bf16 | fp8-current | goal |",
        "|---|---|---|---|",
    ]
    for shape in ("production", "small"):
        spread = r.get(f"overhead_ratio_spread_{shape}") or {}
        fspread = r.get(f"floor_ratio_spread_{shape}") or {}
        over = r.get(f"overhead_over_floor_{shape}") or {}
        single = r.get(f"overhead_ratio_{shape}") or {}
        fsingle = r.get(f"floor_ratio_{shape}") or {}
        cells = [_spread(spread.get(rc), single.get(rc)) for rc in RECIPES]
        lines.append(f"| capture() / bare, {label[shape]} | " + " | ".join(cells) + " | |")
        cells = [_spread(fspread.get(rc), fsingle.get(rc)) for rc in RECIPES]
        lines.append(f"| floor / bare, {shape} | " + " | ".join(cells) + " | |")
        cells = []
        for rc in RECIPES:
            o = over.get(rc)
            if o is None and single.get(rc) is not None and fsingle.get(rc):
                o = {"median": single[rc] / fsingle[rc]}
            cells.append(_spread(o, None))
        lines.append(f"| **over the floor**, {shape} | " + " | ".join(cells) + f" | ≤ {GOALS_OVER_FLOOR[shape]:.2f}× |")
    pack = r.get("pack_us_per_tensor") or {}
    cells = []
    for rc in RECIPES:
        p, s = ((pack.get("production") or {}).get(rc) or {}), ((pack.get("small") or {}).get(rc) or {})
        cells.append(f"{_num(p.get('direct'))} / {_num(s.get('direct'))}")
    lines.append("| pack hook, µs per saved tensor (production / small) | " + " | ".join(cells) + " | |")
    anchor = r.get("anchor_overhead_ratio_production") or {}
    lines.append(
        "| MemTracker (anchor), production, one invocation | "
        + " | ".join(_x(anchor.get(rc)) for rc in RECIPES)
        + " | |"
    )
    extra = r.get("extra_peak_bytes") or {}
    if isinstance(extra, dict):
        cells = []
        for rc in RECIPES:
            vals = {(extra.get(s) or {}).get(rc) for s in ("production", "small")} - {None}
            cells.append(", ".join(str(v) for v in sorted(vals)) if vals else "n/a")
        lines.append("| extra peak bytes | " + " | ".join(cells) + " | 0 |")
    sc = r.get("scaling")
    if isinstance(sc, dict) and sc.get("points"):
        lines += [
            "",
            f"Whole model ({sc.get('model')}, T={sc['shape'].get('tokens')}, H={sc['shape'].get('hidden')}, "
            f"G={sc['shape'].get('groups')}): cost per saved tensor as it grows.",
            "",
            "| recipe | layers | saved tensors | capture() / bare | capture µs/saved | report(outputs) µs/row | "
            "report() µs/row | JSON µs/row |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in sc["points"]:
            lines.append(
                f"| {p['recipe']} | {p['depth']} | {p['saved_tensors']:,} | {_x(p.get('ratio'))} | "
                f"{_num(p.get('capture_extra_us_per_saved'), 2)} "
                f"| {_num(p.get('report_outputs_us_per_row'), 2)} | {_num(p.get('report_no_outputs_us_per_row'), 2)} "
                f"| {_num(p.get('json_us_per_row'), 2)} |"
            )
    lines.append("")
    tail = []
    if r.get("matrix_seconds") is not None:
        tail.append(
            f"`memaudit run --recipe all --groups 1,4,8` takes {r['matrix_seconds']:.1f} s including Python start and "
            "TE import."
        )
    if r.get("estimate_configs_per_second") is not None:
        full = r.get("estimate_full_configs_per_second")
        tail.append(
            f"The estimator computes {r['estimate_configs_per_second']:,.0f} configurations/s (totals)"
            + (f" and {full:,.0f}/s with full rows." if full is not None else ".")
        )
    if r.get("meta") is None:
        tail.append(f"Meta-device timings: {r.get('meta_note') or 'not in this run'}.")
    tail.append("The hook never syncs the device (`tests/capture/test_no_sync_gpu.py`).")
    lines.append(" ".join(tail))
    return "\n".join(lines)


def rewrite(readme: str, table: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"the page has no {START} … {END} markers")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=str(ROOT / "reports" / "bench" / "h200.json"))
    ap.add_argument("--readme", default=str(ROOT / "docs" / "investigations" / "overhead.md"))
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the page's table differs")
    args = ap.parse_args(argv)
    r = json.loads(Path(args.json).read_text())
    path = Path(args.readme)
    old = path.read_text()
    new = rewrite(old, render(r))
    if args.check:
        if new != old:
            print(f"{path.name}: overhead table is stale; run python bench/perf/readme_table.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        path.write_text(new)
    print(f"{path.name}: overhead table {'rewritten' if new != old else 'unchanged'} from {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
