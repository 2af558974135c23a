#!/usr/bin/env python
"""The gate on the worst rank: a per-rank budget set between the ranks' saved bytes fails
on the worst rank, and only there.

For each planned case of the merged ``REPORT`` whose ranks save different bytes, writes a scenario
with ``max_bytes`` halfway between the least and the most a rank saves, runs ``memaudit check``
on the report with it, and records the exit status and which ranks failed (the worst ranks must,
the others must not). Writes ``--out`` (JSON) with the check's output; exit 1 when the gate did not
fail exactly on the ranks above the budget.

    python bench/verify/dist_gate.py reports/h200x2/ep-skewed.json --out reports/h200x2/gate-skewed.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def scenario(case, budget: int) -> str:
    dims = "\n".join(f"{k} = {v}" for k, v in case.dims.items())
    return (
        f'name = "worst-rank-gate"\n[cases]\ntarget = "{case.target}"\nrecipes = ["{case.recipe}"]\ngroups = '
        f"[{case.groups}]\n"
        f'{dims}\ndtype = "{case.dtype}"\n\n[[budget]]\nname = "per-rank-saved"\nmax_bytes = {budget}\n'
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from memaudit.judge.integrity import read_report

    merged = read_report(args.report)
    results, ok = [], True
    for s in merged.dist.summary or () if merged.dist is not None else ():
        if s.saved is None or s.saved.min == s.saved.max:
            results.append(
                {"case": s.case, "skipped": "every rank saves the same bytes" if s.saved else "not every rank is ok"}
            )
            continue
        budget = (s.saved.min + s.saved.max) // 2
        case = next(c for c in merged.cases if c.id.startswith(s.case + "/"))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "gate.toml"
            path.write_text(scenario(case, budget), encoding="utf-8")
            proc = subprocess.run(
                [sys.executable, "-m", "memaudit", "check", str(args.report), "--scenario", str(path)],
                capture_output=True,
                text=True,
                env={**os.environ, "COLUMNS": "200"},
            )
        over = [r for r, b in zip(s.ranks, s.saved.per_rank, strict=True) if b > budget]
        failed = sorted(
            c.dist.rank
            for c in merged.cases
            if c.dist is not None and c.id.startswith(s.case + "/") and f"FAIL {c.id}" in proc.stdout
        )
        good = proc.returncode == 1 and failed == over and s.saved.worst_rank in failed
        ok = ok and good
        results.append(
            {
                "case": s.case,
                "budget_bytes": budget,
                "per_rank_saved": s.saved.per_rank,
                "worst_rank": s.saved.worst_rank,
                "exit_code": proc.returncode,
                "ranks_over_budget": over,
                "ranks_failed": failed,
                "as_expected": good,
                "check_output": proc.stdout[-4000:],
            }
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"report": str(args.report), "cases": results}, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    print(f"gate on the worst rank {'as expected' if ok else 'NOT as expected'}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
