#!/usr/bin/env python
"""What ``capture()`` adds to one step over the floor hook pair, on CPU.

The GPU bench (``bench/perf/run.py``) judges memaudit at the H200's shapes; this one isolates the
CPU work the capture adds per step, where a small GPU step is bound by it. Two steps whose
compute is negligible, so the hooks' cost is most of what changes:

* ``bf16``: the reference grouped MLP (G=8): 36 saved tensors, what TE's bf16 unfused path saves;
* ``fp8``: TE's fuser save pattern (``prepare_for_saving`` then ``save_for_backward``,
  ops/fuser.py) over REAL TE ``Float8TensorStorage`` objects laid out as TE's fp8-current unfused
  path on Hopper lays them out: 32 storages decomposed, 68 saved tensors (needs TE importable).

For each step: bare, the floor (a pack that appends shape, dtype and bytes and returns the
tensor; an identity unpack), ``capture(plugins=[], modules=False)`` and ``capture()``, in
alternating rounds; thread CPU time, medians. Printed per step and per saved tensor over the floor.

    python bench/perf/hot_path.py [--rounds 400] [--json OUT]
    python bench/perf/hot_path.py --instructions [--steps 20] [--json OUT]

``--instructions`` counts instructions instead of timing: the same variants run under valgrind's
callgrind, counting only between client requests around each variant (a 20-line C shim compiled
with the machine's cc and valgrind headers, in a temporary folder), with a ``gc.collect()`` before
each. The counts repeat to within a few instructions per step whatever else the machine is
doing, so two checkouts can be compared on a shared machine (``bench/perf/hot_path.py`` copied into an
older checkout counts that one). It takes about two minutes.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, Path(__file__).resolve().parent):  # memaudit, and host_bound.py beside this file
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

clock = time.thread_time


def bf16_step() -> Callable[[], None]:
    from memaudit.te.targets.reference_model import ReferenceGroupedMLP

    g = 8
    model = ReferenceGroupedMLP(groups=g, hidden=16, ffn=16, dtype=torch.float32, device="cpu")
    x = torch.randn(8 * g, 16, requires_grad=True)
    sizes, probs = torch.tensor([8] * g), torch.rand(8 * g, requires_grad=True)

    def step() -> None:
        model(x, sizes, probs).sum().backward()

    return step


def host_step() -> Callable[[], None]:
    """The host-bound CPU model of ``bench/perf/host_bound.py``: 50 Linear+GELU blocks, 150 saved
    tensors, 101 module calls a step."""
    from host_bound import cpu_step

    return cpu_step()[0]


def fp8_step() -> Callable[[], None] | None:
    try:
        import transformer_engine.pytorch  # noqa: F401
        import transformer_engine_torch as tex
        from transformer_engine.pytorch.quantized_tensor import prepare_for_saving, restore_from_func_ctx
        from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage
    except Exception:  # noqa: BLE001 - TE not importable: this step is left out
        return None
    g, hidden, ffn, m = 8, 32, 32, 8
    e4m3 = tex.DType.kFloat8E4M3
    sizes = torch.tensor([m] * g)
    h = torch.empty(g * m, 2 * ffn, dtype=torch.bfloat16)
    probs = torch.empty(g * m)
    bufs = [(torch.empty(k, m, dtype=torch.uint8), torch.empty(1)) for k in (hidden, ffn) for _ in range(2 * g)]

    def storage(i: int) -> Any:
        t, s = bufs[i]
        return Float8TensorStorage(
            data=None, fp8_scale_inv=s, fp8_dtype=e4m3, fake_dtype=torch.bfloat16, data_transpose=t
        )

    class Fuser(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, to_save: list[Any]) -> torch.Tensor:
            tensors, objects = prepare_for_saving(*to_save)
            ctx.save_for_backward(*tensors)
            ctx.tensor_objects = objects
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
            restore_from_func_ctx(ctx)
            return grad * 2, None

    x = torch.randn(4, requires_grad=True)

    def step() -> None:
        meta = [sizes, None, None, None, None]
        fc1 = [*meta, *(storage(i) for i in range(2 * g))]
        fc2 = [*meta, *(storage(2 * g + i) for i in range(2 * g))]
        Fuser.apply(x, [*fc1, h, probs, *fc2]).sum().backward()

    return step


def variants(step: Callable[[], None]) -> dict[str, Callable[[], None]]:
    from memaudit.capture import capture

    meta: list[Any] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        meta.append((tuple(t.shape), t.dtype, t.numel() * t.element_size()))
        return t

    def floor() -> None:
        meta.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step()

    def minimal() -> None:
        with capture(plugins=[], modules=False):
            step()

    def full() -> None:
        with capture():
            step()

    from host_bound import noop_module_hooks

    def floor_hooks() -> None:  # the floor and two global module hooks that do nothing
        with noop_module_hooks():
            floor()

    def floor_hooks_as_memaudit() -> None:  # the same, registered as memaudit registered its own (before)
        with noop_module_hooks(as_memaudit=True):
            floor()

    return {
        "bare": step,
        "floor": floor,
        "floor + no-op module hooks": floor_hooks,
        "floor + no-op module hooks (kwargs, always called)": floor_hooks_as_memaudit,
        "capture(plugins=[], modules=False)": minimal,
        "capture()": full,
    }


def measure(step: Callable[[], None], rounds: int) -> dict[str, Any]:
    from memaudit.capture import capture

    with capture() as cap:
        step()
        n = len(cap.records)
    vs = variants(step)
    times: dict[str, list[float]] = {k: [] for k in vs}
    names = list(vs)
    for r in range(rounds + 20):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            c0 = clock()
            vs[name]()
            if r >= 20:
                times[name].append(clock() - c0)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    floor = med["floor"]
    return {
        "saved_tensors": n,
        "median_us": {k: round(v, 2) for k, v in med.items()},
        "over_floor_us_per_step": {k: round(v - floor, 2) for k, v in med.items() if k not in ("bare", "floor")},
        "over_floor_us_per_saved": {k: round((v - floor) / n, 3) for k, v in med.items() if k not in ("bare", "floor")},
    }


SHIM = """
#include <valgrind/callgrind.h>
void start(void) { CALLGRIND_START_INSTRUMENTATION; }
void stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void zero(void) { CALLGRIND_ZERO_STATS; }
void dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""


def count_child(lib_path: str, steps: int) -> None:
    """Under callgrind: each variant's ``steps`` steps, counted between zero and dump requests."""
    lib = ctypes.CDLL(lib_path)
    makers = {"bf16": bf16_step, "fp8": fp8_step, "host": host_step}
    only = os.environ.get("HOT_PATH_STEPS")  # e.g. "host": count these steps only
    named = {k: make() for k, make in makers.items() if not only or k in only.split(",")}
    runs: list[tuple[str, Callable[[], None]]] = []
    for name, step in named.items():
        if step is None:
            continue
        vs = variants(step)
        vs["empty capture() + bare"] = _empty_then(step)
        runs += [(f"{name}/{k}", fn) for k, fn in vs.items()]
    for _, fn in runs:  # warm: first calls import, compile and cache
        for _ in range(5):
            fn()
    lib.start()
    for key, fn in runs:
        gc.collect()
        lib.zero()
        for _ in range(steps):
            fn()
        lib.dump(key.encode())
    lib.stop()


def _empty_then(step: Callable[[], None]) -> Callable[[], None]:
    from memaudit.capture import capture

    def run() -> None:
        with capture():
            pass
        step()

    return run


def count_instructions(steps: int) -> dict[str, Any]:
    """Run :func:`count_child` under callgrind and read each variant's instructions per step."""
    valgrind, cc = shutil.which("valgrind"), shutil.which("cc") or shutil.which("gcc")
    if valgrind is None or cc is None:
        raise SystemExit("--instructions needs valgrind and a C compiler on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = os.path.join(tmp, "shim.c"), os.path.join(tmp, "shim.so")
        with open(src, "w") as f:
            f.write(SHIM)
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", lib, src], check=True)
        out = os.path.join(tmp, "cg.out")
        cmd = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            os.path.abspath(__file__),
            "--count-child",
            lib,
            "--steps",
            str(steps),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        per_step: dict[str, float] = {}
        dumps = [n for n in os.listdir(tmp) if re.fullmatch(r"cg\.out\.\d+", n)]
        for name in sorted(dumps, key=lambda n: int(n.rsplit(".", 1)[1])):
            text = open(os.path.join(tmp, name)).read()
            trigger = re.search(r"^desc: Trigger: Client Request: (.+)$", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if trigger and total:
                per_step[trigger.group(1)] = int(total.group(1)) / steps
        if not per_step:
            raise SystemExit(f"callgrind produced no counts (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    res: dict[str, Any] = {}
    for key, n in per_step.items():
        step, variant = key.split("/", 1)
        res.setdefault(step, {})[variant] = round(n)
    for step, counts in res.items():
        floor = counts.get("floor")
        if floor is not None:
            res[step] = {
                "instructions_per_step": counts,
                "over_floor_per_step": {k: v - floor for k, v in counts.items() if k not in ("bare", "floor")},
            }
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead of timing")
    ap.add_argument("--steps", type=int, default=20, help="steps per variant under --instructions")
    ap.add_argument("--count-child", metavar="SHIM", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.count_child:
        count_child(args.count_child, args.steps)
        return 0
    if args.instructions:
        res = count_instructions(args.steps)
        out: dict[str, Any] = {
            "steps": args.steps,
            "measure": "instructions (callgrind)",
            "torch": torch.__version__,
            **res,
        }
        for step, r in res.items():
            print(f"{step}: instructions per step")
            for k, v in r["instructions_per_step"].items():
                extra = r["over_floor_per_step"].get(k)
                print(f"  {k:36s} {v:11,}" + (f"  over the floor {extra:+11,}" if extra is not None else ""))
    else:
        gc.collect()
        out = {"rounds": args.rounds, "clock": "thread_time", "torch": torch.__version__}
        steps = {"bf16": bf16_step(), "fp8": fp8_step(), "host": host_step()}
        for name, step in steps.items():
            if step is None:
                out[name] = None
                print(f"{name}: TE is not importable here: left out")
                continue
            res = out[name] = measure(step, args.rounds)
            print(f"{name}: {res['saved_tensors']} saved tensors per step")
            for k, v in res["median_us"].items():
                extra = res["over_floor_us_per_step"].get(k)
                tail = (
                    f"  over the floor {extra:+8.1f} us/step {res['over_floor_us_per_saved'][k]:+6.2f} us/saved"
                    if extra is not None
                    else ""
                )
                print(f"  {k:36s} {v:9.1f} us{tail}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
