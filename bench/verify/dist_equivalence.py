#!/usr/bin/env python
"""Each rank of a merged report against one process at its split sizes ("0 rows differ").

For every rank's case of ``REPORT`` (from ``memaudit run`` under torchrun, target
``ep-grouped-mlp``), runs the rank's local experts alone in this process (the ``reference`` target,
or ``te-grouped-mlp`` with the same recipe, fused switch and kernels for ``--experts te``) at the
rank's split sizes, and compares the rows, the dispatch's aside (:mod:`memaudit.te.targets.ep_equivalence`).
Writes ``--out`` (JSON): per rank the rows compared, the rows that differ, the saved bytes on the
rank and alone, and what the dispatch keeps; exit 1 when a row differs.

    python bench/verify/dist_equivalence.py reports/h200x2/ep-uniform.json --device cuda --out
    reports/h200x2/equivalence-uniform.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--device", default=None, help="Where the single process runs (default: the case's device).")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from memaudit.environment import environment
    from memaudit.judge.integrity import read_report
    from memaudit.te.targets.ep_equivalence import dispatch_bytes, one_process, row_differences

    merged = read_report(args.report)
    ranks, differ = [], 0
    for case in merged.cases:
        if case.status != "ok" or case.dist is None:
            ranks.append({"case": case.id, "status": case.status, "reason": case.reason})
            continue
        single = one_process(case, args.device)
        diffs = (
            row_differences(case, single)
            if single.status == "ok"
            else [f"one process: {single.status}: {single.reason}"]
        )
        differ += len(diffs)
        ranks.append(
            {
                "case": case.id,
                "rank": case.dist.rank,
                "splits": list(case.splits),
                "single": single.id,
                "rows_compared": len([r for r in case.rows if not (r.operand or "").startswith("dispatch.")]),
                "rows_differ": len(diffs),
                "differences": diffs[:20],
                "saved_bytes_rank": case.totals.saved_bytes,
                "saved_bytes_single": single.totals.saved_bytes,
                "dispatch_bytes": dispatch_bytes(case),
                "rank_equals_single_plus_dispatch": case.totals.saved_bytes
                == single.totals.saved_bytes + dispatch_bytes(case),
            }
        )
    result = {
        "report": str(args.report),
        "rows_differ": differ,
        "ranks": ranks,
        "environment": environment(args.device or (merged.cases[0].device if merged.cases else "cpu")),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{differ} rows differ over {len(ranks)} rank case(s); wrote {args.out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
