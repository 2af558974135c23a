#!/usr/bin/env python
"""``report()`` cost per row for a stack of TE grouped-MLP layers (GPU), and the operands it names.

    python bench/perf/te_stack_report.py --out stack.json [--depths 3,12,48] [--recipe bf16]

Each depth: one captured forward, then the median of 3 ``cap.report(outputs=y)`` calls (wall ms,
µs per row) and how many rows TE's fuser roles named (``fc1.input`` ...), per layer: a stack whose
layers are told apart names the same operands in every layer.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--depths", default="3,12,48")
    ap.add_argument("--recipe", default="bf16")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--groups", type=int, default=8)
    args = ap.parse_args()
    import memaudit
    from memaudit.te.targets.grouped_mlp import import_te, make_recipe, set_fused_env

    set_fused_env(None)
    te, why = import_te()
    if te is None:
        raise SystemExit(why)
    recipe = make_recipe(args.recipe)
    g, t, h, f = args.groups, args.tokens, args.hidden, args.ffn
    splits = torch.full((g,), t // g, dtype=torch.int64, device="cuda")
    points = []
    for depth in (int(d) for d in args.depths.split(",")):
        layers = [
            te.ops.Sequential(
                te.ops.GroupedLinear(g, h, 2 * f, bias=False, device="cuda", dtype=torch.bfloat16),
                te.ops.ScaledSwiGLU(glu_interleave_size=32),
                te.ops.GroupedLinear(g, f, h, bias=False, device="cuda", dtype=torch.bfloat16),
            )
            for _ in range(depth)
        ]
        x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        probs = torch.rand(t, device="cuda", requires_grad=True)
        with memaudit.capture() as cap:
            y = x
            with te.autocast(enabled=recipe is not None, recipe=recipe):
                for layer in layers:
                    y = layer(y, splits, probs, splits)
        times, report = [], None
        for _ in range(3):
            c0 = time.perf_counter()
            report = cap.report(outputs=y)
            times.append((time.perf_counter() - c0) * 1e3)
        assert report is not None
        ms = statistics.median(times)
        named = collections.Counter(
            r.operand for r in report.rows if r.operand and "." in r.operand and ":" not in r.operand
        )
        per_layer = {k: v // depth if v % depth == 0 else v / depth for k, v in sorted(named.items())}
        points.append(
            {
                "depth": depth,
                "rows": len(report.rows),
                "report_ms": round(ms, 3),
                "report_us_per_row": round(ms * 1e3 / max(len(report.rows), 1), 3),
                "named_rows": sum(named.values()),
                "named_per_layer": per_layer,
            }
        )
        print(json.dumps(points[-1]), flush=True)
        del cap, report, y, x, layers
        torch.cuda.empty_cache()
    Path(args.out).write_text(
        json.dumps(
            {"recipe": args.recipe, "shape": {"tokens": t, "hidden": h, "ffn": f, "groups": g}, "points": points},
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
