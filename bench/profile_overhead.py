"""Where capture()'s overhead goes on the TE target: bare vs hooks-only vs capture() variants.

Run on a GPU: ``python bench/profile_overhead.py [--recipe fp8-current] [--tokens 65536]``. It times
(median of alternating rounds, CUDA-synchronized wall time) a bare forward+backward, the same under
a no-op ``saved_tensors_hooks`` pair, under ``capture(plugins=[])`` (no TE classifier), and under
``capture()``, then prints a cProfile of the memaudit functions during ``capture()`` rounds.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

from memaudit.capture import Capture, capture
from memaudit.spec import CaseSpec
from memaudit.te.target import TEGroupedMLPTarget, set_fused_env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="fp8-current")
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    set_fused_env(None)
    spec = CaseSpec.make("te-grouped-mlp", args.recipe, 8, tokens=args.tokens, hidden=4096, ffn=2048, device="cuda")
    built = TEGroupedMLPTarget().build(spec)

    def bare() -> None:
        built.backward(built.forward(Capture()))

    def floor() -> None:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            out = built.forward(Capture())
        built.backward(out)

    def no_te() -> None:
        with capture(plugins=[]) as cap:
            out = built.forward(cap)
        built.backward(out)

    def full() -> None:
        with capture() as cap:
            out = built.forward(cap)
        built.backward(out)

    variants = {"bare": bare, "floor": floor, "capture(plugins=[])": no_te, "capture()": full}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(3):
        for fn in variants.values():
            fn()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["bare"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:22s} {m * 1e3:8.3f} ms  x{m / base:.4f}", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        full()
    torch.cuda.synchronize()
    prof.disable()
    stats = pstats.Stats(prof).sort_stats("tottime")
    stats.print_stats(25)


if __name__ == "__main__":
    main()
