"""Why a dropped, captured checkpoint forward kept memory on torch 2.11 (reports/h200, verify-allocator-torch).

The same forward (4 residual MLP blocks under non-reentrant checkpoint) is dropped without
backward under several hook set-ups. Ground truth that is not memaudit: the CUDA allocator
(``memory_allocated``) where there is a GPU, and the tensors ``gc`` can still reach everywhere.
For every set-up that keeps something, the kept tensors are listed with the chain of referrer
types that holds them, so the cause can be named.

    python bench/device/probe_checkpoint_leak.py [--out probe.json] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


class Blocks(nn.Module):
    def __init__(self, d: int, h: int, n: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=False)
        return x


def live_tensors() -> dict[int, torch.Tensor]:
    out = {}
    for o in gc.get_objects():
        with contextlib.suppress(Exception):
            if isinstance(o, torch.Tensor):
                out[id(o)] = o
    return out


def chain(obj: Any, depth: int, skip: set[int]) -> list[Any]:
    """Referrer types of ``obj``, ``depth`` levels up (frames of this probe skipped)."""
    if depth == 0:
        return []
    out = []
    for r in gc.get_referrers(obj):
        if id(r) in skip or isinstance(r, type(sys._getframe())):
            continue
        desc = type(r).__qualname__
        if isinstance(r, dict):
            keys = [k for k, v in r.items() if v is obj][:3]
            desc += f" keys={keys}"
        elif callable(r) and hasattr(r, "__qualname__"):
            desc += f" {getattr(r, '__module__', '?')}.{r.__qualname__}"
        out.append({"type": desc, "up": chain(r, depth - 1, skip | {id(r), id(out)})})
        if len(out) >= 4:
            break
    return out


def hooks_minimal() -> contextlib.AbstractContextManager[Any]:
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)


def setups() -> Iterator[tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]]]:
    from memaudit.capture import capture

    yield "bare", contextlib.nullcontext
    yield "minimal pass-through pair", hooks_minimal
    yield "minimal detach pair", lambda: torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t)
    yield "memaudit capture()", capture
    yield "memaudit capture(verify_allocator=True)", lambda: capture(verify_allocator=True)


def probe(device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Blocks(1024, 4096, 4).to(device).train()
    x = torch.randn(512, 1024, device=device, requires_grad=True)
    cuda = device.type == "cuda"
    alloc = (lambda: torch.cuda.memory_allocated()) if cuda else (lambda: None)
    # warm-up (lazy cuBLAS state, checkpoint's first use)
    model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    x.grad = None
    results = []
    for name, make in setups():
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
        before_ids = set(live_tensors())
        before = alloc()
        gc.disable()
        try:
            with make() as cap:
                out = model(x)
            if hasattr(cap, "report"):
                cap.report(outputs=out)
            during = alloc()
            del out, cap
            after_del = alloc()
        finally:
            gc.enable()
        gc.collect()
        after_gc = alloc()
        kept_refs = [weakref.ref(t) for i, t in live_tensors().items() if i not in before_ids]
        gc.collect()
        kept = [t for t in (r() for r in kept_refs) if t is not None]
        entry: dict[str, Any] = {
            "setup": name,
            "before": before,
            "during": during,
            "after_del": after_del,
            "after_gc": after_gc,
            "kept_after_del": None if before is None else after_del - before,
            "kept_after_gc": None if before is None else after_gc - before,
            "new_live_tensors": len(kept),
            "kept": [
                {
                    "shape": list(t.shape),
                    "dtype": str(t.dtype),
                    "device": str(t.device),
                    "referrers": chain(t, 5, {id(kept)}),
                }
                for t in kept[:6]
            ],
        }
        del kept
        results.append(entry)
        print(
            f"{name:<42} kept_after_del={entry['kept_after_del']} kept_after_gc={entry['kept_after_gc']} "
            f"new_live_tensors={entry['new_live_tensors']}"
        )
    return {"torch": torch.__version__, "device": str(device), "results": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    res = probe(torch.device(args.device))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
