#!/usr/bin/env python
"""Cost per saved tensor as a whole model grows, on CPU.

A deep PyTorch Transformer (``torch.nn.TransformerEncoder`` layers, tiny width so the model's own
compute stays small) at 1×, 4× and 16× depth. For each depth, in one process, medians of
``--reps`` repetitions of:

* the forward+backward step bare and under ``capture()`` (the capture's extra µs per saved tensor),
* ``cap.report(outputs=y)``, ``cap.report()`` without outputs (walks from every live tensor),
* ``report.to_dict()`` and ``json.dumps`` of it,

each divided by the number of rows (or saved tensors). The goals: report(outputs) ≤ 10 µs/row,
report() ≤ 20 µs/row, JSON ≤ 5 µs/row, and all flat as the model grows.

    python bench/perf/scaling.py --out reports/bench/cpu-scaling.json     # writes .json and .md
    python bench/perf/scaling.py --quick --out /tmp/s.json                 # 1×, 2× at a small base

On a shared machine one run moves by ±30%. Run the new and the old code alternately (each its
own checkout), then combine each side's runs into per-point medians with their spread, the old
side shown as the "before" line:

    python bench/perf/scaling.py --combine new-*.json --before old.json --before-label "main abc1234" --out OUT.json
    python bench/perf/scaling.py --combine old-*.json --out old.json      # (old.json: the old runs combined)
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

# CPU time of this thread: on a shared machine, time spent descheduled is not counted (torch runs
# with one thread here, so the step's compute is this thread's too).
clock = time.thread_time

GOALS_US = {"report_outputs_us_per_row": 10.0, "report_no_outputs_us_per_row": 20.0, "json_us_per_row": 5.0}


def build(layers: int, width: int, seq: int) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=2 * width, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
    model.train()
    x = torch.randn(2, seq, width, requires_grad=True)
    return model, x


def _med(xs: list[float]) -> float:
    return float(statistics.median(xs))


def measure(layers: int, width: int, seq: int, reps: int) -> dict[str, Any]:
    from memaudit.capture import capture

    model, x = build(layers, width, seq)

    def step(cap: Any = None) -> torch.Tensor:
        return model(x).sum()

    t_bare, t_cap, t_rep_out, t_rep_all, t_dict, t_json = [], [], [], [], [], []
    n_saved = rows = 0
    json_bytes = 0
    for i in range(reps + 1):
        gc.collect()
        c0 = clock()
        y = step()
        y.backward()
        t1 = clock() - c0
        del y
        gc.collect()
        c0 = clock()
        with capture() as cap:
            y = step()
            t_fwd = clock() - c0
            r0 = clock()
            rep = cap.report(outputs=y)
            r1 = clock()
            rep_all = cap.report()
            r2 = clock()
            d = rep.to_dict()
            r3 = clock()
            s = json.dumps(d)
            r4 = clock()
            b0 = clock()
            y.backward()
            t_bwd = clock() - b0
        n_saved = len(cap.records)
        rows = len(rep.rows)
        if len(rep_all.rows) != rows:
            raise SystemExit(f"report() found {len(rep_all.rows)} rows, report(outputs=y) {rows}")
        json_bytes = len(s)
        del y, rep, rep_all, d, s, cap
        if i == 0:
            continue  # warm-up
        t_bare.append(t1)
        t_cap.append(t_fwd + t_bwd)
        t_rep_out.append(r1 - r0)
        t_rep_all.append(r2 - r1)
        t_dict.append(r3 - r2)
        t_json.append(r4 - r3)
    gc.collect()
    us = 1e6
    return {
        "layers": layers,
        "saved_tensors": n_saved,
        "rows": rows,
        "json_bytes": json_bytes,
        "bare_step_ms": round(_med(t_bare) * 1e3, 3),
        "captured_step_ms": round(_med(t_cap) * 1e3, 3),
        "capture_extra_us_per_saved": round((_med(t_cap) - _med(t_bare)) * us / max(n_saved, 1), 3),
        "report_outputs_ms": round(_med(t_rep_out) * 1e3, 3),
        "report_no_outputs_ms": round(_med(t_rep_all) * 1e3, 3),
        "to_dict_ms": round(_med(t_dict) * 1e3, 3),
        "json_dumps_ms": round(_med(t_json) * 1e3, 3),
        "report_outputs_us_per_row": round(_med(t_rep_out) * us / max(rows, 1), 3),
        "report_no_outputs_us_per_row": round(_med(t_rep_all) * us / max(rows, 1), 3),
        "json_us_per_row": round((_med(t_dict) + _med(t_json)) * us / max(rows, 1), 3),
        "spread_report_outputs_ms": [round(min(t_rep_out) * 1e3, 3), round(max(t_rep_out) * 1e3, 3)],
        "spread_report_no_outputs_ms": [round(min(t_rep_all) * 1e3, 3), round(max(t_rep_all) * 1e3, 3)],
    }


PER_ROW = ("report_outputs_us_per_row", "report_no_outputs_us_per_row", "json_us_per_row")


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of this script on the same model and depths as one result: each number of a point is
    the median over the runs; ``spread_runs`` holds the min and max of the per-row costs."""
    first = runs[0]
    for r in runs[1:]:
        if r["model"] != first["model"] or [p["layers"] for p in r["points"]] != [p["layers"] for p in first["points"]]:
            raise SystemExit(f"runs differ in model or depths: {r['model']} vs {first['model']}")
    points = []
    for i, p0 in enumerate(first["points"]):
        same = [r["points"][i] for r in runs]
        p: dict[str, Any] = {}
        for k, v in p0.items():
            if k.startswith("spread_"):
                continue  # one run's repetitions: replaced by the spread over the runs
            if isinstance(v, bool) or not isinstance(v, int | float) or k in ("layers", "scale"):
                p[k] = v
            else:
                m = _med([q[k] for q in same])
                p[k] = int(m) if all(type(q[k]) is int for q in same) and m == int(m) else round(m, 3)
        p["spread_runs"] = {k: [min(q[k] for q in same), max(q[k] for q in same)] for k in PER_ROW}
        points.append(p)
    out = dict(first, points=points, runs=len(runs), created=max(r["created"] for r in runs))
    out["goals_met"] = {k: all(p[k] <= v for p in points) for k, v in GOALS_US.items()}
    per = [p["report_outputs_us_per_row"] for p in points]
    out["flat_report_outputs_max_over_min"] = round(max(per) / min(per), 3) if per and min(per) > 0 else None
    return out


def render_md(r: dict[str, Any]) -> str:
    runs = (
        f"medians of {r['runs']} runs (each the median of {r['reps']} repetitions)"
        if r.get("runs")
        else f"medians of {r['reps']} repetitions"
    )
    out = [
        "# memaudit on CPU: cost per saved tensor as the model grows",
        "",
        f"Created {r['created']} · {r['model']} · {runs}, thread CPU time · "
        + ", ".join(f"{k} `{v}`" for k, v in r["environment"].items()),
        "",
        "| depth | layers | saved tensors | rows | capture extra µs/saved | report(outputs) µs/row | report() µs/row "
        "| to_dict+JSON µs/row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in r["points"]:
        out.append(
            f"| {p['scale']}× | {p['layers']} | {p['saved_tensors']:,} | {p['rows']:,} | "
            f"{p['capture_extra_us_per_saved']} "
            f"| {p['report_outputs_us_per_row']} | {p['report_no_outputs_us_per_row']} | {p['json_us_per_row']} |"
        )
    out += ["", "Goals: " + ", ".join(f"{k} ≤ {v} µs" for k, v in GOALS_US.items()) + "; flat across depths.", ""]
    met = r.get("goals_met", {})
    out.append("Met: " + ", ".join(f"{k} {'✅' if v else '❌'}" for k, v in met.items()))
    if r.get("runs"):
        out += [
            "",
            "Spread over the runs (min–max, µs/row): "
            + "; ".join(
                f"{p['scale']}× "
                + ", ".join(
                    f"{short} {lo}–{hi}"
                    for short, (lo, hi) in zip(
                        ("report(outputs)", "report()", "JSON"), (p["spread_runs"][k] for k in PER_ROW), strict=True
                    )
                )
                for p in r["points"]
            ),
        ]
    before = r.get("before")
    if before:
        runs_b = f"medians of {before['runs']} runs" if before.get("runs") else "one run"
        out += [
            "",
            f"Before ({before['label']}, same machine, {runs_b} alternating with the runs above; µs/row): "
            + "; ".join(
                f"{p['scale']}× report(outputs) {p['report_outputs_us_per_row']}, report() "
                f"{p['report_no_outputs_us_per_row']}, "
                f"JSON {p['json_us_per_row']}"
                for p in before["points"]
            )
            + ".",
        ]
        ratios = [
            f"{p['scale']}× "
            + ", ".join(
                f"{short} {q[k] / p[k]:.2f}×"
                for short, k in zip(("report(outputs)", "report()", "JSON"), PER_ROW, strict=True)
            )
            for p, q in zip(r["points"], before["points"], strict=True)
        ]
        out += ["", "Old over new: " + "; ".join(ratios) + "."]
    out += [
        "",
        "On this shared 2-core machine single numbers move by ±30%; the ratios before/after are the stable part.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--base-layers", type=int, default=28, help="layers at 1× (scales 1, 4, 16)")
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="base 4 layers, scales 1,2, 1 rep")
    ap.add_argument(
        "--combine", nargs="+", metavar="JSON", help="measure nothing: combine these runs (medians per point)"
    )
    ap.add_argument(
        "--before", metavar="JSON", help="a run (or runs combined) of the old code, shown beside the result"
    )
    ap.add_argument("--before-label", default="old code", help="what --before ran (a branch and commit)")
    args = ap.parse_args(argv)
    if args.combine:
        r = combine([json.loads(Path(f).read_text()) for f in args.combine])
        return _write(r, args)
    if args.quick:
        args.base_layers, args.scales, args.reps = 4, "1,2", 1
    torch.set_num_threads(1)
    points = []
    for s in (int(v) for v in args.scales.split(",")):
        p = measure(args.base_layers * s, args.width, args.seq, args.reps)
        p["scale"] = s
        points.append(p)
        print(json.dumps(p), flush=True)
    import memaudit

    r: dict[str, Any] = {
        "schema": "memaudit.bench.scaling/1",
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": f"torch.nn.TransformerEncoder, width {args.width}, seq {args.seq}, batch 2, base {args.base_layers} "
        "layers",
        "reps": args.reps,
        "clock": "time.thread_time (CPU time of the measuring thread; torch.set_num_threads(1))",
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "memaudit": getattr(memaudit, "__version__", "?"),
            "machine": platform.machine(),
            "threads": 1,
        },
        "goals_us": GOALS_US,
        "points": points,
    }
    r["goals_met"] = {k: all(p[k] <= v for p in points) for k, v in GOALS_US.items()}
    per = [p["report_outputs_us_per_row"] for p in points]
    r["flat_report_outputs_max_over_min"] = round(max(per) / min(per), 3) if per and min(per) > 0 else None
    return _write(r, args)


def _write(r: dict[str, Any], args: argparse.Namespace) -> int:
    if args.before:
        b = json.loads(Path(args.before).read_text())
        if [p["layers"] for p in b["points"]] != [p["layers"] for p in r["points"]]:
            raise SystemExit("--before ran other depths")
        r["before"] = {
            "label": args.before_label,
            "runs": b.get("runs"),
            "created": b["created"],
            "points": [{k: p[k] for k in ("scale", "layers", "rows", *PER_ROW)} for p in b["points"]],
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2) + "\n")
    out.with_suffix(".md").write_text(render_md(r))
    print(render_md(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
