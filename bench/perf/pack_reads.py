"""What one pack costs, read by read: each tensor accessor memaudit's pack makes, the floor's pack
and memaudit's (``capture(modules=False)``'s pack function called directly), in nanoseconds a call,
on a plain tensor and a parameter of the device given (median of rounds of 2,000 calls each).

In a loop of packs everything the pack touches stays in the CPU's caches; in a real step, kernels
and the framework run between two packs, so a pack there costs more than here (host_bound.py
measures it in steps).

    python bench/perf/pack_reads.py [--device cuda] [--rounds 21]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()

    import torch

    from memaudit.capture import capture

    dev = torch.device(args.device)
    lin = torch.nn.Linear(512, 512, device=dev, dtype=torch.bfloat16)
    x = torch.randn(8, 512, device=dev, dtype=torch.bfloat16, requires_grad=True)
    y = lin(x)
    z = torch.relu(y)  # y: a non-leaf whose node is not the newest (not an output being built)
    st = y.untyped_storage()
    fn = y.grad_fn
    seq = torch._C._autograd._get_sequence_nr
    meta: list[object] = []

    def floor_pack(t: torch.Tensor) -> torch.Tensor:
        meta.append((t.shape, t.dtype, t.untyped_storage().nbytes()))
        return t

    cap = capture(modules=False)
    cap.__enter__()
    pack, _ = cap.hook_pair
    cap.__exit__(None, None, None)
    cap.active = True  # its pack records as inside the capture, called directly here

    n = 2000
    reads: dict[str, Callable[[], object]] = {
        "t.shape": lambda: y.shape,
        "t.dtype": lambda: y.dtype,
        "t.device": lambda: y.device,
        "t.untyped_storage()": lambda: y.untyped_storage(),
        "storage.nbytes()": lambda: st.nbytes(),
        "t.storage_offset()": lambda: y.storage_offset(),
        "t._base": lambda: y._base,
        "t._version": lambda: y._version,
        "t.grad_fn": lambda: y.grad_fn,
        "t.output_nr": lambda: y.output_nr,
        "node._sequence_nr()": lambda: fn._sequence_nr(),
        "next sequence number": lambda: seq(),
        "weakref to the storage": lambda: weakref.ref(st),
        "(nothing: the loop and call)": lambda: None,
        "floor pack, non-leaf": lambda: floor_pack(y),
        "memaudit pack, non-leaf": lambda: pack(y),
        "floor pack, parameter": lambda: floor_pack(lin.weight),
        "memaudit pack, parameter": lambda: pack(lin.weight),
    }
    times: dict[str, list[float]] = {k: [] for k in reads}
    clock = time.perf_counter_ns
    for _ in range(args.rounds):
        for name, f in reads.items():
            t0 = clock()
            for _ in range(n):
                f()
            times[name].append((clock() - t0) / n)
            meta.clear()
            cap.records.clear()
    del z
    print(f"python {platform.python_version()} torch {torch.__version__} device {args.device}", end="")
    where = torch.cuda.get_device_name(0) if dev.type == "cuda" else platform.machine()
    print(f" ({where})")
    for name, v in times.items():
        print(f"{name:32s} {statistics.median(v):8.0f} ns")


if __name__ == "__main__":
    main()
