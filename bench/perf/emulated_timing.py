"""Wall time of the whole emulated matrix in one process (GPU): 6 recipes x G 1, 4, 8 x fused/unfused.

TE is imported first and timed apart, then both matrices run through ``run_matrix`` (forward
only, as ``--kernels emulated`` runs them). Usage: python bench/perf/emulated_timing.py [--tokens T ...]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2048)
    args = ap.parse_args()
    t0 = time.perf_counter()
    import torch  # noqa: F401

    from memaudit.runner import run_matrix
    from memaudit.spec import CaseSpec
    from memaudit.te.machine.recipes import RECIPES
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget, import_te

    import_te()
    t_import = time.perf_counter() - t0
    out = {"import_s": round(t_import, 2), "matrices": []}
    total = 0.0
    for fused in (True, False):
        target = TEGroupedMLPTarget().configure({"kernels": "emulated", "arch": "sm100", "fused": fused})
        options = dict(target.options)
        specs = [
            CaseSpec.make(
                target, r, g, tokens=args.tokens, hidden=args.hidden, ffn=args.ffn, device="cuda", options=options
            )
            for r in RECIPES
            for g in (1, 4, 8)
        ]
        t1 = time.perf_counter()
        report = run_matrix(target, specs, backward=False)
        dt = time.perf_counter() - t1
        total += dt
        out["matrices"].append(
            {
                "fused": fused,
                "cases": len(specs),
                "wall_s": round(dt, 2),
                "status": {s: sum(c.status == s for c in report.cases) for s in ("ok", "skipped", "error")},
            }
        )
    out["both_s"] = round(total, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
