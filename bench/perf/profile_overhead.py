"""Where capture()'s overhead goes on the TE target: variants that switch one part off at a time.

Run on a GPU: ``python bench/perf/profile_overhead.py [--recipes bf16,fp8-current] [--shapes small,production]``.
For each shape and recipe it times (median of alternating rounds, wall time between device syncs)
a bare forward+backward, the floor hook pair, and ``capture()`` with parts switched off
(no TE classifier, no module names, no labels, an empty capture around a bare step), counts
what one step does (packs, module calls, ``prepare_for_saving`` calls, hook pushes), and prints a
cProfile of ``capture()`` rounds minus bare rounds: the functions whose time grew.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from memaudit.capture import capture
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget, set_fused_env

SHAPES = {
    "production": {"tokens": 65536, "hidden": 4096, "ffn": 2048, "groups": 8},
    "small": {"tokens": 2048, "hidden": 4096, "ffn": 2048, "groups": 8},
}


class _NoCap:
    def label(self, *args: Any, **kwargs: Any) -> None:
        return None


NOCAP = _NoCap()


def variants(built: Any) -> dict[str, Callable[[], None]]:
    def step(cap: Any) -> None:
        built.backward(built.forward(cap))

    def bare() -> None:
        step(NOCAP)

    meta: list[Any] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        meta.append((tuple(t.shape), t.dtype, t.numel() * t.element_size()))
        return t

    def floor() -> None:
        meta.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step(NOCAP)

    def empty() -> None:
        with capture():
            pass
        step(NOCAP)

    def make(**kw: Any) -> Callable[[], None]:
        labels = kw.pop("labels", True)

        def run() -> None:
            with capture(**kw) as cap:
                step(cap if labels else NOCAP)

        return run

    return {
        "bare": bare,
        "floor": floor,
        "empty capture + bare": empty,
        "capture(plugins=[], modules=False)": make(plugins=[], modules=False),
        "capture(modules=False)": make(modules=False),
        "capture(plugins=[])": make(plugins=[]),
        "capture(), no labels": make(labels=False),
        "capture()": make(),
    }


def counts(built: Any) -> dict[str, int]:
    """What one captured step does: packs, module calls, prepare_for_saving calls, hook pushes."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    from memaudit.te.capture import classify

    n = {"module_calls": 0, "prepare_for_saving": 0, "hook_pushes": 0}

    def pre(m: Any, a: Any) -> None:
        n["module_calls"] += 1

    originals = {}
    for cls in classify.storage_classes():
        orig = vars(cls)["prepare_for_saving"]
        originals[cls] = orig

        def counted(obj: Any, *a: Any, _o: Any = orig, **k: Any) -> Any:
            n["prepare_for_saving"] += 1
            return _o(obj, *a, **k)

        cls.prepare_for_saving = counted
    hcls = torch.autograd.graph.saved_tensors_hooks
    enter = hcls.__enter__

    def counted_enter(self: Any) -> Any:
        n["hook_pushes"] += 1
        return enter(self)

    hcls.__enter__ = counted_enter
    h = register_module_forward_pre_hook(pre)
    try:
        with capture() as cap:
            out = built.forward(cap)
        n["packs"] = len(cap.records)
        built.backward(out)
    finally:
        h.remove()
        hcls.__enter__ = enter
        for cls, orig in originals.items():
            cls.prepare_for_saving = orig
    n["hook_pushes"] -= 1  # capture()'s own push
    return n


def time_variants(vs: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in vs}
    for _ in range(3):
        for fn in vs.values():
            fn()
    for _ in range(rounds):
        for name, fn in vs.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def profile(fn: Callable[[], None], rounds: int) -> dict[tuple[str, int, str], tuple[int, float]]:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    st = pstats.Stats(prof)
    return {k: (v[1], v[2]) for k, v in st.stats.items()}  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", default="bf16,fp8-current")
    ap.add_argument("--shapes", default="small,production")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    set_fused_env(None)
    out: dict[str, Any] = {}
    for shape in args.shapes.split(","):
        for recipe in args.recipes.split(","):
            key = f"{shape}/{recipe}"
            spec = CaseSpec.make(get_target("te-grouped-mlp"), recipe, device="cuda", **SHAPES[shape])
            built = TEGroupedMLPTarget().build(spec)
            vs = variants(built)
            med = time_variants(vs, args.rounds)
            base = med["bare"]
            print(f"\n== {key}: {json.dumps(counts(built))}", flush=True)
            for name, ms in med.items():
                print(f"  {name:36s} {ms:8.3f} ms  x{ms / base:.4f}  {1e3 * (ms - base):+8.1f} us", flush=True)
            out[key] = {"median_ms": med, "counts": counts(built)}
            if shape != "small":
                continue
            n = 10
            pb, pc = profile(vs["bare"], n), profile(vs["capture()"], n)
            grown = []
            for k, (calls, tt) in pc.items():
                bcalls, btt = pb.get(k, (0, 0.0))
                grown.append(((tt - btt) / n * 1e6, (calls - bcalls) / n, k))
            grown.sort(reverse=True)
            print("  cProfile, per step, capture() minus bare: tottime us, extra calls, function", flush=True)
            for dt, dc, (file, line, fn) in grown[:40]:
                print(f"    {dt:8.1f} us  {dc:+7.1f}  {file.rsplit('/', 2)[-2:]!s}:{line} {fn}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
