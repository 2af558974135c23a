#!/usr/bin/env python
"""Try PyTorch's SACEstimator on a memaudit target (run by bench/perf/run.py in a subprocess).

SACEstimator must run under FakeTensorMode and aborts the whole process (C++ terminate) on an op
it cannot handle, so bench/perf/run.py runs this file on its own and reads one JSON line per target
from stdout: ``{"target": ..., "stage": "start"}`` before each attempt, then the result. A target
whose "start" line has no result line is the one that killed the process.

The numbers are not like-for-like with memaudit's overhead: SACEstimator runs the forward on fake
tensors (no kernels) and estimates runtimes with a roofline model, so its wall time is reported
beside the real bare forward+backward wall time of the same shape, not as an overhead ratio.
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


class _NoCap:
    def label(self, *args: Any, **kwargs: Any) -> None:
        return None


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


def _target(name: str) -> Any:
    if name == "te-grouped-mlp":
        from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget, set_fused_env

        set_fused_env(None)
        return TEGroupedMLPTarget()
    from memaudit.te.targets.reference import ReferenceTarget

    return ReferenceTarget()


def probe(name: str, args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {"target": name, "stage": "result"}
    target = _target(name)
    spec = target.spec("bf16", args.groups, tokens=args.tokens, hidden=args.hidden, ffn=args.ffn, device=args.device)
    reason = target.skip_reason(spec)
    if reason:
        res["skipped"] = reason
        return res
    cuda = args.device.startswith("cuda")
    built = target.build(spec)
    times = []
    for i in range(4):
        if cuda:
            torch.cuda.synchronize()
        c0 = time.perf_counter()
        out = built.forward(_NoCap())
        built.backward(out)
        if cuda:
            torch.cuda.synchronize()
        if i:
            times.append((time.perf_counter() - c0) * 1e3)
        del out
    res["bare_fwd_bwd_wall_ms"] = round(sorted(times)[len(times) // 2], 3)
    del built
    emit({"target": name, "stage": "sac", "bare_fwd_bwd_wall_ms": res["bare_fwd_bwd_wall_ms"]})

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.sac_estimator import SACEstimator

    c0 = time.perf_counter()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = target.build(spec)
        sac = SACEstimator()
        c1 = time.perf_counter()
        with sac("operator-level-cost-model"):
            fake.forward(_NoCap())
        c2 = time.perf_counter()
    res["sac_forward_wall_ms"] = round((c2 - c1) * 1e3, 3)
    res["sac_total_wall_ms_incl_fake_build"] = round((c2 - c0) * 1e3, 3)
    res["sac_modules"] = sorted(sac.sac_mod_stats)[:10]
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="reference")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--groups", type=int, default=4)
    args = ap.parse_args()
    for name in args.targets.split(","):
        emit({"target": name, "stage": "start"})
        try:
            emit(probe(name, args))
        except Exception as exc:  # noqa: BLE001 - every failure is a result line
            text = str(exc).strip().splitlines()
            emit({"target": name, "stage": "result", "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:400]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
