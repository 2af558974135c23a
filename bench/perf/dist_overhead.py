#!/usr/bin/env python
"""Per rank, what ``capture()`` adds to the expert-parallel forward, and what the gather and merge take.

Run under torchrun; every rank builds its case of ``ep-grouped-mlp`` (its routing, the all-to-all
dispatch, its local experts) and times, alternating, ``--rounds`` forwards without any hook
(bare) and with ``capture()`` (the graph dropped after each; CUDA synchronised before the clock
stops; the ranks aligned by a barrier before each forward). Then the whole per-rank run of the
case (:func:`memaudit.distributed.rank.run_rank`: capture, report, backward, its own file, the status
exchange, the gather, the merge on rank 0) is timed, and on rank 0 the merge alone. Rank 0
writes ``--out`` (JSON: per rank the medians, min and max, and capture / bare).

    torchrun --standalone --nproc-per-node 2 bench/perf/dist_overhead.py --experts te --device cuda \
        --recipe bf16 --groups 4 --tokens 8192 --hidden 3072 --ffn 1536 --out reports/h200x2/overhead-bf16.json

On CPU (reference experts, gloo) it checks that the harness works; the numbers say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class _Bare:
    """What the target's forward calls on a capture, doing nothing (the bare forward)."""

    @staticmethod
    def label(*args: Any, **kwargs: Any) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", default="reference")
    ap.add_argument("--recipe", default="bf16")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--routing", default="uniform")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--kernels", default="real")
    ap.add_argument("--arch", default="sm100")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    from memaudit.capture import capture
    from memaudit.distributed.merge import merge_reports
    from memaudit.distributed.rank import run_rank
    from memaudit.distributed.world import default_backend, join, leave, torchrun_env
    from memaudit.environment import environment
    from memaudit.report import validate_report
    from memaudit.spec import CaseSpec
    from memaudit.targets.base import place
    from memaudit.te.targets.ep import EPGroupedMLPTarget

    env = torchrun_env()
    if env is None:
        raise SystemExit("run me under torchrun (see --help)")
    world = join(env, args.backend or default_backend(args.device), args.device)
    try:
        target = EPGroupedMLPTarget().configure(
            {"experts": args.experts, "routing": args.routing, "kernels": args.kernels, "arch": args.arch}
        )
        options = dict(target.options)
        spec = CaseSpec.make(
            target,
            args.recipe,
            args.groups,
            dtype="bf16",
            device=args.device,
            options=options,
            tokens=args.tokens,
            hidden=args.hidden,
            ffn=args.ffn,
        )
        placed, info = place(target, spec, world.rank, world.world_size)
        reason = target.skip_reason(placed)
        if reason:
            raise SystemExit(f"rank {world.rank}: the case cannot run here: {reason}")
        built = target.build(placed)
        cuda = args.device.startswith("cuda")

        def timed(with_capture: bool) -> float:
            dist.barrier(group=world.cpu_group)
            start = time.perf_counter()
            if with_capture:
                with capture() as cap:
                    out = built.forward(cap)
            else:
                out = built.forward(_Bare())
            if cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            del out
            return seconds

        for _ in range(args.warmup):
            timed(False)
            timed(True)
        bare, audited = [], []
        for i in range(args.rounds):  # alternating, each first in every other round
            if i % 2:
                audited.append(timed(True))
                bare.append(timed(False))
            else:
                bare.append(timed(False))
                audited.append(timed(True))
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            result = run_rank(target, [spec], world, tmp)
            whole = time.perf_counter() - start
            merge_s = None
            if result.merged is not None:  # rank 0: the merge alone, on the reports as gathered
                payload = [json.loads(json.dumps(result.own.to_dict()))]
                start = time.perf_counter()
                reports = [
                    (f"rank {r}", validate_report(d, source=f"rank {r}"))
                    for r, d in enumerate(world.gather(payload[0]) or [])
                ]
                merge_reports(reports)
                merge_s = time.perf_counter() - start
            else:
                world.gather(result.own.to_dict())
        mine = {
            "rank": world.rank,
            "coords": info.key,
            "splits": list(placed.splits or ()),
            "bare_s": {"median": statistics.median(bare), "min": min(bare), "max": max(bare)},
            "capture_s": {"median": statistics.median(audited), "min": min(audited), "max": max(audited)},
            "capture_over_bare": statistics.median(audited) / statistics.median(bare),
            "rank_run_s": whole,
            "rows": len(result.own.cases[0].rows),
            "saved_bytes": result.own.cases[0].totals.saved_bytes,
        }
        everyone = world.gather(mine)
        if everyone is not None:
            out = {
                "args": vars(args) | {"out": str(args.out)},
                "merge_s": merge_s,
                "world_size": world.world_size,
                "backend": world.backend,
                "environment": environment(args.device),
                "ranks": everyone,
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
            for r in everyone:
                print(
                    f"rank {r['rank']} ({r['coords']}): capture / bare forward {r['capture_over_bare']:.3f}x "
                    f"(medians of {args.rounds}: {r['capture_s']['median'] * 1e3:.2f} / "
                    f"{r['bare_s']['median'] * 1e3:.2f} ms)"
                )
            print(
                f"merge of {world.world_size} ranks on rank 0 (validate + merge): {merge_s * 1e3:.1f} ms; wrote "
                f"{args.out}"
            )
    finally:
        leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
