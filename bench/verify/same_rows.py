#!/usr/bin/env python
"""Do two run reports hold the same rows? Case by case, row by row, every row field.

    python bench/verify/same_rows.py BEFORE.json AFTER.json [--fields index,op,...]

Prints one line per case that differs and a summary (cases, rows, rows that differ), and exits 1
when anything differs, 0 otherwise. Used to show that a change to the capture leaves what a
committed report says untouched (the H200 matrix before and after).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def rows_by_case(path: str) -> dict[str, list[dict[str, Any]]]:
    with open(path) as f:
        report = json.load(f)
    return {case["id"]: case.get("rows") or [] for case in report["cases"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--fields", help="comma-separated row fields to compare (default: every field)")
    ap.add_argument(
        "--ignore",
        default="",
        help="comma-separated row fields to leave out (e.g. module, for a report made before rows had one)",
    )
    args = ap.parse_args(argv)
    a, b = rows_by_case(args.before), rows_by_case(args.after)
    fields = args.fields.split(",") if args.fields else None
    ignore = set(filter(None, args.ignore.split(",")))
    rows = differ = 0
    bad: list[str] = []
    for case in sorted(set(a) | set(b)):
        ra, rb = a.get(case), b.get(case)
        if ra is None or rb is None:
            bad.append(f"{case}: only in {'after' if ra is None else 'before'}")
            continue
        if len(ra) != len(rb):
            bad.append(f"{case}: {len(ra)} rows before, {len(rb)} after")
        for x, y in zip(ra, rb, strict=False):
            rows += 1
            keys = [k for k in (fields or sorted(set(x) | set(y))) if k not in ignore]
            diff = [k for k in keys if x.get(k) != y.get(k)]
            if diff:
                differ += 1
                bad.append(f"{case} row {x.get('index')}: {', '.join(diff)}")
    for line in bad[:50]:
        print(line)
    print(
        f"{len(set(a) | set(b))} cases, {rows} rows compared, {differ} differ"
        + ("" if not bad else f", {len(bad)} findings")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
