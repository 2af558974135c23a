#!/usr/bin/env python
"""Per-rank audits on CPU: wall time and merge time for 2, 4 and 8 processes.

For each world size N, ``--repeat`` times, in fresh processes:

* ``run``: ``memaudit run --nproc N --target ep-grouped-mlp ...`` (gloo; N expert-parallel ranks
  of ``--groups`` local experts, ``--routing``): torch.distributed.run starting N Python processes,
  each importing torch and memaudit, joining the process group, routing, the counts and token
  all-to-alls, forward under capture, report, backward, its own file, the gather and the merge on
  rank 0, tables and the merged JSON;
* ``merge (CLI)``: ``memaudit merge`` of those N rank files (a fresh process: start, read and
  validate each file, merge, validate the summary, write);
* ``merge (in process)``: what rank 0 does after the gather, the median of ``--inner`` calls:
  validate the N reports as they arrive (decoded JSON, every check of a report read from a file),
  :func:`memaudit.distributed.merge.merge_reports`, and the merged report to JSON.

Medians (and min/max) are written with the environment to ``--out`` (JSON), a markdown summary
beside it and, with matplotlib, the figure (``--out`` with ``.svg``)::

    python bench/perf/dist_scaling.py --out reports/bench/cpu-dist-scaling.json

On a machine with fewer cores than N the processes share them: the wall time then measures the
machine as much as memaudit (the summary says how many cores there were).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def memaudit(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "memaudit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"},
    )
    return time.perf_counter() - start, proc


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def environment() -> dict[str, Any]:
    import torch

    import memaudit

    return {
        "memaudit": memaudit.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.system(),
        "backend": "gloo",
    }


def measure(n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from memaudit.distributed.merge import merge_reports, rank_files
    from memaudit.report import validate_report

    shape = [
        "--target",
        "ep-grouped-mlp",
        "--groups",
        str(args.groups),
        "--tokens",
        str(args.tokens),
        "--hidden",
        str(args.hidden),
        "--ffn",
        str(args.ffn),
        "--routing",
        args.routing,
    ]
    runs, merges_cli, inner = [], [], []
    rows = saved_max = 0
    for i in range(args.repeat):
        out = work / f"n{n}-{i}.json"
        secs, proc = memaudit(["run", "--nproc", str(n), *shape, "--json", str(out), "--quiet"], work)
        if proc.returncode != 0:
            raise SystemExit(f"run --nproc {n} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        runs.append(secs)
        folder = out.with_name(out.stem + ".ranks")
        secs, proc = memaudit(["merge", str(folder), "--json", str(work / f"merged-{n}-{i}.json"), "--quiet"], work)
        if proc.returncode != 0:
            raise SystemExit(f"merge of {n} ranks failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        merges_cli.append(secs)
        gathered = [json.loads(f.read_text(encoding="utf-8")) for f in rank_files(folder)]
        for _ in range(args.inner):
            start = time.perf_counter()
            merged = merge_reports(
                [(f"rank {r}", validate_report(d, source=f"rank {r}")) for r, d in enumerate(gathered)]
            )
            merged.to_json()
            inner.append(time.perf_counter() - start)
        rows = sum(len(c.rows) for c in merged.cases)
        saved_max = max(c.totals.saved_bytes for c in merged.cases)
        bytes_json = out.stat().st_size
    return {
        "ranks": n,
        "run_s": stats(runs),
        "merge_cli_s": stats(merges_cli),
        "merge_s": stats(inner),
        "rows": rows,
        "worst_rank_saved_bytes": saved_max,
        "merged_json_bytes": bytes_json,
    }


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# Per-rank audits on CPU: wall time and merge time",
        "",
        f"`python bench/perf/dist_scaling.py {result['argv']}` ({result['created']}): `memaudit run --nproc N --target "
        f"ep-grouped-mlp --groups {a['groups']} --tokens {a['tokens']} --hidden {a['hidden']} --ffn {a['ffn']} "
        "--routing "
        f"{a['routing']}` over gloo, {a['repeat']} runs per N (medians, min-max). "
        f"{result['environment']['cpu_count']} CPU "
        "cores: "
        + (
            "N processes share them"
            if max(r["ranks"] for r in result["results"]) > result["environment"]["cpu_count"]
            else "one per process"
        )
        + ".",
        "",
        "| ranks | run (wall, s) | merge, CLI (s) | merge, in process (ms) | rows merged | merged JSON |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"]:
        lines.append(
            f"| {r['ranks']} | {r['run_s']['median']:.2f} ({r['run_s']['min']:.2f}-{r['run_s']['max']:.2f}) | "
            f"{r['merge_cli_s']['median']:.2f} ({r['merge_cli_s']['min']:.2f}-{r['merge_cli_s']['max']:.2f}) | "
            f"{1000 * r['merge_s']['median']:.1f} ({1000 * r['merge_s']['min']:.1f}-{1000 * r['merge_s']['max']:.1f}) "
            "| "
            f"{r['rows']:,} | {r['merged_json_bytes']:,} B |"
        )
    env = result["environment"]
    lines += [
        "",
        f"Environment: memaudit {env['memaudit']}, torch {env['torch']}, Python {env['python']}, "
        f"{env['system']} {env['machine']}, {env['cpu_count']} cores.",
        "",
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator

    rs = result["results"]
    ranks = [r["ranks"] for r in rs]
    fig, left = plt.subplots(figsize=(6, 3.6))
    left.plot(ranks, [r["run_s"]["median"] for r in rs], "o-", label="run --nproc N (wall)")
    left.plot(ranks, [r["merge_cli_s"]["median"] for r in rs], "s-", label="memaudit merge (CLI)")
    left.set_xlabel("ranks (processes)")
    left.set_ylabel("seconds")
    left.xaxis.set_major_locator(FixedLocator(ranks))
    right = left.twinx()
    right.plot(
        ranks, [1000 * r["merge_s"]["median"] for r in rs], "^--", color="tab:green", label="merge in process (ms)"
    )
    right.set_ylabel("merge in process, ms")
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    lines = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(lines, labels, loc="upper left", fontsize=8)
    left.set_title(f"per-rank audits on CPU ({result['environment']['cpu_count']} cores, gloo)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--routing", default="zipf")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "bench" / "cpu-dist-scaling.json")
    args = ap.parse_args(argv)
    from datetime import UTC, datetime

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.ranks.split(",")):
            results.append(measure(n, args, Path(tmp)))
            print(json.dumps(results[-1]), flush=True)
    out = args.out
    shown = os.path.relpath(out, ROOT) if out.is_absolute() and out.resolve().is_relative_to(ROOT) else str(out)
    given = list(sys.argv[1:] if argv is None else argv)
    result = {
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "out": shown,
        "argv": " ".join(given),
        "args": {
            k: getattr(args, k) for k in ("ranks", "repeat", "inner", "groups", "tokens", "hidden", "ffn", "routing")
        },
        "environment": environment(),
        "results": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    try:
        plot(result, out.with_suffix(".svg"))
    except ImportError:
        print("matplotlib is not installed: no figure", file=sys.stderr)
    print(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.svg')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
