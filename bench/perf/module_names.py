"""What naming rows by module costs, and what ``stack=True`` costs on top (CPU; docs/investigations/bench.md).

    python bench/perf/module_names.py [--rounds 31] [--depth 24] [--json OUT]

A model of many small modules (``depth`` blocks of LayerNorm -> Linear -> GELU -> Linear, width
64, batch 16), so that Python overhead per module call and per saved tensor is visible rather
than hidden behind kernels: a worst case for both. Each round runs every variant once, forward
and backward, in a rotating order; the first rounds are warm-up. Reported: the median wall time
per variant and its ratio to the bare run, and the added microseconds per module call and per
saved tensor; ``pair_ratio`` is the median over rounds of each round's own ratio (a round's
variants run back to back, so load from other processes cancels out better than in the ratio of
medians). Variants:

* ``bare``: no hooks;
* ``capture(modules=False)``: saved-tensor hooks only, no module names (the capture as before);
* ``capture()``: with module names (two global module hooks);
* ``capture(stack=True)``: with module names and the source line of every save;
* ``no-op module hooks + capture(modules=False)``: two global module hooks that do nothing, i.e.
  what PyTorch's ``Module.__call__`` costs once any global hook exists (its slow path), the part
  of the module-name cost that no hook-based tracker avoids;
* ``ModuleTracker + capture(modules=False)``: module names the other way, torch's
  ``torch.utils.module_tracker.ModuleTracker`` (which also registers autograd hooks on every
  module's inputs and outputs), for comparison.

``pack_us`` times the pack hook alone (``Capture.hook_pair``) on one small tensor, 20,000 calls
a sample, median of 15 samples, inside the model's innermost module call as autograd would make
it: the per-saved-tensor price of each variant, free of kernel time.

Where the memaudit on the path has no ``modules`` argument (an older checkout), only ``bare`` and
``capture()`` run: that measures the capture before module names.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn as nn

from memaudit.capture import capture


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--depth", type=int, default=24)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(64) for _ in range(args.depth)))
    x = torch.randn(16, 64, requires_grad=True)
    module_calls = sum(1 for _ in model.modules())  # every module is called once per forward

    def step(ctx: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            with ctx():
                y = model(x)
            y.sum().backward()

        return run

    has_modules = "modules" in inspect.signature(capture).parameters
    variants: dict[str, Callable[[], None]] = {"bare": step(nullcontext), "capture()": step(capture)}
    if has_modules:
        from torch.utils.module_tracker import ModuleTracker

        class Tracked:
            def __enter__(self) -> None:
                self.t, self.c = ModuleTracker(), capture(modules=False)
                self.t.__enter__()
                self.c.__enter__()

            def __exit__(self, *exc: object) -> None:
                self.c.__exit__(*exc)
                self.t.__exit__(*exc)

        class NoopHooks:
            def __enter__(self) -> None:
                from torch.nn.modules.module import (
                    register_module_forward_hook,
                    register_module_forward_pre_hook,
                )

                self.h = (
                    register_module_forward_pre_hook(lambda m, a: None),
                    register_module_forward_hook(lambda m, a, o: None, always_call=True),
                )
                self.c = capture(modules=False)
                self.c.__enter__()

            def __exit__(self, *exc: object) -> None:
                self.c.__exit__(*exc)
                for h in self.h:
                    h.remove()

        variants["capture(modules=False)"] = step(lambda: capture(modules=False))
        variants["no-op module hooks + capture(modules=False)"] = step(NoopHooks)
        variants["capture(stack=True)"] = step(lambda: capture(stack=True))
        variants["ModuleTracker + capture(modules=False)"] = step(Tracked)

    with capture() as cap:
        model(x)
    saved = len(cap.records)

    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.warmup + args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            variants[name]()
            dt = time.perf_counter() - t0
            if r >= args.warmup:
                times[name].append(dt)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    bare = med["bare"]
    out: dict[str, Any] = {
        "depth": args.depth,
        "module_calls": module_calls,
        "saved_tensors": saved,
        "rounds": args.rounds,
        "median_ms": {k: round(v, 3) for k, v in med.items()},
        "ratio_vs_bare": {k: round(v / bare, 3) for k, v in med.items()},
    }

    def pair(a: str, b: str) -> float:
        return round(statistics.median(x / y for x, y in zip(times[a], times[b], strict=True)), 3)

    out["pair_ratio_vs_bare"] = {k: pair(k, "bare") for k in names}
    if has_modules:
        out["pair_ratio_vs_capture_without_modules"] = {k: pair(k, "capture(modules=False)") for k in names}
        out["pair_ratio_stack_vs_capture"] = pair("capture(stack=True)", "capture()")
        plain = med["capture(modules=False)"]
        out["module_names_us_per_module_call"] = round((med["capture()"] - plain) * 1e3 / module_calls, 2)
        out["stack_us_per_saved_tensor"] = round((med["capture(stack=True)"] - med["capture()"]) * 1e3 / saved, 2)
        out["ratio_vs_capture_without_modules"] = {k: round(v / plain, 3) for k, v in med.items()}
    out["pack_us"] = pack_us(has_modules)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def pack_us(has_modules: bool) -> dict[str, float]:
    """Microseconds per pack-hook call, per capture variant (called from inside a module's forward)."""
    t = torch.randn(4, 4)
    kinds = {"capture()": {}}
    if has_modules:
        kinds = {"capture(modules=False)": {"modules": False}, "capture()": {}, "capture(stack=True)": {"stack": True}}

    class Probe(nn.Module):
        def __init__(self, kw: dict[str, Any], samples: list[float]) -> None:
            super().__init__()
            self.kw, self.samples = kw, samples

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with capture(**self.kw) as cap:
                pack = cap.hook_pair[0]
                t0 = time.perf_counter()
                for _ in range(20000):
                    pack(x)
                self.samples.append((time.perf_counter() - t0) / 20000 * 1e6)
            return x

    out = {}
    for name, kw in kinds.items():
        samples: list[float] = []
        outer = nn.Sequential(nn.Sequential(Probe(kw, samples)))
        for _ in range(15):
            outer(t)
        out[name] = round(statistics.median(samples), 3)
    return out


if __name__ == "__main__":
    main()
