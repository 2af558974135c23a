#!/usr/bin/env python
"""What TE provenance and the pack hook cost per call, on CPU with real TE storage objects.

    python bench/perf/provenance_cost.py [--n 20000]

Times (best of 5 batches, µs per call):

* TE's own ``Float8TensorStorage.prepare_for_saving`` and ``GroupedTensorStorage`` ones, the
  memaudit wrapper outside a capture (installed once per process: one thread-local check) and
  inside one (names each buffer before it reaches the hook);
* the pack hook over plain tensors: memaudit's layer inside ``capture()`` against the floor
  (a metadata-only pack that appends shape, dtype and bytes).

TE's ``prepare_for_saving`` is pure Python and runs no kernel, so these numbers are the CPU cost
the H200 run pays per call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def best_us(fn: Any, n: int) -> float:
    best = float("inf")
    for _ in range(5):
        c0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - c0) / n)
    return round(best * 1e6, 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import transformer_engine.pytorch  # noqa: F401
    import transformer_engine_torch as tex
    from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage

    from memaudit.capture import capture, hooks
    from memaudit.te.capture import classify as tec

    tec.install_provenance()
    original = tec.original_prepare_for_saving(Float8TensorStorage)
    wrapped = vars(Float8TensorStorage)["prepare_for_saving"]
    # One set of buffers per object, as in a step (each buffer noted once; reused buffers would
    # queue up under one id and measure the queue, not the call).
    bufs = [
        (torch.empty(64, 96, dtype=torch.uint8), torch.empty(96, 64, dtype=torch.uint8), torch.empty(1))
        for _ in range(64)
    ]
    objs = [
        Float8TensorStorage(
            data=d, fp8_scale_inv=s, fp8_dtype=tex.DType.kFloat8E4M3, fake_dtype=torch.bfloat16, data_transpose=t
        )
        for d, t, s in bufs
    ]
    data = bufs[0][0]

    def refill() -> None:
        for o, (d, t, s) in zip(objs, bufs, strict=True):
            o._data, o._transpose, o._scale_inv = d, t, s

    st = hooks.state()

    def run(method: Any) -> Any:
        def go(n: int) -> None:
            for i in range(n):
                o = objs[i & 63]
                o._data, o._transpose, o._scale_inv = bufs[i & 63]
                method(o)
                if i & 63 == 63:  # a step's packs take what was noted: keep the queues step-sized
                    st.provenance.clear()
                    st.decomposed.clear()

        return go

    out: dict[str, Any] = {"n": args.n}
    out["prepare_for_saving_te_us"] = best_us(run(original), args.n)
    out["prepare_for_saving_wrapped_outside_capture_us"] = best_us(run(wrapped), args.n)
    with capture():
        out["prepare_for_saving_wrapped_inside_capture_us"] = best_us(run(wrapped), args.n)
    refill()
    out["refill_us"] = best_us(lambda n: [setattr(objs[i & 63], "_data", data) for i in range(n)], args.n)
    out["queue_clear_us"] = best_us(run(lambda o: None), args.n)

    xs = [torch.empty(8, 8) for _ in range(256)]
    meta: list[Any] = []

    def floor_pack(tt: torch.Tensor) -> torch.Tensor:
        meta.append((tuple(tt.shape), tt.dtype, tt.numel() * tt.element_size()))
        return tt

    def packs(pack: Any) -> Any:
        def go(n: int) -> None:
            for i in range(n):
                pack(xs[i & 255])

        return go

    out["floor_pack_us"] = best_us(packs(floor_pack), args.n)
    with capture() as cap:
        pack = cap.hook_pair[0]
        out["memaudit_pack_us"] = best_us(packs(pack), args.n)
        cap.records.clear()
    out["pack_over_floor_us"] = round(out["memaudit_pack_us"] - out["floor_pack_us"], 3)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
