#!/usr/bin/env python
"""memaudit benchmarks: audit overhead, memory neutrality, matrix time, estimator
throughput, meta audits at production shape (bench/perf/meta.py, CPU, in a subprocess), and PyTorch's
MemTracker as the anchor, measured in one process.

    python bench/perf/run.py --out reports/bench/h200.json      # the H200 run (TE grouped MLP, CUDA)
    python bench/perf/run.py --cpu-smoke --out /tmp/smoke.json   # proves the harness on CPU (reference target)

Writes the JSON atomically after every section (so a killed run still leaves what it measured)
and a markdown summary beside it (``--md``, default: the JSON path with ``.md``). Every
measurement is wrapped: a failure becomes an entry in ``errors`` and the run goes on. docs/investigations/bench.md
says what each number means.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SCHEMA = "memaudit.bench/1"
RECIPES = ("bf16", "fp8-current")

# The first benchmark round's targets.
TARGETS = {
    "overhead_ratio_production": 1.02,
    "overhead_ratio_small": 1.10,
    "extra_peak_bytes": 0,
    "matrix_seconds": 30.0,
    "estimate_configs_per_second": 10_000.0,
}

# memaudit over the floor hook of the same run.
OVER_FLOOR_GOALS = {"production": 1.01, "small": 1.05}

# Measured earlier on the same H200 (TE 2.20.2, unfused path, median of 10 pairs); quoted beside
# this run's numbers for comparison, never used in a verdict.
EARLIER_H200 = {
    "bare_ms": {"production": {"bf16": 16.6, "fp8-current": 12.3}, "small": {"bf16": 3.5, "fp8-current": 5.4}},
    "floor_ratio": {"production": 1.00, "small": 1.03},
    "memtracker_ratio": {
        "production": {"bf16": 1.10, "fp8-current": 3.31},
        "small": {"bf16": 3.51, "fp8-current": 5.64},
    },
}

SHAPES = {
    "h200": {
        "production": {"tokens": 65536, "hidden": 4096, "ffn": 2048, "groups": 8},
        "small": {"tokens": 2048, "hidden": 4096, "ffn": 2048, "groups": 8},
        "scale_groups": {"tokens": 8192, "hidden": 4096, "ffn": 2048, "groups": (1, 8, 64)},
        "scale_tokens": {"tokens": (2048, 16384, 65536), "hidden": 4096, "ffn": 2048, "groups": 8},
        "model": {"tokens": 8192, "hidden": 4096, "ffn": 2048, "groups": 8},
    },
    "smoke": {
        "production": {"tokens": 512, "hidden": 64, "ffn": 128, "groups": 8},
        "small": {"tokens": 128, "hidden": 64, "ffn": 128, "groups": 8},
        "scale_groups": {"tokens": 1024, "hidden": 32, "ffn": 64, "groups": (1, 8, 64)},
        "scale_tokens": {"tokens": (256, 512, 1024), "hidden": 32, "ffn": 64, "groups": 8},
        "model": {"tokens": 64, "hidden": 16, "ffn": 32, "groups": 8},
    },
}


def log(msg: str) -> None:
    print(msg, flush=True)


def _median(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _err(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")[:500]


def _sub_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class _NoCap:
    """Stands in for a Capture in the bare runs: targets call ``cap.label``; nothing is recorded."""

    def label(self, *args: Any, **kwargs: Any) -> None:
        return None


NOCAP = _NoCap()


def _identity(t: Any) -> Any:
    return t


# ------------------------------------------------------------------------------------------------
# Timing one forward+backward, several ways
# ------------------------------------------------------------------------------------------------
class Runner:
    """Forward+backward of one built case: bare, under capture(), under the floor hook pair, under MemTracker."""

    def __init__(self, built: Any, cuda: bool) -> None:
        self.built = built
        self.cuda = cuda
        self.n_packed: int | None = None
        self.n_floor: int | None = None
        self._mt: Any = None
        self.memtracker_peak: dict[str, Any] | None = None

    # grads are dropped before every run (outside the timed region) so every run starts equal
    def prep(self) -> None:
        model = self.built.model
        params = list(model.parameters()) if model is not None and hasattr(model, "parameters") else []
        for t in [*params, *self.built.inputs]:
            if isinstance(t, torch.Tensor):
                t.grad = None

    def bare(self) -> None:
        out = self.built.forward(NOCAP)
        self.built.backward(out)

    def hooked(self) -> None:
        from memaudit.capture import capture

        with capture() as cap:
            out = self.built.forward(cap)
            self.built.backward(out)
        self.n_packed = len(cap.records)

    def floor(self) -> None:
        meta: list[tuple[Any, ...]] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            meta.append((tuple(t.shape), t.dtype, t.numel() * t.element_size()))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, _identity):
            out = self.built.forward(NOCAP)
            self.built.backward(out)
        self.n_floor = len(meta)

    def prep_memtracker(self) -> None:
        from torch.distributed._tools.mem_tracker import MemTracker

        self.prep()
        mt = MemTracker()
        mt.track_external(self.built.model, *[t for t in self.built.inputs if isinstance(t, torch.Tensor)])
        self._mt = mt

    def memtracker(self) -> None:
        with self._mt:
            out = self.built.forward(NOCAP)
            self.built.backward(out)

    def after(self, variant: str) -> None:
        """Outside the timed region: read MemTracker's peak, then drop it so it cannot touch later runs."""
        if variant == "memtracker" and self._mt is not None:
            mt, self._mt = self._mt, None
            try:
                snap = mt.get_tracker_snapshot("peak")
                self.memtracker_peak = {str(d): int(s.get("Total", 0)) for d, s in snap.items()}
            except Exception as exc:  # noqa: BLE001 - the timing stands; only the snapshot is lost
                self.memtracker_peak = {"error": _err(exc)}

    def timed(self, fn: Callable[[], None]) -> tuple[float, float]:
        """(device ms from CUDA events, wall ms); on CPU both are perf_counter ms."""
        if self.cuda:
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            c0 = time.perf_counter()
            start.record()
            fn()
            end.record()
            end.synchronize()
            c1 = time.perf_counter()
            return float(start.elapsed_time(end)), (c1 - c0) * 1e3
        c0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - c0) * 1e3
        return ms, ms


def measure_config(
    target: Any,
    spec: Any,
    *,
    cuda: bool,
    warmup: int,
    pairs: int,
    variants: tuple[str, ...],
    memory: bool,
    report_reps: int,
    pack_timing: bool,
) -> dict[str, Any]:
    """Alternating timed rounds of every variant, then peak memory, report() time and pack cost."""
    res: dict[str, Any] = {"spec": spec.id, "errors": {}}
    reason = target.skip_reason(spec)
    if reason:
        res["skipped"] = reason
        return res
    t_build = time.perf_counter()
    built = target.build(spec)
    res["build_seconds"] = round(time.perf_counter() - t_build, 3)
    r = Runner(built, cuda)
    fns: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "bare": (r.prep, r.bare),
        "hooked": (r.prep, r.hooked),
        "floor": (r.prep, r.floor),
        "memtracker": (r.prep_memtracker, r.memtracker),
    }
    live = [v for v in variants if v in fns]
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in live}
    gc.collect()
    try:
        for rnd in range(warmup + pairs):
            order = live[rnd % len(live) :] + live[: rnd % len(live)] if live else []
            for v in order:
                if v not in live:
                    continue
                prep, fn = fns[v]
                try:
                    prep()
                    ms = r.timed(fn)
                    r.after(v)
                except Exception as exc:  # noqa: BLE001 - a variant's failure is recorded, the rest go on
                    res["errors"][v] = _err(exc)
                    live.remove(v)
                    if v == "bare":
                        raise
                    continue
                if rnd >= warmup:
                    samples[v].append(ms)
            if not live:
                break
        res["timing"] = _summarize(samples, cuda)
        res["n_saved"] = r.n_packed
        res["n_saved_floor"] = r.n_floor
        res["memtracker_peak_total_bytes"] = r.memtracker_peak
        if memory and cuda:
            try:
                res["memory"] = _peak_memory(r)
            except Exception as exc:  # noqa: BLE001
                res["errors"]["memory"] = _err(exc)
        if report_reps:
            try:
                res["report"] = _report_time(built, r, report_reps, cuda)
            except Exception as exc:  # noqa: BLE001
                res["errors"]["report"] = _err(exc)
        if pack_timing:
            try:
                res["pack"] = _pack_cost(built, r)
            except Exception as exc:  # noqa: BLE001
                res["errors"]["pack"] = _err(exc)
        t = res.get("timing", {})
        n = res.get("n_saved")
        if n and t.get("bare") and t.get("hooked"):
            res["cpu_delta_us_per_tensor"] = round((t["hooked"]["wall_ms"] - t["bare"]["wall_ms"]) * 1e3 / n, 3)
    finally:
        del built, r
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return res


def _summarize(samples: dict[str, list[tuple[float, float]]], cuda: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bare = samples.get("bare", [])
    bare_dev = _median([s[0] for s in bare])
    bare_wall = _median([s[1] for s in bare])
    for v, ss in samples.items():
        if not ss:
            continue
        dev = _median([s[0] for s in ss])
        wall = _median([s[1] for s in ss])
        entry: dict[str, Any] = {
            "n": len(ss),
            "device_ms" if cuda else "cpu_ms": round(dev, 4) if dev is not None else None,
            "wall_ms": round(wall, 4) if wall is not None else None,
            "min_ms": round(min(s[0] for s in ss), 4),
            "max_ms": round(max(s[0] for s in ss), 4),
        }
        if v != "bare" and bare_dev:
            entry["ratio"] = round(dev / bare_dev, 4)
            entry["wall_ratio"] = round(wall / bare_wall, 4) if bare_wall else None
            pair = [a[0] / b[0] for a, b in zip(ss, bare, strict=False) if b[0] > 0]
            entry["median_pair_ratio"] = round(statistics.median(pair), 4) if pair else None
        out[v] = entry
    return out


def _peak_memory(r: Runner) -> dict[str, Any]:
    """max_memory_allocated of bare vs hooked forward+backward, alternating, reset between runs."""
    peaks: dict[str, list[int]] = {"bare": [], "hooked": []}
    starts: dict[str, list[int]] = {"bare": [], "hooked": []}
    for v in ("bare", "hooked") * 3:
        r.prep()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        starts[v].append(int(torch.cuda.memory_allocated()))
        getattr(r, v)()
        torch.cuda.synchronize()
        peaks[v].append(int(torch.cuda.max_memory_allocated()))
    r.prep()
    bare, hooked = int(statistics.median(peaks["bare"])), int(statistics.median(peaks["hooked"]))
    return {
        "bare_peak_bytes": bare,
        "hooked_peak_bytes": hooked,
        "extra_peak_bytes": hooked - bare,
        "bare_peaks": peaks["bare"],
        "hooked_peaks": peaks["hooked"],
        "start_bytes": starts,
    }


def _report_time(built: Any, r: Runner, reps: int, cuda: bool) -> dict[str, Any]:
    """Wall time of ``cap.report(outputs=...)`` after a captured forward (before backward)."""
    from memaudit.capture import capture

    times: list[float] = []
    info: dict[str, Any] = {}
    for i in range(reps):
        r.prep()
        with capture() as cap:
            out = built.forward(cap)
            if cuda:
                torch.cuda.synchronize()
            c0 = time.perf_counter()
            rep = cap.report(outputs=out)
            times.append((time.perf_counter() - c0) * 1e3)
            if i == 0:
                info["rows"] = len(rep.rows)
                info["saved_bytes"] = rep.totals.saved_bytes
                try:
                    info["path"] = built.annotate(rep.rows, cap)
                except Exception as exc:  # noqa: BLE001
                    info["path_error"] = _err(exc)
            built.backward(out)
        del out, rep
    r.prep()
    info["ms"] = round(_median(times) or 0.0, 4)
    info["samples_ms"] = [round(t, 4) for t in times]
    return info


def _pack_cost(built: Any, r: Runner) -> dict[str, Any]:
    """Time memaudit's pack hook directly over the tensors this forward saves (strong refs, no backward)."""
    from memaudit.capture import capture

    saved: list[torch.Tensor] = []

    def collect(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    r.prep()
    with torch.autograd.graph.saved_tensors_hooks(collect, _identity):
        out = built.forward(NOCAP)
    del out
    if not saved:
        return {"n": 0, "us_per_tensor": None}
    reps = max(3, min(200, 4000 // len(saved)))
    c0 = time.perf_counter()
    for _ in range(reps):
        with capture() as cap:
            pack = cap.hook_pair[0]
            for t in saved:
                pack(t)
    dt = time.perf_counter() - c0
    n = len(saved)
    saved.clear()
    r.prep()
    return {"n": n, "reps": reps, "us_per_tensor": round(dt * 1e6 / (reps * n), 3)}


# ------------------------------------------------------------------------------------------------
# The bench
# ------------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.smoke = bool(args.cpu_smoke)
        self.cuda = not self.smoke
        if self.cuda and not torch.cuda.is_available():
            raise SystemExit("no CUDA device: use --cpu-smoke for the CPU check")
        self.device = "cuda" if self.cuda else "cpu"
        if self.smoke:
            torch.set_num_threads(1)  # tiny CPU shapes: threads only add noise
        self.shapes = SHAPES["smoke" if self.smoke else "h200"]
        self.out = Path(args.out)
        self.md = Path(args.md) if args.md else self.out.with_suffix(".md")
        self.t0 = time.perf_counter()
        self.budget = float(args.budget_s)
        self.warmup = args.warmup if args.warmup is not None else (1 if self.smoke else 3)
        self.pairs = args.pairs if args.pairs is not None else (5 if self.smoke else 20)
        self.runs = max(1, int(args.runs))
        self.target: Any = None
        self.cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.r: dict[str, Any] = {
            "schema": SCHEMA,
            "mode": "cpu-smoke" if self.smoke else "cuda",
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
            "targets": TARGETS,
            "earlier_h200": EARLIER_H200,
            "timing_method": (
                "perf_counter wall ms (CPU smoke)"
                if self.smoke
                else "CUDA events around forward+backward after a device sync; wall ms beside them"
            ),
            "settings": {
                "warmup": self.warmup,
                "pairs": self.pairs,
                "shapes": self.shapes,
                "run_warmup": args.run_warmup,
                "run_pairs": args.run_pairs,
            },
            "runs": 1,
            "ratio_source": "this process (one invocation)",
            "overhead_over_floor_production": {},
            "overhead_over_floor_small": {},
            "overhead_ratio_spread_production": {},
            "overhead_ratio_spread_small": {},
            "floor_ratio_spread_production": {},
            "floor_ratio_spread_small": {},
            "scaling": None,
            "meta": None,
            "estimate_full_configs_per_second": None,
            "overhead_ratio_production": {},
            "overhead_ratio_small": {},
            "anchor_overhead_ratio_production": {},
            "anchor_overhead_ratio_small": {},
            "floor_ratio_production": {},
            "floor_ratio_small": {},
            "overhead_ratio_with_report_production": {},
            "overhead_ratio_with_report_small": {},
            "extra_peak_bytes": {},
            "report_ms": {},
            "pack_us_per_tensor": {},
            "matrix_seconds": None,
            "estimate_configs_per_second": None,
            "environment": None,
            "details": {},
            "errors": [],
            "skipped_sections": [],
        }

    # -- plumbing ------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def section(self, name: str, fn: Callable[[], Any], *, need_s: float = 0.0) -> Any:
        left = self.budget - self.elapsed()
        if left < need_s:
            msg = f"{name}: skipped, {left:.0f} s of the {self.budget:.0f} s budget left (needs ~{need_s:.0f} s)"
            log(f"[{self.elapsed():6.1f}s] {msg}")
            self.r["skipped_sections"].append(msg)
            self.checkpoint()
            return None
        log(f"[{self.elapsed():6.1f}s] {name} ...")
        s0 = time.perf_counter()
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one section's failure never stops the run
            self.error(name, exc, tb=True)
            return None
        finally:
            self.r["details"].setdefault("section_seconds", {})[name] = round(time.perf_counter() - s0, 2)
            self.checkpoint()

    def error(self, where: str, exc: BaseException | str, *, tb: bool = False) -> None:
        msg = exc if isinstance(exc, str) else _err(exc)
        entry: dict[str, Any] = {"where": where, "error": msg}
        if tb and not isinstance(exc, str):
            entry["traceback"] = "".join(traceback.format_exception(exc)[-4:])[-1500:]
        self.r["errors"].append(entry)
        log(f"    ERROR {where}: {msg}")

    def checkpoint(self) -> None:
        from memaudit.report import atomic_write_text

        self.r["elapsed_seconds"] = round(self.elapsed(), 2)
        try:
            atomic_write_text(self.out, json.dumps(self.r, indent=2, sort_keys=False, default=str) + "\n")
            atomic_write_text(self.md, render_markdown(self.r))
        except Exception as exc:  # noqa: BLE001 - keep measuring even if the disk write fails once
            log(f"    could not write {self.out}: {_err(exc)}")

    # -- sections ------------------------------------------------------------------------------
    def _watchdog(self) -> None:
        """A hung kernel or subprocess cannot be interrupted from Python: write what we have and exit."""
        log(f"[{self.elapsed():6.1f}s] watchdog: past budget + grace; writing partial results and exiting")
        self.r["killed_by_watchdog"] = True
        try:
            self.checkpoint()
        finally:
            os._exit(3)

    def run(self) -> None:
        dog = threading.Timer(self.budget + float(self.args.grace_s), self._watchdog)
        dog.daemon = True
        dog.start()
        log(
            f"memaudit bench: mode={self.r['mode']} out={self.out} budget={self.budget:.0f}s "
            f"warmup={self.warmup} pairs={self.pairs}"
        )
        if self.args.child_overhead:
            self.run_child()
            dog.cancel()
            return
        if self.runs > 1:
            self.section("independent_runs", self.independent_runs)
        self.section("estimator", self.estimator)
        self.section("import_times", self.import_times, need_s=30)
        self.section("matrix_subprocess", self.matrix_subprocess, need_s=40)
        self.section("setup_target", self.setup_target)
        self.section("environment", self.environment)
        self.section("matrix_cells_in_process", self.matrix_cells, need_s=20)
        for shape in ("production", "small"):
            for recipe in RECIPES:
                self.section(f"overhead/{shape}/{recipe}", lambda s=shape, rc=recipe: self.overhead(s, rc), need_s=15)
        self.section("model_scaling", self.model_scaling, need_s=20)
        self.section("scaling", self.scaling, need_s=20)
        self.section("meta", self.meta)
        if self.cuda:
            self.section("sync_debug", self.sync_debug, need_s=10)
        self.section("sac_estimator_subprocess", self.sac_probe, need_s=30)
        self.r["complete"] = True
        self.checkpoint()
        dog.cancel()
        log(f"[{self.elapsed():6.1f}s] done: wrote {self.out} and {self.md}")
        log(summary_lines(self.r))

    # -- independent runs (medians over fresh processes) -------------------------------------------------
    def run_child(self) -> None:
        """One independent invocation: alternating bare / capture() / floor rounds per shape and recipe."""
        self.section("setup_target", self.setup_target)
        if self.target is None:
            return
        for shape in ("production", "small"):
            for recipe in RECIPES:
                self.section(f"overhead/{shape}/{recipe}", lambda s=shape, rc=recipe: self._child_overhead(s, rc))
        self.r["complete"] = True
        self.checkpoint()

    def _child_overhead(self, shape_name: str, recipe: str) -> None:
        spec = self._spec(recipe, **self.shapes[shape_name])
        res = measure_config(
            self.target,
            spec,
            cuda=self.cuda,
            warmup=self.warmup,
            pairs=self.pairs,
            variants=("bare", "hooked", "floor"),
            memory=False,
            report_reps=0,
            pack_timing=False,
        )
        self.r["details"].setdefault("overhead", {})[f"{shape_name}/{recipe}"] = res
        t = res.get("timing", {})
        hooked, floor = t.get("hooked", {}).get("ratio"), t.get("floor", {}).get("ratio")
        self.r[f"overhead_ratio_{shape_name}"][recipe] = hooked
        self.r[f"floor_ratio_{shape_name}"][recipe] = floor
        log(f"    x{hooked} floor x{floor} n_saved {res.get('n_saved')} {res.get('skipped') or ''}")

    def independent_runs(self) -> None:
        """``--runs`` fresh processes, each timing every shape and recipe (bare, capture(), floor) in
        alternating rounds; per-run ratios are aggregated into median and min–max."""
        script = Path(__file__).resolve()
        warmup = self.args.run_warmup if self.args.run_warmup is not None else self.warmup
        pairs = self.args.run_pairs if self.args.run_pairs is not None else self.pairs
        per_run: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(self.runs):
                if i >= 2 and self.elapsed() > self.args.runs_share * self.budget:
                    msg = (
                        f"independent run {i}: skipped, {self.elapsed():.0f} s of the budget used (runs get "
                        f"{self.args.runs_share:.0%})"
                    )
                    self.r["skipped_sections"].append(msg)
                    log(f"    {msg}")
                    break
                js = Path(tmp) / f"run{i}.json"
                argv = [
                    sys.executable,
                    str(script),
                    "--child-overhead",
                    "--out",
                    str(js),
                    "--warmup",
                    str(warmup),
                    "--pairs",
                    str(pairs),
                    "--budget-s",
                    str(self.args.run_timeout_s),
                    "--grace-s",
                    "10",
                ]
                if self.smoke:
                    argv.append("--cpu-smoke")
                res = self._timed_subprocess(
                    argv, self.args.run_timeout_s + 20, None if self.smoke else self._fused_env()
                )
                entry: dict[str, Any] = {"run": i, "seconds": res.get("seconds"), "rc": res.get("rc")}
                if res.get("error") or res.get("rc"):
                    entry["error"] = res.get("error") or (res.get("stderr_tail") or "")[-600:]
                if js.exists():
                    child = json.loads(js.read_text())
                    for shape in ("production", "small"):
                        entry[shape] = {
                            rc: {
                                "ratio": (child.get(f"overhead_ratio_{shape}") or {}).get(rc),
                                "floor": (child.get(f"floor_ratio_{shape}") or {}).get(rc),
                            }
                            for rc in RECIPES
                        }
                    entry["n_saved"] = {
                        k: v.get("n_saved") for k, v in (child.get("details", {}).get("overhead") or {}).items()
                    }
                    entry["bare_ms"] = {
                        k: ((v.get("timing") or {}).get("bare") or {}).get("device_ms" if self.cuda else "cpu_ms")
                        for k, v in (child.get("details", {}).get("overhead") or {}).items()
                    }
                    if child.get("errors"):
                        entry["child_errors"] = child["errors"][:4]
                per_run.append(entry)
                log(
                    f"    run {i}: {res.get('seconds')} s rc={res.get('rc')} "
                    + " ".join(
                        f"{s}/{rc} x{(entry.get(s) or {}).get(rc, {}).get('ratio')}/floor "
                        f"x{(entry.get(s) or {}).get(rc, {}).get('floor')}"
                        for s in ("production", "small")
                        for rc in RECIPES
                    )
                )
                self.r["details"]["independent_runs"] = per_run
                self.checkpoint()
        self.r.update(aggregate_runs(per_run))
        self.r["ratio_source"] = (
            f"median of {self.r['runs']} independent invocations (fresh processes), "
            f"each {warmup} warm-up + {pairs} alternating rounds of bare / capture() / floor"
        )

    # -- whole-model scaling -------------------------------------------------
    def _stack(self, depth: int, recipe: str) -> tuple[Callable[[], torch.Tensor], list[Any]]:
        """A model of ``depth`` grouped-MLP layers (TE on CUDA; Linear-GELU-Linear in the smoke)."""
        shape = self.shapes["model"]
        torch.manual_seed(0)
        if self.cuda and self.r.get("target_used") == "te-grouped-mlp":
            from memaudit.te.targets.grouped_mlp import import_te, make_recipe

            te, _ = import_te()
            rcp = make_recipe(recipe)
            g, h, f, tokens = shape["groups"], shape["hidden"], shape["ffn"], shape["tokens"]
            common = {"bias": False, "device": "cuda", "dtype": torch.bfloat16}
            layers = [
                te.ops.Sequential(
                    te.ops.GroupedLinear(g, h, 2 * f, **common),
                    te.ops.ScaledSwiGLU(glu_interleave_size=32),
                    te.ops.GroupedLinear(g, f, h, **common),
                )
                for _ in range(depth)
            ]
            x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            base = tokens // g
            splits = torch.tensor([base] * (g - 1) + [tokens - base * (g - 1)], dtype=torch.int64, device="cuda")
            probs = torch.rand(tokens, device="cuda", requires_grad=True)

            def fwd() -> torch.Tensor:
                y = x
                with te.autocast(enabled=rcp is not None, recipe=rcp):
                    for layer in layers:
                        y = layer(y, splits, probs, splits)
                return y

            return fwd, [*layers, x, probs]
        h, tokens = shape["hidden"], shape["tokens"]
        mods = [
            torch.nn.Sequential(torch.nn.Linear(h, 2 * h), torch.nn.GELU(), torch.nn.Linear(2 * h, h)).to(self.device)
            for _ in range(depth)
        ]
        x = torch.randn(tokens, h, device=self.device, requires_grad=True)

        def fwd_torch() -> torch.Tensor:
            y = x
            for m in mods:
                y = m(y)
            return y

        return fwd_torch, [*mods, x]

    def model_scaling(self) -> None:
        """Cost per saved tensor as a whole model grows: depths 1×, 4×, 16×; capture, report, JSON."""
        from memaudit.capture import capture

        depths = [int(d) for d in (self.args.model_depths or ("3,12,48" if self.cuda else "2,8,32")).split(",")]
        reps = 3
        points: list[dict[str, Any]] = []
        recipes = RECIPES if self.cuda else ("bf16",)
        for recipe in recipes:
            for depth in depths:
                if self.budget - self.elapsed() < 10:
                    self.r["skipped_sections"].append(f"model_scaling {recipe} depth {depth}: time budget")
                    continue
                try:
                    points.append(self._model_point(capture, recipe, depth, reps))
                except Exception as exc:  # noqa: BLE001
                    self.error(f"model_scaling/{recipe}/{depth}", exc, tb=True)
                finally:
                    gc.collect()
                    if self.cuda:
                        torch.cuda.empty_cache()
                if points:
                    p = points[-1]
                    log(
                        f"    {recipe} depth {depth}: saved {p['saved_tensors']} x{p['ratio']} "
                        f"capture +{p['capture_extra_us_per_saved']} us/saved, report "
                        f"{p['report_outputs_us_per_row']} us/row, "
                        f"report() {p['report_no_outputs_us_per_row']} us/row, json {p['json_us_per_row']} us/row"
                    )
        base = depths[0]
        for p in points:
            p["scale"] = round(p["depth"] / base, 3)
        self.r["scaling"] = {
            "model": (
                "stack of TE grouped-MLP layers (GroupedLinear-ScaledSwiGLU-GroupedLinear)"
                if self.cuda
                else "stack of Linear-GELU-Linear layers (CPU smoke)"
            ),
            "shape": self.shapes["model"],
            "depths": depths,
            "reps": reps,
            "points": points,
            "flat": _flatness(points),
        }

    def _model_point(self, capture: Any, recipe: str, depth: int, reps: int) -> dict[str, Any]:
        fwd, keep = self._stack(depth, recipe)
        params = [p for m in keep if isinstance(m, torch.nn.Module) for p in m.parameters()]
        leaves = [t for t in keep if isinstance(t, torch.Tensor)]

        def prep() -> None:
            for t in [*params, *leaves]:
                t.grad = None

        def sync() -> None:
            if self.cuda:
                torch.cuda.synchronize()

        bare_ms, cap_ms, rep_out, rep_all, js_ms = [], [], [], [], []
        n_saved = rows = 0
        for i in range(reps + 1):
            prep()
            sync()
            c0 = time.perf_counter()
            fwd().float().sum().backward()
            sync()
            b = (time.perf_counter() - c0) * 1e3
            prep()
            sync()
            c0 = time.perf_counter()
            with capture() as cap:
                y = fwd()
                sync()
                c1 = time.perf_counter()
                r0 = time.perf_counter()
                rep = cap.report(outputs=y)
                r1 = time.perf_counter()
                rep_nooutputs = cap.report() if i == reps or i == 1 else None
                r2 = time.perf_counter()
                text = json.dumps(rep.to_dict())
                r3 = time.perf_counter()
                c2 = time.perf_counter()
                y.float().sum().backward()
                sync()
                c3 = time.perf_counter()
            n_saved, rows = len(cap.records), len(rep.rows)
            del y, rep, cap, text
            if i == 0:
                continue
            bare_ms.append(b)
            cap_ms.append((c1 - c0 + c3 - c2) * 1e3)
            rep_out.append((r1 - r0) * 1e3)
            if rep_nooutputs is not None:
                rep_all.append((r2 - r1) * 1e3)
            js_ms.append((r3 - r2) * 1e3)
            del rep_nooutputs
        del fwd, keep
        med = statistics.median
        bm, cm = med(bare_ms), med(cap_ms)
        return {
            "recipe": recipe,
            "depth": depth,
            "saved_tensors": n_saved,
            "rows": rows,
            "bare_ms": round(bm, 3),
            "captured_ms": round(cm, 3),
            "ratio": round(cm / bm, 4) if bm else None,
            "capture_extra_us_per_saved": round((cm - bm) * 1e3 / max(n_saved, 1), 3),
            "report_outputs_ms": round(med(rep_out), 3),
            "report_no_outputs_ms": round(med(rep_all), 3) if rep_all else None,
            "json_ms": round(med(js_ms), 3),
            "report_outputs_us_per_row": round(med(rep_out) * 1e3 / max(rows, 1), 3),
            "report_no_outputs_us_per_row": round(med(rep_all) * 1e3 / max(rows, 1), 3) if rep_all else None,
            "json_us_per_row": round(med(js_ms) * 1e3 / max(rows, 1), 3),
        }

    def estimator(self) -> None:
        try:
            from memaudit.te import estimate as est
        except Exception as exc:  # noqa: BLE001
            self.r["estimate_configs_per_second"] = None
            self.r["details"]["estimator"] = {"error": f"memaudit.te.estimate does not import: {_err(exc)}"}
            raise
        configs: list[tuple[str, int, int, int, int]] = []
        for recipe in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"):
            for tokens in (4096, 8192, 65536):
                for hidden in (1024, 4096, 7168):
                    for ffn in (1024, 2048):
                        for groups in (1, 4, 8, 32):
                            try:
                                est.resolve(recipe, tokens, hidden, ffn, groups)
                            except Exception:  # noqa: BLE001 - combinations TE rejects are not configs
                                continue
                            configs.append((recipe, tokens, hidden, ffn, groups))
        window = 0.25 if self.smoke else 0.5
        windows = 3 if self.smoke else 5
        det: dict[str, Any] = {"configs": len(configs), "window_s": window, "windows": windows}

        def rate(fn: Callable[[tuple[str, int, int, int, int]], Any], name: str) -> float:
            c0 = time.perf_counter()
            for c in configs:
                fn(c)  # one pass first: compiles the structures the grid uses (memaudit/te/estimate/compiled.py)
            det[f"{name}_first_pass_configs_per_second"] = round(len(configs) / (time.perf_counter() - c0), 1)
            rates = []
            for _ in range(windows):
                n = 0
                c0 = time.perf_counter()
                while time.perf_counter() - c0 < window:
                    for c in configs:
                        fn(c)
                    n += len(configs)
                rates.append(n / (time.perf_counter() - c0))
            det[f"{name}_windows"] = [round(x, 1) for x in rates]
            return statistics.median(rates)

        fast = getattr(est, "estimate_totals", None)
        if fast is not None:
            det["totals_fn"] = "memaudit.te.estimate.resolve + estimate_totals (closed form, no rows)"
            det["totals_configs_per_second"] = round(rate(lambda c: fast(est.resolve(*c)), "totals"), 1)
        det["full_fn"] = (
            "memaudit.te.estimate.estimate(make_spec(...)) (builds every row, as `memaudit estimate` prints)"
        )
        det["full_configs_per_second"] = round(rate(lambda c: est.estimate(est.make_spec(*c)), "full"), 1)
        self.r["estimate_configs_per_second"] = det.get("totals_configs_per_second", det["full_configs_per_second"])
        self.r["estimate_full_configs_per_second"] = det["full_configs_per_second"]
        self.r["details"]["estimator"] = det
        log(f"    {det}")

    def meta(self) -> None:
        """bench/perf/meta.py in a fresh process (CPU only; its resident-set numbers need a clean process)."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "meta.json"
            argv = [
                sys.executable,
                str(ROOT / "bench" / "perf" / "meta.py"),
                "--json",
                str(out),
                "--repeats",
                "3" if self.smoke else "7",
            ]
            if self.smoke:
                argv.append("--no-cli")
            res = self._timed_subprocess(argv, timeout=240)
            if not out.exists():
                raise RuntimeError(f"bench/perf/meta.py wrote nothing: {res}")
            data = json.loads(out.read_text(encoding="utf-8"))
        self.r["meta"] = data["meta"]
        self.r["details"]["meta_environment"] = data["environment"]
        log(
            f"    meta: {data['meta']['meta_production_seconds']} s per production-shape cell, "
            f"devices {data['meta']['meta_production_devices']}"
        )

    def _timed_subprocess(
        self, argv: list[str], timeout: float, extra_env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        env = _sub_env()
        env.update(extra_env or {})
        c0 = time.perf_counter()
        try:
            p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            return {
                "seconds": round(time.perf_counter() - c0, 3),
                "error": f"timed out after {timeout:.0f} s",
                "stdout_tail": str(exc.stdout or "")[-800:],
            }
        out = {"seconds": round(time.perf_counter() - c0, 3), "rc": p.returncode}
        if p.returncode != 0:
            out["stderr_tail"] = p.stderr[-1500:]
        out["stdout_tail"] = p.stdout[-1500:]
        return out

    def _fused_env(self) -> dict[str, str]:
        from memaudit.te.targets.grouped_mlp import FUSED_ENV

        can = self.cuda and torch.cuda.get_device_capability()[0] == 10
        return {FUSED_ENV: os.environ.get(FUSED_ENV, "1" if can else "0")}

    def import_times(self) -> None:
        det: dict[str, Any] = {}
        det["python_torch"] = self._timed_subprocess([sys.executable, "-c", "import torch"], 120)
        if self.smoke:
            det["python_torch_te"] = {"skipped": "--cpu-smoke does not import TransformerEngine"}
        else:
            det["python_torch_te"] = self._timed_subprocess(
                [sys.executable, "-c", "import torch, transformer_engine.pytorch"], 180, self._fused_env()
            )
        det["python_memaudit_cli"] = self._timed_subprocess([sys.executable, "-c", "import torch, memaudit.cli"], 120)
        self.r["details"]["import_times"] = det
        log("    " + ", ".join(f"{k}={v.get('seconds')}s" for k, v in det.items()))

    def matrix_subprocess(self) -> None:
        target = "reference" if self.smoke else "te-grouped-mlp"
        with tempfile.TemporaryDirectory() as tmp:
            js = Path(tmp) / "matrix.json"
            argv = [
                sys.executable,
                "-c",
                "import memaudit.cli as c; c.main()",
                "run",
                "--target",
                target,
                "--recipe",
                "all",
                "--groups",
                "1,4,8",
                "--quiet",
                "--json",
                str(js),
            ]
            res = self._timed_subprocess(argv, 240, self._fused_env() if not self.smoke else None)
            res["command"] = "memaudit " + " ".join(argv[3:-2])
            if js.exists():
                try:
                    rep = json.loads(js.read_text())
                    cases = rep.get("cases", [])
                    res["cases"] = {
                        s: sum(1 for c in cases if c.get("status") == s) for s in ("ok", "skipped", "error")
                    }
                    res["case_status"] = {c.get("id"): c.get("status") for c in cases}
                except Exception as exc:  # noqa: BLE001
                    res["json_error"] = _err(exc)
        self.r["details"]["matrix"] = res
        if "error" not in res:
            self.r["matrix_seconds"] = res["seconds"]
        log(f"    matrix: {res.get('seconds')} s rc={res.get('rc')} cases={res.get('cases')}")

    def setup_target(self) -> None:
        det: dict[str, Any] = {}
        if self.smoke:
            from memaudit.te.targets.reference import ReferenceTarget

            self.target = ReferenceTarget()
            det["target"] = "reference"
        else:
            from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget, import_te, set_fused_env

            det["fused_env"] = set_fused_env(None)
            c0 = time.perf_counter()
            te, why = import_te()
            det["te_import_in_process_seconds"] = round(time.perf_counter() - c0, 3)
            if te is None:
                from memaudit.te.targets.reference import ReferenceTarget

                self.error("setup_target", f"{why}; falling back to the reference target on CUDA")
                self.target = ReferenceTarget()
                det["target"] = "reference (fallback: TE does not import)"
            else:
                self.target = TEGroupedMLPTarget()
                det["target"] = "te-grouped-mlp"
            c0 = time.perf_counter()
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            det["cuda_init_seconds"] = round(time.perf_counter() - c0, 3)
        self.r["target_used"] = det["target"]
        self.r["details"]["setup"] = det

    def environment(self) -> None:
        from memaudit.environment import environment

        env = environment(self.device)
        env["executable_python"] = sys.version.split()[0]
        if self.cuda:
            try:
                from memaudit.te.targets.grouped_mlp import cublaslt_version, fmt_cublaslt

                env["cublaslt_runtime"] = fmt_cublaslt(cublaslt_version())
            except Exception as exc:  # noqa: BLE001
                env["cublaslt_runtime"] = f"unknown ({_err(exc)})"
            env["gpu_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        self.r["environment"] = env

    def matrix_cells(self) -> None:
        from memaudit.runner import run_case
        from memaudit.targets.matrix import build_specs

        assert self.target is not None
        specs = build_specs(
            self.target, recipe="all", groups="1,4,8", dims={}, dtype=None, device=self.device, options={}
        )
        cells = []
        for spec in specs:
            c0 = time.perf_counter()
            case = run_case(self.target, spec)
            dt = time.perf_counter() - c0
            cells.append(
                {
                    "id": spec.id,
                    "status": case.status,
                    "seconds": round(dt, 3),
                    "reason": (case.reason or "")[:200] or None,
                }
            )
            log(f"    {spec.id}: {case.status} {dt:.2f}s")
        total = sum(c["seconds"] for c in cells)
        det: dict[str, Any] = {"cells": cells, "cells_total_seconds": round(total, 3)}
        matrix = self.r["details"].get("matrix", {})
        imports = self.r["details"].get("import_times", {})
        te_imp = imports.get("python_torch_te", {}).get("seconds")
        torch_imp = imports.get("python_torch", {}).get("seconds")
        cli_imp = imports.get("python_memaudit_cli", {}).get("seconds")
        if matrix.get("seconds") is not None:
            base = te_imp if te_imp is not None else torch_imp
            breakdown = {
                "python+torch import (subprocess)": torch_imp,
                "TransformerEngine import on top of torch": round(te_imp - torch_imp, 3)
                if te_imp is not None and torch_imp is not None
                else None,
                "memaudit.cli import on top of torch (rich, typer)": round(cli_imp - torch_imp, 3)
                if cli_imp is not None and torch_imp is not None
                else None,
                "cells (run_case, in process; includes CUDA/cuBLAS warm-up in the first cell)": round(total, 3),
            }
            known = (base or 0) + total + (breakdown["memaudit.cli import on top of torch (rich, typer)"] or 0)
            breakdown["rest (CUDA init, rendering, JSON, teardown)"] = round(matrix["seconds"] - known, 3)
            det["where_the_time_goes"] = breakdown
        self.r["details"]["matrix_cells"] = det

    def _spec(self, recipe: str, tokens: int, hidden: int, ffn: int, groups: int) -> Any:
        from memaudit.spec import CaseSpec

        return CaseSpec.make(
            self.target, recipe, groups, tokens=tokens, hidden=hidden, ffn=ffn, dtype="bf16", device=self.device
        )

    def _measure(self, recipe: str, shape: dict[str, int], *, full: bool) -> dict[str, Any]:
        key = (recipe, shape["tokens"], shape["hidden"], shape["ffn"], shape["groups"])
        if key in self.cache and (not full or self.cache[key].get("full")):
            return self.cache[key]
        spec = self._spec(recipe, **shape)
        if full:
            res = measure_config(
                self.target,
                spec,
                cuda=self.cuda,
                warmup=self.warmup,
                pairs=self.pairs,
                variants=("bare", "hooked", "floor", "memtracker"),
                memory=True,
                report_reps=3 if shape["tokens"] >= 32768 else 5,
                pack_timing=True,
            )
        else:
            res = measure_config(
                self.target,
                spec,
                cuda=self.cuda,
                warmup=max(1, self.warmup - 1),
                pairs=max(3, self.pairs // 3),
                variants=("bare", "hooked"),
                memory=False,
                report_reps=3,
                pack_timing=False,
            )
        res["full"] = full
        self.cache[key] = res
        return res

    def overhead(self, shape_name: str, recipe: str) -> None:
        shape = self.shapes[shape_name]
        res = self._measure(recipe, shape, full=True)
        self.r["details"].setdefault("overhead", {})[f"{shape_name}/{recipe}"] = res
        if res.get("skipped"):
            self.r["skipped_sections"].append(f"overhead/{shape_name}/{recipe}: {res['skipped']}")
            log(f"    skipped: {res['skipped']}")
            return
        for v, e in res.get("errors", {}).items():
            self.error(f"overhead/{shape_name}/{recipe}/{v}", e)
        t = res.get("timing", {})
        bare = t.get("bare", {})
        bare_ms = bare.get("device_ms", bare.get("cpu_ms"))

        def ratio(v: str) -> float | None:
            return t.get(v, {}).get("ratio")

        if self.r["runs"] == 1:  # else the medians of the independent runs stand (independent_runs)
            self.r[f"overhead_ratio_{shape_name}"][recipe] = ratio("hooked")
            self.r[f"floor_ratio_{shape_name}"][recipe] = ratio("floor")
            if ratio("hooked") is not None and ratio("floor"):
                one = round(ratio("hooked") / ratio("floor"), 4)
                self.r[f"overhead_over_floor_{shape_name}"][recipe] = {"median": one, "min": one, "max": one}
        self.r[f"anchor_overhead_ratio_{shape_name}"][recipe] = ratio("memtracker")
        rep_ms = res.get("report", {}).get("ms")
        hooked = t.get("hooked", {})
        hooked_ms = hooked.get("device_ms", hooked.get("cpu_ms"))
        if rep_ms is not None and hooked_ms is not None and bare_ms:
            self.r[f"overhead_ratio_with_report_{shape_name}"][recipe] = round((hooked_ms + rep_ms) / bare_ms, 4)
        self.r["report_ms"].setdefault(shape_name, {})[recipe] = rep_ms
        if "memory" in res:
            self.r["extra_peak_bytes"].setdefault(shape_name, {})[recipe] = res["memory"]["extra_peak_bytes"]
        elif not self.cuda:
            self.r["extra_peak_bytes"] = None
            self.r["extra_peak_bytes_reason"] = "no CUDA in --cpu-smoke (torch.cuda.max_memory_allocated only)"
        pack = res.get("pack", {})
        self.r["pack_us_per_tensor"].setdefault(shape_name, {})[recipe] = {
            "direct": pack.get("us_per_tensor"),
            "wall_delta": res.get("cpu_delta_us_per_tensor"),
        }
        log(
            f"    bare {bare_ms} ms | hooked x{ratio('hooked')} | floor x{ratio('floor')} | "
            f"MemTracker x{ratio('memtracker')} | report {rep_ms} ms | n_saved {res.get('n_saved')} | "
            f"extra_peak {res.get('memory', {}).get('extra_peak_bytes')} | pack {pack.get('us_per_tensor')} us/tensor"
        )

    def scaling(self) -> None:
        rows: list[dict[str, Any]] = []
        sg, st = self.shapes["scale_groups"], self.shapes["scale_tokens"]
        points = [
            ("groups", {"tokens": sg["tokens"], "hidden": sg["hidden"], "ffn": sg["ffn"], "groups": g})
            for g in sg["groups"]
        ]
        points += [
            ("tokens", {"tokens": t, "hidden": st["hidden"], "ffn": st["ffn"], "groups": st["groups"]})
            for t in st["tokens"]
        ]
        for axis, shape in points:
            if self.budget - self.elapsed() < 8:
                self.r["skipped_sections"].append(f"scaling {shape}: time budget")
                continue
            try:
                res = self._measure("bf16", shape, full=False)
            except Exception as exc:  # noqa: BLE001
                self.error(f"scaling/{shape}", exc, tb=True)
                continue
            t = res.get("timing", {})
            bare = t.get("bare", {})
            hooked = t.get("hooked", {})
            row = {
                "axis": axis,
                **shape,
                "n_saved": res.get("n_saved"),
                "bare_ms": bare.get("device_ms", bare.get("cpu_ms")),
                "hooked_ms": hooked.get("device_ms", hooked.get("cpu_ms")),
                "ratio": hooked.get("ratio"),
                "report_ms": res.get("report", {}).get("ms"),
                "report_rows": res.get("report", {}).get("rows"),
                "cpu_delta_us_per_tensor": res.get("cpu_delta_us_per_tensor"),
                "reused_from_full_measurement": bool(res.get("full")),
                "errors": res.get("errors") or None,
                "skipped": res.get("skipped"),
            }
            rows.append(row)
            log(
                f"    {axis} T={shape['tokens']} G={shape['groups']}: n_saved={row['n_saved']} "
                f"x{row['ratio']} report {row['report_ms']} ms"
            )
        self.r["details"]["scaling"] = rows

    def sync_debug(self) -> None:
        """Syncs seen by torch.cuda.set_sync_debug_mode('warn'): bare vs captured forward+backward+report."""
        import warnings

        from memaudit.capture import capture

        out: dict[str, Any] = {}
        shape = {"tokens": 2048, "hidden": 1024, "ffn": 2048, "groups": 4}
        for recipe in RECIPES:
            spec = self._spec(recipe, **shape)
            reason = self.target.skip_reason(spec)
            if reason:
                out[recipe] = {"skipped": reason}
                continue
            built = self.target.build(spec)
            r = Runner(built, True)

            def captured(b: Any = built) -> None:
                with capture() as cap:
                    o = b.forward(cap)
                    cap.report(outputs=o)
                    b.backward(o)

            def count(fn: Callable[[], None], rr: Runner = r) -> list[str]:
                rr.prep()
                torch.cuda.synchronize()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        fn()
                    finally:
                        torch.cuda.set_sync_debug_mode("default")
                return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]

            try:
                r.bare()
                captured()
                bare = count(r.bare)
                hooked = count(captured)
                pkg = str(ROOT / "memaudit")
                in_memaudit = [s for s in hooked if s.startswith(pkg)]
                out[recipe] = {
                    "bare_syncs": len(bare),
                    "captured_syncs": len(hooked),
                    "bare_sites": sorted(set(bare)),
                    "captured_sites": sorted(set(hooked)),
                    "syncs_in_memaudit": in_memaudit,
                    "hooks_add_no_sync": len(hooked) == len(bare) and not in_memaudit,
                }
            except Exception as exc:  # noqa: BLE001
                out[recipe] = {"error": _err(exc)}
            finally:
                torch.cuda.set_sync_debug_mode("default")
                del built, r
                gc.collect()
            log(f"    {recipe}: {out[recipe]}")
        self.r["details"]["sync_debug"] = out

    def sac_probe(self) -> None:
        """SACEstimator runs under FakeTensorMode and can abort the process: one subprocess per target."""
        probe = Path(__file__).resolve().parent / "sac_probe.py"
        shape = self.shapes["small"]
        runs = []
        for name in ("reference",) if self.smoke else ("reference", "te-grouped-mlp"):
            if self.budget - self.elapsed() < 15:
                self.r["skipped_sections"].append(f"sac_estimator/{name}: time budget")
                continue
            argv = [
                sys.executable,
                str(probe),
                "--targets",
                name,
                "--device",
                self.device,
                "--tokens",
                str(shape["tokens"]),
                "--hidden",
                str(shape["hidden"]),
                "--ffn",
                str(shape["ffn"]),
                "--groups",
                str(shape["groups"]),
            ]
            res = self._timed_subprocess(argv, 60, None if self.smoke else self._fused_env())
            lines = []
            for line in (res.pop("stdout_tail", None) or "").splitlines():
                if line.startswith("{"):
                    try:
                        lines.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
            res["target"] = name
            res["lines"] = lines
            last = lines[-1] if lines else {}
            rc = res.get("rc")
            if rc is not None and rc < 0:
                res["died"] = f"killed by signal {-rc} during stage {last.get('stage')!r}"
            runs.append(res)
            log(f"    {name}: rc={rc} {res.get('died') or ''} {last}")
        self.r["details"]["sac_estimator"] = runs


def _spread(values: list[float]) -> dict[str, Any] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {
        "median": round(statistics.median(vals), 4),
        "min": round(min(vals), 4),
        "max": round(max(vals), 4),
        "values": [round(v, 4) for v in vals],
    }


def aggregate_runs(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and min–max over independent runs of capture/bare, floor/bare and (capture/bare)/(floor/bare)."""
    out: dict[str, Any] = {"runs": sum(1 for e in per_run if any(e.get(s) for s in ("production", "small")))}
    for shape in ("production", "small"):
        ratio, floor, over, spread_r, spread_f = {}, {}, {}, {}, {}
        for rc in RECIPES:
            cells = [(e.get(shape) or {}).get(rc) or {} for e in per_run]
            rs = [c.get("ratio") for c in cells if c.get("ratio") is not None]
            fs = [c.get("floor") for c in cells if c.get("floor") is not None]
            of = [c["ratio"] / c["floor"] for c in cells if c.get("ratio") is not None and c.get("floor")]
            if not rs:
                continue
            spread_r[rc], spread_f[rc] = _spread(rs), _spread(fs)
            ratio[rc] = spread_r[rc]["median"]
            floor[rc] = spread_f[rc]["median"] if spread_f[rc] else None
            sp = _spread(of)
            if sp is not None:
                over[rc] = {k: sp[k] for k in ("median", "min", "max")}
        out[f"overhead_ratio_{shape}"] = ratio
        out[f"floor_ratio_{shape}"] = floor
        out[f"overhead_over_floor_{shape}"] = over
        out[f"overhead_ratio_spread_{shape}"] = spread_r
        out[f"floor_ratio_spread_{shape}"] = spread_f
    return out


def _flatness(points: list[dict[str, Any]]) -> dict[str, Any]:
    """max/min across depths of each per-row cost, per recipe (1.0 is perfectly flat)."""
    out: dict[str, Any] = {}
    for rc in sorted({p["recipe"] for p in points}):
        pts = [p for p in points if p["recipe"] == rc]
        for k in (
            "report_outputs_us_per_row",
            "report_no_outputs_us_per_row",
            "json_us_per_row",
            "capture_extra_us_per_saved",
        ):
            vals = [p[k] for p in pts if p.get(k) is not None and p[k] > 0]
            if len(vals) >= 2:
                out.setdefault(rc, {})[k] = round(max(vals) / min(vals), 3)
    return out


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------
def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("✅" if ok else "❌")


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.3f}{unit}" if abs(v) < 100 else f"{v:,.0f}{unit}"
    if isinstance(v, int):
        return f"{v:,}{unit}"
    return f"{v}{unit}"


def verdict_rows(r: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(metric, value, target, met) rows for the summary."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for shape, limit in (
        ("production", TARGETS["overhead_ratio_production"]),
        ("small", TARGETS["overhead_ratio_small"]),
    ):
        for recipe in RECIPES:
            v = (r.get(f"overhead_ratio_{shape}") or {}).get(recipe)
            skipped = recipe not in (r.get(f"overhead_ratio_{shape}") or {})
            rows.append(
                (
                    f"overhead, {shape}, {recipe} (fwd+bwd under capture() / bare)",
                    "skipped" if skipped else _fmt(v, "×"),
                    f"≤ {limit}×",
                    None if v is None else v <= limit,
                )
            )
    runs = r.get("runs") or 1
    for shape, limit in (("production", OVER_FLOOR_GOALS["production"]), ("small", OVER_FLOOR_GOALS["small"])):
        for recipe in RECIPES:
            o = (r.get(f"overhead_over_floor_{shape}") or {}).get(recipe)
            if o is None:
                continue
            value = (
                f"{o['median']:.3f}× ({o['min']:.3f}–{o['max']:.3f}, {runs} runs)"
                if runs > 1
                else f"{o['median']:.3f}×"
            )
            rows.append(
                (
                    f"over the floor, {shape}, {recipe} ((capture/bare) ÷ (floor/bare), per run)",
                    value,
                    f"≤ {limit}×",
                    o["median"] <= limit,
                )
            )
    extra = r.get("extra_peak_bytes")
    if isinstance(extra, dict) and extra:
        for shape, per in extra.items():
            for recipe, v in per.items():
                rows.append(
                    (f"extra peak bytes, {shape}, {recipe}", _fmt(v, " B"), "0 B", None if v is None else v == 0)
                )
    else:
        rows.append(("extra peak bytes", "n/a", "0 B", None))
    ms = r.get("matrix_seconds")
    rows.append(
        (
            "matrix wall time (`memaudit run --recipe all --groups 1,4,8`)",
            _fmt(ms, " s"),
            f"< {TARGETS['matrix_seconds']:.0f} s",
            None if ms is None else ms < TARGETS["matrix_seconds"],
        )
    )
    eps = r.get("estimate_configs_per_second")
    limit = TARGETS["estimate_configs_per_second"]
    rows.append(
        (
            "estimator throughput, closed-form totals",
            _fmt(eps, "/s"),
            f"≥ {limit:,.0f}/s",
            None if eps is None else eps >= limit,
        )
    )
    full = r.get("estimate_full_configs_per_second")
    rows.append(
        (
            "estimator throughput, full estimate() with rows",
            _fmt(full, "/s"),
            f"≥ {limit:,.0f}/s",
            None if full is None else full >= limit,
        )
    )
    rows.extend(_bench_meta().verdict_rows(r.get("meta") or {}))
    return rows


def _bench_meta() -> Any:
    """bench/perf/meta.py as a module (its verdict rows), loaded by path: bench/ is not a package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("memaudit_bench_meta", ROOT / "bench" / "perf" / "meta.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def summary_lines(r: dict[str, Any]) -> str:
    lines = ["summary:"]
    for metric, value, target, ok in verdict_rows(r):
        lines.append(f"  {_mark(ok)} {metric}: {value} (target {target})")
    for shape in ("production", "small"):
        anchor = r.get(f"anchor_overhead_ratio_{shape}") or {}
        floor = r.get(f"floor_ratio_{shape}") or {}
        for recipe in RECIPES:
            if recipe in anchor or recipe in floor:
                lines.append(
                    f"  {shape}/{recipe}: floor x{floor.get(recipe)} MemTracker x{anchor.get(recipe)} "
                    f"report {((r.get('report_ms') or {}).get(shape) or {}).get(recipe)} ms"
                )
    if r.get("errors"):
        lines.append(
            f"  {len(r['errors'])} error(s): " + "; ".join(f"{e['where']}: {e['error']}" for e in r["errors"][:6])
        )
    return "\n".join(lines)


def render_markdown(r: dict[str, Any]) -> str:
    env = r.get("environment") or {}
    out = [
        "# memaudit benchmarks"
        + (" (CPU smoke: proves the harness, not the targets)" if r.get("mode") == "cpu-smoke" else ""),
        "",
    ]
    out.append(
        f"Created {r.get('created')} · target `{r.get('target_used')}` · {r.get('timing_method')} · "
        f"{r['settings']['warmup']} warm-up rounds, {r['settings']['pairs']} alternating rounds · "
        f"elapsed {_fmt(r.get('elapsed_seconds'), ' s')}" + ("" if r.get("complete") else " · **incomplete run**")
    )
    out.append("")
    if env:
        keys = (
            "device",
            "device_class",
            "python",
            "torch",
            "cuda",
            "transformer_engine",
            "cublaslt",
            "cudnn_frontend",
            "memaudit",
        )
        out.append("Environment: " + ", ".join(f"{k} `{env.get(k)}`" for k in keys if k in env))
        out.append("")
    out += ["| metric | value | target | |", "|---|---|---|---|"]
    rows = verdict_rows(r)
    for metric, value, target, ok in rows:
        out.append(f"| {metric} | {value} | {target} | {_mark(ok)} |")
    missed = [m for m, _, _, ok in rows if ok is False]
    out.append("")
    out.append("**Missed targets:** " + ("; ".join(missed) if missed else "none") + ".")
    out.append("")
    out += [
        "## Overhead detail",
        "",
        "| shape / recipe | bare ms | capture() | with report() | report ms | floor hook | MemTracker (anchor) | "
        "saved tensors | pack µs/tensor (direct / wall delta) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    details = (r.get("details") or {}).get("overhead") or {}
    for key, res in details.items():
        shape, recipe = key.split("/", 1)
        if res.get("skipped"):
            out.append(f"| {key} | skipped: {res['skipped']} | | | | | | | |")
            continue
        t = res.get("timing") or {}
        b = t.get("bare") or {}
        bare_ms = b.get("device_ms", b.get("cpu_ms"))
        pack = ((r.get("pack_us_per_tensor") or {}).get(shape) or {}).get(recipe) or {}
        earlier = EARLIER_H200["bare_ms"].get(shape, {}).get(recipe)
        out.append(
            f"| {key} | {_fmt(bare_ms)}"
            + (f" (earlier {earlier})" if earlier and r.get("mode") != "cpu-smoke" else "")
            + f" | {_fmt((t.get('hooked') or {}).get('ratio'), '×')}"
            f" | {_fmt((r.get(f'overhead_ratio_with_report_{shape}') or {}).get(recipe), '×')}"
            f" | {_fmt((res.get('report') or {}).get('ms'))}"
            f" | {_fmt((t.get('floor') or {}).get('ratio'), '×')}"
            f" | {_fmt((t.get('memtracker') or {}).get('ratio'), '×')}"
            f" | {_fmt(res.get('n_saved'))}"
            f" | {_fmt(pack.get('direct'))} / {_fmt(pack.get('wall_delta'))} |"
        )
    spread_keys = [k for k in ("production", "small") if r.get(f"overhead_ratio_spread_{k}")]
    if spread_keys:
        out += [
            "",
            f"## Independent runs ({r.get('runs')} fresh processes; median (min–max) of per-run ratios)",
            "",
            "| shape / recipe | capture() / bare | floor / bare | over the floor | goal |",
            "|---|---|---|---|---|",
        ]

        def sp(d: dict[str, Any] | None) -> str:
            return "n/a" if not d else f"{d['median']:.4f}× ({d['min']:.4f}–{d['max']:.4f})"

        for shape in spread_keys:
            for recipe in RECIPES:
                c = (r.get(f"overhead_ratio_spread_{shape}") or {}).get(recipe)
                if c is None:
                    continue
                out.append(
                    f"| {shape}/{recipe} | {sp(c)} | {sp((r.get(f'floor_ratio_spread_{shape}') or {}).get(recipe))} "
                    f"| {sp((r.get(f'overhead_over_floor_{shape}') or {}).get(recipe))} | ≤ "
                    f"{OVER_FLOOR_GOALS[shape]}× |"
                )
    model = r.get("scaling")
    if isinstance(model, dict) and model.get("points"):
        out += [
            "",
            f"## Whole-model scaling ({model.get('model')}, {model.get('shape')}; medians of {model.get('reps')})",
            "",
            "| recipe | layers | scale | saved tensors | bare ms | capture() / bare | capture µs/saved | "
            "report(outputs) µs/row "
            "| report() µs/row | JSON µs/row |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in model["points"]:
            out.append(
                f"| {p['recipe']} | {p['depth']} | {p.get('scale')}× | {_fmt(p['saved_tensors'])} | "
                f"{_fmt(p['bare_ms'])} "
                f"| {_fmt(p.get('ratio'), '×')} | {_fmt(p.get('capture_extra_us_per_saved'))} | "
                f"{_fmt(p.get('report_outputs_us_per_row'))} "
                f"| {_fmt(p.get('report_no_outputs_us_per_row'))} | {_fmt(p.get('json_us_per_row'))} |"
            )
        out += ["", f"Flatness (max/min across depths): {model.get('flat')}"]
    scaling = (r.get("details") or {}).get("scaling") or []
    if scaling:
        out += [
            "",
            "## Scaling (bf16)",
            "",
            "| axis | T | G | saved tensors | bare ms | capture() | report ms | report rows |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in scaling:
            out.append(
                f"| {s['axis']} | {s['tokens']} | {s['groups']} | {_fmt(s.get('n_saved'))} | {_fmt(s.get('bare_ms'))} "
                f"| {_fmt(s.get('ratio'), '×')} | {_fmt(s.get('report_ms'))} | {_fmt(s.get('report_rows'))} |"
            )
    mc = (r.get("details") or {}).get("matrix_cells") or {}
    if mc.get("where_the_time_goes"):
        out += ["", "## Where the matrix time goes", ""]
        for k, v in mc["where_the_time_goes"].items():
            out.append(f"- {k}: {_fmt(v, ' s')}")
    sd = (r.get("details") or {}).get("sync_debug")
    if sd:
        out += ["", "## Device syncs (`set_sync_debug_mode('warn')`, fwd+report+bwd)", ""]
        for recipe, v in sd.items():
            out.append(
                f"- {recipe}: bare {v.get('bare_syncs')}, captured {v.get('captured_syncs')}, "
                f"in memaudit {v.get('syncs_in_memaudit')}" + (f" ({v['error']})" if v.get("error") else "")
            )
    sac = (r.get("details") or {}).get("sac_estimator")
    if sac:
        out += ["", "## SACEstimator (subprocess per target; fake tensors, so not an overhead ratio)", ""]
        for run in sac:
            last = (run.get("lines") or [{}])[-1]
            what = (
                run.get("died")
                or run.get("error")
                or last.get("error")
                or last.get("skipped")
                or {k: v for k, v in last.items() if k.endswith("_ms")}
            )
            out.append(f"- {run.get('target')}: {what}")
    if r.get("errors") or r.get("skipped_sections"):
        out += ["", "## Errors and skips", ""]
        for e in r.get("errors") or []:
            out.append(f"- {e['where']}: `{e['error']}`")
        for s in r.get("skipped_sections") or []:
            out.append(f"- skipped: {s}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path (written atomically after every section)")
    ap.add_argument("--md", default=None, help="markdown summary path (default: --out with .md)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run with the reference target")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up rounds (default 3; smoke 1)")
    ap.add_argument("--pairs", type=int, default=None, help="timed alternating rounds (default 20; smoke 5)")
    ap.add_argument("--budget-s", type=float, default=270.0, help="skip later sections past this many seconds")
    ap.add_argument(
        "--grace-s",
        type=float,
        default=45.0,
        help="exit (status 3) this long after the budget even if a section hangs; results so far are kept",
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=1,
        help="independent invocations (fresh processes) of the overhead rounds; ratios are their medians",
    )
    ap.add_argument(
        "--run-warmup", type=int, default=None, help="warm-up rounds in each independent run (default: --warmup)"
    )
    ap.add_argument(
        "--run-pairs", type=int, default=None, help="alternating rounds in each independent run (default: --pairs)"
    )
    ap.add_argument("--run-timeout-s", type=float, default=120.0, help="kill an independent run after this long")
    ap.add_argument(
        "--runs-share",
        type=float,
        default=0.45,
        help="start no further independent run (after two) once this share of --budget-s is used",
    )
    ap.add_argument(
        "--model-depths",
        default=None,
        help="layer counts of the whole-model scaling case (default 3,12,48 on CUDA; 2,8,32 smoke)",
    )
    ap.add_argument("--child-overhead", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    Bench(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
