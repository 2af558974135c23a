#!/usr/bin/env python
"""Render an allocator snapshot written by ``memaudit run --memory-snapshot``: the blocks it names
(a markdown table, each named block's requested bytes against its rows' storage bytes from the
run's JSON) and PyTorch's own ``memory_viz`` page for it (``torch.cuda._memory_viz.trace_plot``).

    python bench/verify/snapshot_render.py SNAPSHOT.pickle REPORT.json --md OUT.md [--html OUT.html]

Exits 1 when a saved storage has no named block or a named block's bytes differ from its rows'.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

from memaudit.capture.snapshot import FRAME_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", type=Path)
    ap.add_argument("report", type=Path)
    ap.add_argument("--md", type=Path, required=True)
    ap.add_argument("--html", type=Path)
    args = ap.parse_args(argv)
    snap = pickle.loads(args.snapshot.read_bytes())
    case = json.loads(args.report.read_text())["cases"][0]
    storages: dict[str, int] = {}
    for row in case["rows"]:
        if row.get("storage") and row.get("resides") == "device" and row["storage_bytes"] > 0:
            storages[row["storage"]] = row["storage_bytes"]  # a 0-byte storage is no allocation
    named = []
    for seg in snap["segments"]:
        for block in seg["blocks"]:
            frames = block.get("frames") or []
            if frames and frames[0]["filename"] == FRAME_FILE:
                named.append((frames[0]["name"], block["requested_size"], block["size"]))
    traces = sum(len(t) for t in snap["device_traces"])
    lines = [
        f"# Allocator snapshot of `{case['id']}`",
        "",
        f"{len(named)} blocks named after memaudit rows; {len(storages)} saved device storages in the report; "
        f"{traces} allocator trace entries recorded.",
        "",
        "| block name (memaudit row) | requested bytes | block bytes |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name.replace('|', '/')} | {req:,} | {size:,} |" for name, req, size in sorted(named)]
    same = sorted(req for _, req, _ in named) == sorted(storages.values())
    lines += [
        "",
        f"Named blocks' requested bytes equal the rows' storage bytes: {'yes' if same else 'NO'} "
        f"({sum(req for _, req, _ in named):,} B named, {sum(storages.values()):,} B in rows).",
    ]
    args.md.write_text("\n".join(lines) + "\n")
    if args.html is not None:
        from torch.cuda._memory_viz import trace_plot

        args.html.write_text(trace_plot(snap))
    print("\n".join(lines))
    return 0 if same and len(named) == len(storages) else 1


if __name__ == "__main__":
    sys.exit(main())
