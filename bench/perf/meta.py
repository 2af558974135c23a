#!/usr/bin/env python
"""Audits on the ``meta`` device: production shape on CPU, nothing allocated.

    python bench/perf/meta.py --json reports/bench/cpu-meta.json   # also writes the .md beside it

Measures, for the reference target (TE's grouped MLP in plain PyTorch) with bf16:

* **meta at production shape** (T=82,944, H=3,072, F=1,536, G=8): wall time of one cell as
  ``memaudit run`` runs it (``run_case``: build, forward under ``capture()``, ``report()``,
  backward, the runner's ``gc.collect()``), the audit alone (the same without the collection), and
  its pieces; median, min and max over ``--repeats`` runs after one warm-up. Memory: resident set
  growth over each run (``/proc/self/statm``), growth of the process's peak resident set over all
  runs (``ru_maxrss``), Python's own allocation peak (``tracemalloc``), and every device an op's
  inputs and outputs lived on (a ``TorchDispatchMode``: ``{"meta"}`` means no CPU tensor at all).
* **the same at small shapes on CPU and on meta**: the rows must be equal field by field except
  ``device`` (and the totals equal), and CPU's time beside meta's.
* **the command line**: ``memaudit run --device meta`` at production shape in a fresh process
  (Python start-up and torch import included).

Timing is wall time (``perf_counter``) on whatever CPU this runs on; the JSON says which.
``bench/perf/run.py`` calls :func:`measure` for its ``meta`` section.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from memaudit.capture import capture  # noqa: E402
from memaudit.runner import run_case  # noqa: E402
from memaudit.spec import CaseSpec  # noqa: E402
from memaudit.targets.registry import get_target  # noqa: E402
from memaudit.te.targets.reference import ReferenceTarget  # noqa: E402

PRODUCTION = {"tokens": 82944, "hidden": 3072, "ffn": 1536, "groups": 8}
SMALL = (
    {"tokens": 2048, "hidden": 256, "ffn": 512, "groups": 8},
    {"tokens": 8192, "hidden": 1024, "ffn": 512, "groups": 4},
)
TARGETS = {"meta_production_seconds": 1.0, "meta_production_devices": ["meta"]}
MIB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class DeviceLog(TorchDispatchMode):
    """Every device an op's inputs or outputs lived on (factory functions included)."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor):
                self.devices.add(t.device.type)
        return out


def spec(shape: dict[str, int], device: str) -> CaseSpec:
    return CaseSpec.make(
        get_target("reference"),
        "bf16",
        shape["groups"],
        tokens=shape["tokens"],
        hidden=shape["hidden"],
        ffn=shape["ffn"],
        device=device,
    )


def _pieces(s: CaseSpec) -> dict[str, float]:
    """One audit, piece by piece (seconds); no collection at the end."""
    target = ReferenceTarget()
    t0 = time.perf_counter()
    built = target.build(s)
    t1 = time.perf_counter()
    with capture() as cap:
        out = built.forward(cap)
    t2 = time.perf_counter()
    cap.report(outputs=out)
    t3 = time.perf_counter()
    built.backward(out)
    t4 = time.perf_counter()
    return {"build_s": t1 - t0, "forward_s": t2 - t1, "report_s": t3 - t2, "backward_s": t4 - t3, "audit_s": t4 - t0}


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def time_cells(s: CaseSpec, repeats: int) -> dict[str, Any]:
    """``run_case`` and the audit alone, ``repeats`` times each after a warm-up; memory per run."""
    target = ReferenceTarget()
    run_case(target, s)  # warm-up (first-call costs: autograd, dispatcher)
    gc.collect()
    cells, rss_growth, py_peaks = [], [], []
    case = None
    maxrss0 = _maxrss()
    for _ in range(repeats):
        r0 = _rss()
        tracemalloc.start()
        t0 = time.perf_counter()
        case = run_case(target, s)
        cells.append(time.perf_counter() - t0)
        py_peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        rss_growth.append(_rss() - r0)
    pieces = [_pieces(s) for _ in range(repeats)]
    gc.collect()
    assert case is not None
    return {
        "status": case.status,
        "reason": case.reason,
        "rows": len(case.rows),
        "saved_bytes": case.totals.saved_bytes,
        "parameter_bytes": case.totals.parameter_bytes,
        "cell_seconds": _stats(cells),
        "audit_seconds": _stats([p["audit_s"] for p in pieces]),
        "pieces_seconds_median": {k: round(statistics.median(p[k] for p in pieces), 5) for k in pieces[0]},
        "rss_growth_bytes_max": max(rss_growth),
        "maxrss_growth_bytes": _maxrss() - maxrss0,
        "python_alloc_peak_bytes_max": max(py_peaks),
        "repeats": repeats,
    }


def devices_touched(s: CaseSpec) -> dict[str, Any]:
    with DeviceLog() as log:
        case = run_case(ReferenceTarget(), s)
    return {"devices": sorted(log.devices), "ops": log.ops, "status": case.status}


def same_rows(shape: dict[str, int]) -> dict[str, Any]:
    """CPU and meta at one small shape: rows equal except ``device``, totals equal, and both times."""
    out: dict[str, Any] = {"shape": shape}
    cases = {}
    for dev in ("cpu", "meta"):
        s = spec(shape, dev)
        run_case(ReferenceTarget(), s)  # warm-up
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            cases[dev] = run_case(ReferenceTarget(), s)
            times.append(time.perf_counter() - t0)
        out[f"{dev}_cell_seconds"] = _stats(times)
    strip = [[dataclasses.replace(r, device="-") for r in cases[d].rows] for d in ("cpu", "meta")]
    out["rows"] = len(cases["meta"].rows)
    out["rows_equal_except_device"] = strip[0] == strip[1]
    out["totals_equal"] = cases["cpu"].totals == cases["meta"].totals
    out["status"] = [cases["cpu"].status, cases["meta"].status]
    return out


def cli_seconds(shape: dict[str, int]) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-c",
        "import sys; from memaudit.cli import main; sys.argv[0] = 'memaudit'; main()",
        "run",
        "--target",
        "reference",
        "--device",
        "meta",
        "--quiet",
        "--groups",
        str(shape["groups"]),
        "--tokens",
        str(shape["tokens"]),
        "--hidden",
        str(shape["hidden"]),
        "--ffn",
        str(shape["ffn"]),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    return {
        "command": "memaudit run --target reference --device meta --quiet --groups 8 --tokens 82944 --hidden 3072 "
        "--ffn 1536",
        "seconds": round(time.perf_counter() - t0, 3),
        "exit_code": proc.returncode,
    }


def measure(repeats: int = 7, *, with_cli: bool = True) -> dict[str, Any]:
    """The ``meta`` section: what bench/perf/run.py and this script write (CPU only)."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {"production_shape": PRODUCTION, "targets": TARGETS}
    prod = spec(PRODUCTION, "meta")
    out["production"] = time_cells(prod, repeats)
    out["production"].update(devices_touched(prod))
    out["small_cpu_vs_meta"] = [same_rows(s) for s in SMALL]
    if with_cli:
        out["cli"] = cli_seconds(PRODUCTION)
    p = out["production"]
    out["meta_production_seconds"] = p["cell_seconds"]["median"]
    out["meta_production_audit_seconds"] = p["audit_seconds"]["median"]
    out["meta_production_devices"] = p["devices"]
    out["meta_rows_equal_cpu"] = all(
        c["rows_equal_except_device"] and c["totals_equal"] for c in out["small_cpu_vs_meta"]
    )
    return out


def environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
    }


def verdict_rows(m: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(metric, value, target, met) for a ``meta`` section (bench/perf/run.py renders them too)."""
    if not m or "production" not in m:
        return [("meta audit, production shape", "n/a", "< 1 s, only meta tensors", None)]
    p = m["production"]
    t = m["meta_production_seconds"]
    shape = m["production_shape"]
    label = f"T={shape['tokens']:,}, H={shape['hidden']:,}, F={shape['ffn']:,}, G={shape['groups']}"
    return [
        (
            f"meta audit, production shape ({label}), one `run` cell",
            f"{t:.3f} s (audit alone {m['meta_production_audit_seconds']:.4f} s)",
            f"< {TARGETS['meta_production_seconds']:.0f} s",
            t < TARGETS["meta_production_seconds"],
        ),
        ("meta audit, devices its ops touched", ", ".join(p["devices"]), "meta only", p["devices"] == ["meta"]),
        (
            "meta audit, resident memory growth (max over runs)",
            f"{p['rss_growth_bytes_max'] / MIB:.2f} MiB (saves {p['saved_bytes'] / MIB:,.0f} MiB on a device)",
            "—",
            None,
        ),
        ("meta rows equal CPU rows (small shapes)", str(m["meta_rows_equal_cpu"]), "True", m["meta_rows_equal_cpu"]),
    ]


def render_markdown(r: dict[str, Any]) -> str:
    m = r["meta"]
    env = r["environment"]
    lines = [
        "# memaudit on meta (CPU)",
        "",
        f"Created {r['created']} · torch `{env['torch']}` · Python `{env['python']}` · {env['machine']}, "
        f"{env['cpus_available']} CPUs available, 1 torch thread · `{' '.join(r['command'])}`",
        "",
        "| metric | value | target | |",
        "|---|---|---|---|",
    ]
    for metric, value, target, ok in verdict_rows(m):
        lines.append(f"| {metric} | {value} | {target} | {'—' if ok is None else ('✅' if ok else '❌')} |")
    p = m["production"]
    lines += [
        "",
        "## Production shape on meta",
        "",
        f"{p['repeats']} runs after a warm-up; {p['rows']} rows, {p['saved_bytes']:,} saved bytes, "
        f"{p['parameter_bytes']:,} parameter bytes; {p['ops']} ops, all on {', '.join(p['devices'])}.",
        "",
        f"- one `run` cell (`run_case`, with the runner's `gc.collect()`): median {p['cell_seconds']['median']} s "
        f"(min {p['cell_seconds']['min']}, max {p['cell_seconds']['max']})",
        f"- the audit alone (build, forward under `capture()`, `report()`, backward): median "
        f"{p['audit_seconds']['median']} s (min {p['audit_seconds']['min']}, max {p['audit_seconds']['max']}); pieces: "
        + ", ".join(f"{k} {v}" for k, v in p["pieces_seconds_median"].items()),
        f"- memory: resident set growth {p['rss_growth_bytes_max']:,} B (max over runs), peak resident set growth "
        f"{p['maxrss_growth_bytes']:,} B, Python allocation peak {p['python_alloc_peak_bytes_max']:,} B",
    ]
    if "cli" in m:
        lines.append(
            f"- `{m['cli']['command']}` in a fresh process: {m['cli']['seconds']} s (exit {m['cli']['exit_code']}; "
            "Python start-up and torch import included)"
        )
    lines += [
        "",
        "## CPU and meta at small shapes",
        "",
        "| T | H | F | G | rows | rows equal (except device) | totals equal | CPU cell s (median) | meta cell s "
        "(median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in m["small_cpu_vs_meta"]:
        s = c["shape"]
        lines.append(
            f"| {s['tokens']} | {s['hidden']} | {s['ffn']} | {s['groups']} | {c['rows']} | "
            f"{c['rows_equal_except_device']} "
            f"| {c['totals_equal']} | {c['cpu_cell_seconds']['median']} | {c['meta_cell_seconds']['median']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True, help="write the result here (and the markdown beside it)")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (default 7)")
    ap.add_argument("--no-cli", action="store_true", help="skip the fresh-process `memaudit run` timing")
    args = ap.parse_args(argv)
    from datetime import UTC, datetime

    from memaudit.report import atomic_write_text

    r = {
        "schema": "memaudit.bench-meta/1",
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": ["bench/perf/meta.py", *(argv if argv is not None else sys.argv[1:])],
        "timing_method": "perf_counter wall seconds",
        "meta": measure(args.repeats, with_cli=not args.no_cli),
    }
    r["environment"] = environment()
    atomic_write_text(args.json, json.dumps(r, indent=2) + "\n")
    atomic_write_text(args.json.with_suffix(".md"), render_markdown(r))
    print(render_markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
