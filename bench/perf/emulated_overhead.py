#!/usr/bin/env python
"""What ``capture()`` costs on TE's emulated sm100 forward ("the same for
emulated runs"), judged over the floor hook of the same run (GPU, TE importable).

    python bench/perf/emulated_overhead.py --out reports/bench/h200-emulated.json [--runs 3]

Emulated runs are forward only (``--kernels emulated``: TE's real Python, stand-in kernels, no
backward), so each variant is one forward, its outputs then dropped (the graph is freed):
bare, the floor (a pack that appends shape, dtype and bytes and returns the tensor; an identity
unpack) and ``capture()``, in rotating order, wall time between device syncs. The emulation
context is entered inside every variant alike. ``--runs`` fresh processes each time
``--rounds`` rounds after ``--warmup``; per run the ratio capture/bare divided by floor/bare of the
same run, then the median, min and max over the runs. Recipes mxfp8 and nvfp4 on the fused
path (G=8; NVFP4's dense single-group branch fails under emulation), at the small and production
shapes of ``bench/perf/run.py``. A cell that fails is an ``errors`` entry; the others go on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHAPES = {
    "small": {"tokens": 2048, "hidden": 4096, "ffn": 2048, "groups": 8},
    "production": {"tokens": 65536, "hidden": 4096, "ffn": 2048, "groups": 8},
}
RECIPES = ("mxfp8", "nvfp4")


class _NoCap:
    def label(self, *args: Any, **kwargs: Any) -> None:
        return None


def measure(built: Any, rounds: int, warmup: int) -> dict[str, Any]:
    """Bare, floor and ``capture()`` forwards of one built case, in rotating order."""
    import torch

    from memaudit.capture import capture

    meta: list[Any] = []
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        meta.append((tuple(t.shape), t.dtype, t.numel() * t.element_size()))
        return t

    def bare() -> None:
        built.forward(_NoCap())

    def floor() -> None:
        meta.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            built.forward(_NoCap())

    def captured() -> None:
        with capture() as cap:
            built.forward(cap)
        saved[0] = len(cap.records)

    variants = {"bare": bare, "floor": floor, "capture": captured}
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(warmup + rounds):
        order = names[r % 3 :] + names[: r % 3]
        for name in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            variants[name]()  # the outputs are dropped on return: the graph is freed
            torch.cuda.synchronize()
            if r >= warmup:
                times[name].append((time.perf_counter() - t0) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "median_ms": {k: round(v, 4) for k, v in med.items()},
        "capture_over_bare": med["capture"] / med["bare"],
        "floor_over_bare": med["floor"] / med["bare"],
        "over_floor": med["capture"] / med["floor"],
        "saved_tensors": saved[0],
    }


def child(rounds: int, warmup: int) -> dict[str, Any]:
    import torch

    from memaudit.spec import CaseSpec
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget, import_te

    import_te()
    out: dict[str, Any] = {"cells": {}, "errors": {}}
    for shape, dims in SHAPES.items():
        for recipe in RECIPES:
            key = f"{shape}/{recipe}"
            try:
                target = TEGroupedMLPTarget().configure({"kernels": "emulated", "arch": "sm100", "fused": True})
                options = dict(target.options)
                spec = CaseSpec.make(target, recipe, device="cuda", options=options, **dims)
                out["cells"][key] = measure(target.build(spec), rounds, warmup)
                torch.cuda.empty_cache()
            except Exception as exc:  # noqa: BLE001 - one cell's failure never takes down the others
                out["errors"][key] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def summarize(runs: list[dict[str, Any]], errors: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Median, min and max over the runs of each cell's ratios."""
    summary: dict[str, Any] = {}
    for key in sorted({k for r in runs for k in r["cells"]}):
        cells = [r["cells"][key] for r in runs if key in r["cells"]]
        summary[key] = {
            name: {
                "median": round(statistics.median(c[name] for c in cells), 4),
                "min": round(min(c[name] for c in cells), 4),
                "max": round(max(c[name] for c in cells), 4),
            }
            for name in ("over_floor", "capture_over_bare", "floor_over_bare")
        }
        summary[key]["runs"] = len(cells)
        summary[key]["saved_tensors"] = cells[-1]["saved_tensors"]
        summary[key]["bare_ms_median"] = round(statistics.median(c["median_ms"]["bare"] for c in cells), 3)
    return {
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": f"python bench/perf/emulated_overhead.py --runs {args.runs} --rounds {args.rounds} --warmup "
        f"{args.warmup}",
        "settings": {
            "runs": args.runs,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "shapes": SHAPES,
            "recipes": list(RECIPES),
            "kernels": "emulated",
            "arch": "sm100",
            "fused": True,
        },
        "over_floor": summary,
        "cell_errors": {k: v for r in runs for k, v in r["errors"].items()},
        "errors": errors,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.rounds, args.warmup)), flush=True)
        return 0
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    result: dict[str, Any] = {}
    for i in range(args.runs):
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--out",
                args.out,
                "--child",
                "--rounds",
                str(args.rounds),
                "--warmup",
                str(args.warmup),
            ],
            capture_output=True,
            text=True,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            errors.append(f"run {i}: exit {proc.returncode}: {proc.stderr[-800:]}")
        else:
            runs.append(json.loads(line[len("RESULT ") :]))
            print(
                f"run {i}: " + ", ".join(f"{k} {v['over_floor']:.4f}" for k, v in runs[-1]["cells"].items()), flush=True
            )
        result = summarize(runs, errors, args)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")  # after every run: a cut-off call keeps them
    summary = result.get("over_floor", {})
    for key, s in summary.items():
        o = s["over_floor"]
        print(
            f"{key}: over the floor {o['median']:.4f} ({o['min']:.4f}-{o['max']:.4f}), {s['runs']} runs, "
            f"{s['saved_tensors']} saved tensors, bare {s['bare_ms_median']} ms"
        )
    for k, v in result.get("cell_errors", {}).items():
        print(f"{k}: {v}")
    return 0 if runs else 1


if __name__ == "__main__":
    sys.exit(main())
