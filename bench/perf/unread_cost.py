"""What ``--unread`` costs: the default emulated matrix with and without it, in fresh processes.

``memaudit run --target te-grouped-mlp --kernels emulated`` (every recipe, G in {1, 4, 8}, the
default shape, emulated sm100 on fake CUDA where there is no GPU) runs ``--rounds`` times with
and ``--rounds`` times without ``--unread``, alternating, each a fresh process; the ratio is the
median with over the median without (the goal is at most 2). ``--method poisoned`` measures the
poisoned method on the reference target instead (real kernels on CPU: the emulated matrix has no
values to poison). Writes ``OUT.json`` and ``OUT.md``.
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

ROOT = Path(__file__).resolve().parents[2]

MATRICES = {
    "observed": ["--target", "te-grouped-mlp", "--kernels", "emulated"],
    "poisoned": ["--target", "reference", "--groups", "1,4,8"],
}


def one(args: list[str], out: Path) -> tuple[float, int]:
    cmd = [sys.executable, "-c", "import memaudit.cli as c; c.main()", "run", *args, "--quiet", "--json", str(out)]
    t0 = time.perf_counter()
    rc = subprocess.run(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120"}
    ).returncode
    return time.perf_counter() - t0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", required=True, type=Path, help="OUT.json and OUT.md are written (give the path without suffix)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--method", choices=("observed", "poisoned"), default="observed")
    args = ap.parse_args()
    base = MATRICES[args.method]
    with_unread = [*base, "--unread", "--unread-method", args.method]
    times: dict[str, list[float]] = {"without": [], "with": []}
    codes: dict[str, list[int]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for name, argv in (("without", base), ("with", with_unread)):
                seconds, rc = one(argv, Path(tmp) / f"{name}-{i}.json")
                times[name].append(round(seconds, 3))
                codes[name].append(rc)
        report = (
            json.loads((Path(tmp) / f"with-{args.rounds - 1}.json").read_text())
            if codes["with"][-1] in (0, 1, 3)
            else None
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    doc = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "method": args.method,
        "command": "memaudit run " + " ".join(base),
        "rounds": args.rounds,
        "seconds": times,
        "exit_codes": codes,
        "median_s": med,
        "ratio": round(med["with"] / med["without"], 3),
        "cases": len(report["cases"]) if report else None,
        "unread_bytes": {c["id"]: c["totals"].get("unread_bytes") for c in report["cases"]} if report else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    md = [
        f"# `--unread` cost ({args.method})",
        "",
        f"`{doc['command']}` with and without `--unread --unread-method {args.method}`, "
        f"{args.rounds} alternating fresh processes each, on {doc['machine']} (Python {doc['python']}).",
        "",
        "| | median s | runs (s) |",
        "|---|---:|---|",
        f"| without | {med['without']:.2f} | {', '.join(map(str, times['without']))} |",
        f"| with | {med['with']:.2f} | {', '.join(map(str, times['with']))} |",
        "",
        f"Ratio with/without: **{doc['ratio']}×** over {doc['cases']} cases (exit codes {codes}).",
    ]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
