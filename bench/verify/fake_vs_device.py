#!/usr/bin/env python
"""Are an emulated run on a GPU and the same run on fake CUDA (no GPU) the same report?

    python bench/verify/fake_vs_device.py DEVICE.json FAKE.json [DEVICE2.json FAKE2.json ...] [--md OUT.md]

Per pair: every case's rows, field by field (bench/verify/same_rows.py), and every case field (status,
reason, totals, path, modules, warnings, completeness, emulation) except the one that names the
machine (``emulation.machine.host``). Exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CASE_FIELDS = ("id", "status", "reason", "totals", "path", "modules", "warnings", "complete", "emulation")


def _case_fields(case: dict[str, Any]) -> dict[str, Any]:
    out = {k: case.get(k) for k in CASE_FIELDS}
    emulation = json.loads(json.dumps(out["emulation"])) if out["emulation"] else None
    if emulation and isinstance(emulation.get("machine"), dict):
        emulation["machine"].pop("host", None)
    out["emulation"] = emulation
    return out


def _delta(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    x, y = a.get(key), b.get(key)
    if isinstance(x, list) and isinstance(y, list):
        return (
            f"device only {sorted(set(map(str, x)) - set(map(str, y)))}, fake only "
            f"{sorted(set(map(str, y)) - set(map(str, x)))}"
        )
    return f"{x!r} vs {y!r}"


def compare(device: Path, fake: Path) -> tuple[int, int, list[str]]:
    """(cases, rows, differences) of one pair."""
    a, b = (json.loads(p.read_text())["cases"] for p in (device, fake))
    diffs: list[str] = []
    if [c["id"] for c in a] != [c["id"] for c in b]:
        return len(a), 0, ["the case lists differ"]
    rows = 0
    for ca, cb in zip(a, b, strict=True):
        fa, fb = _case_fields(ca), _case_fields(cb)
        for k in CASE_FIELDS:
            if fa[k] == fb[k]:
                continue
            if k == "emulation" and fa[k] and fb[k]:
                keys = sorted(x for x in set(fa[k]) | set(fb[k]) if fa[k].get(x) != fb[k].get(x))
                diffs.append(
                    f"{ca['id']}: emulation {', '.join(keys)}: {', '.join(_delta(fa[k], fb[k], x) for x in keys)}"
                )
            else:
                diffs.append(f"{ca['id']}: {k}")
        ra, rb = ca.get("rows") or [], cb.get("rows") or []
        rows += len(ra)
        if len(ra) != len(rb):
            diffs.append(f"{ca['id']}: {len(ra)} rows on the device, {len(rb)} on fake CUDA")
            continue
        diffs += [f"{ca['id']}: row {x.get('index')}" for x, y in zip(ra, rb, strict=True) if x != y]
    return len(a), rows, diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give the reports in pairs: DEVICE.json FAKE.json")
    lines = ["| device report | fake-CUDA report | cases | rows | differences |", "|---|---|---:|---:|---:|"]
    total = 0
    for device, fake in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        cases, rows, diffs = compare(device, fake)
        total += len(diffs)
        lines.append(f"| `{device.name}` | `{fake.name}` | {cases} | {rows:,} | {len(diffs)} |")
        lines += [f"    {d}" for d in diffs[:20]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md is not None:
        args.md.write_text(text)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
