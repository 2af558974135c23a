#!/usr/bin/env python
"""Check ``capture(verify_allocator=True)`` against the CUDA caching allocator on plain PyTorch models.

For each model (TransformerEncoderLayer, cuDNN LSTM, Conv-BN-ReLU, Linear under bf16 autocast,
non-reentrant checkpoint MLP, ``torch.compile``'d MLP):

1. warm-up forward+backward outside any capture (cuBLAS/cuDNN handles and workspaces, lazy
   initialisation, the compile itself);
2. two bare forward+backward runs: their gradients are the reference, and comparing them with each
   other says whether the bare run is bitwise reproducible at all;
3. a forward under ``capture(verify_allocator=True)``, ``report(outputs=out)``, then backward: the
   allocator dict and totals are recorded and the gradients compared (``torch.equal``) with the
   bare ones;
4. ``dropped_graph``: a captured forward whose outputs are dropped without backward must return
   ``torch.cuda.memory_allocated()`` to its value before that forward (automatic gc disabled:
   read after ``del`` of the outputs, after ``del`` of the capture and report, and after
   ``gc.collect()``); the same for a bare forward as a control.

Ground truth is the allocator and plain autograd, never memaudit's own numbers. Besides
memaudit's ``hidden_bytes`` the script diffs ``torch.cuda.memory_snapshot()`` around the captured
forward: the blocks that appeared, their requested sizes, and ``slack_bytes``, the part of the
allocator's growth that is block rounding beyond 512 bytes (a large-pool block >1 MiB is not split
when the remainder would be <=1 MiB, so ``memory_allocated`` counts up to ~1 MiB more than the
tensor asked for). ``unexplained_bytes = hidden_bytes - slack_bytes``.

Usage (device machine, repo root)::

    python3 bench/verify/verify_allocator.py --out /tmp/verify_allocator.json          # cuda
    python3 bench/verify/verify_allocator.py --device cpu --out /tmp/va.json           # CPU smoke test

Exit code: 1 if any model errored or has ``hidden_bytes != 0`` (``--allow-slack``: if
``unexplained_bytes != 0``; ``--strict``: also a dropped graph that kept memory, or gradients that
differ from a reproducible bare run), else 0. The JSON is always written (atomically).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

BLOCK = 512
MAX_ROW_DETAILS = 200
MAX_BLOCK_DETAILS = 40


def round_block(nbytes: int) -> int:
    """The caching allocator's default rounding of a request (our own, not memaudit's)."""
    return 0 if nbytes <= 0 else -(-nbytes // BLOCK) * BLOCK


# ---- models -------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    build: Callable[[torch.device, int], tuple[nn.Module, list[torch.Tensor]]]
    """(device, shrink) -> model, inputs; ``shrink`` divides the batch-like dimensions (``--size small``)."""
    forward: Callable[[nn.Module, list[torch.Tensor]], Any]
    note: str = ""


def _plain_forward(model: nn.Module, inputs: list[torch.Tensor]) -> Any:
    return model(*inputs)


def _mlp(d: int, h: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))


def build_transformer(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    model = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, dropout=0.0, batch_first=True)
    model = model.to(device).train()
    x = torch.randn(8, 128 // shrink, 512, device=device, requires_grad=True)
    return model, [x]


def build_lstm(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    model = nn.LSTM(256, 512, num_layers=2).to(device).train()
    x = torch.randn(64 // shrink, 16, 256, device=device, requires_grad=True)  # (seq, batch, feature)
    return model, [x]


def build_conv_bn_relu(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    layers: list[nn.Module] = []
    channels = [3, 32, 64, 64]
    for cin, cout in zip(channels, channels[1:], strict=False):
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
    model = nn.Sequential(*layers).to(device).train()
    x = torch.randn(16 // shrink, 3, 64, 64, device=device)
    return model, [x]


def build_autocast_mlp(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    model = _mlp(1024, 4096).to(device).train()  # fp32 parameters; autocast casts them to bf16
    x = torch.randn(512 // shrink, 1024, device=device, requires_grad=True)
    return model, [x]


def autocast_forward(model: nn.Module, inputs: list[torch.Tensor]) -> Any:
    with torch.autocast(inputs[0].device.type, dtype=torch.bfloat16):
        return model(*inputs)


class CheckpointMLP(nn.Module):
    """Residual MLP blocks, each under non-reentrant ``torch.utils.checkpoint``."""

    def __init__(self, d: int, h: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_mlp(d, h) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for blk in self.blocks:
            x = x + checkpoint(blk, x, use_reentrant=False)
        return x


def build_checkpoint_mlp(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    model = CheckpointMLP(1024, 4096, 4).to(device).train()
    x = torch.randn(512 // shrink, 1024, device=device, requires_grad=True)
    return model, [x]


def build_compiled_mlp(device: torch.device, shrink: int = 1) -> tuple[nn.Module, list[torch.Tensor]]:
    model = _mlp(1024, 4096).to(device).train()
    x = torch.randn(512 // shrink, 1024, device=device, requires_grad=True)
    return torch.compile(model, fullgraph=True), [x]  # compiles in the warm-up


CASES = [
    Case(
        "transformer_encoder_layer",
        build_transformer,
        _plain_forward,
        "d_model=512 nhead=8 batch_first, dropout=0, fp32, (8,128,512)",
    ),
    Case("lstm_cudnn", build_lstm, _plain_forward, "LSTM(256,512,num_layers=2), fp32, (64,16,256)"),
    Case("conv_bn_relu", build_conv_bn_relu, _plain_forward, "3x Conv2d-BatchNorm2d-ReLU, fp32, (16,3,64,64)"),
    Case(
        "linear_autocast_bf16",
        build_autocast_mlp,
        autocast_forward,
        "Linear-GELU-Linear 1024/4096 under autocast bf16, (512,1024)",
    ),
    Case(
        "checkpoint_mlp",
        build_checkpoint_mlp,
        _plain_forward,
        "4 residual MLP blocks under checkpoint(use_reentrant=False), (512,1024)",
    ),
    Case(
        "compiled_mlp",
        build_compiled_mlp,
        _plain_forward,
        "torch.compile(fullgraph=True) Linear-GELU-Linear 1024/4096, (512,1024)",
    ),
]


# ---- helpers ------------------------------------------------------------------------------------
def tensors_of(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_of(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in tensors_of(v)]
    return []


_GRAD_CACHE: dict[tuple[Any, ...], torch.Tensor] = {}


def backward(out: Any) -> None:
    """Backward from the first output that has a graph, with a fixed pseudo-random gradient."""
    primary = next(t for t in tensors_of(out) if t.grad_fn is not None)
    key = (tuple(primary.shape), primary.dtype, str(primary.device))
    grad = _GRAD_CACHE.get(key)
    if grad is None:
        gen = torch.Generator().manual_seed(1234)
        grad = torch.randn(primary.shape, generator=gen).to(device=primary.device, dtype=primary.dtype)
        _GRAD_CACHE[key] = grad
    torch.autograd.backward(primary, grad)


def clear_grads(model: nn.Module, inputs: list[torch.Tensor]) -> None:
    for p in model.parameters():
        p.grad = None
    for x in inputs:
        x.grad = None


def grads_of(model: nn.Module, inputs: list[torch.Tensor]) -> dict[str, torch.Tensor | None]:
    out: dict[str, torch.Tensor | None] = {}
    for name, p in model.named_parameters():
        out[name] = None if p.grad is None else p.grad.detach().clone()
    for i, x in enumerate(inputs):
        if x.requires_grad:
            out[f"input[{i}]"] = None if x.grad is None else x.grad.detach().clone()
    return out


def mismatched(a: dict[str, torch.Tensor | None], b: dict[str, torch.Tensor | None]) -> list[str]:
    bad = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            if (x is None) != (y is None):
                bad.append(name)
        elif not torch.equal(x, y):
            bad.append(name)
    return bad


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def allocated(cuda: bool) -> int | None:
    return torch.cuda.memory_allocated() if cuda else None


def active_blocks() -> dict[tuple[int, int], int]:
    """(address, size) -> requested size of every allocated block of the current device."""
    try:
        segments = torch.cuda.memory_snapshot(include_traces=False)
    except TypeError:  # an older torch
        segments = torch.cuda.memory_snapshot()
    dev = torch.cuda.current_device()
    blocks: dict[tuple[int, int], int] = {}
    for seg in segments:
        if seg.get("device", dev) != dev:
            continue
        addr = seg.get("address", 0)
        for blk in seg.get("blocks", []):
            size = int(blk.get("size", 0))
            if blk.get("state") == "active_allocated":
                blocks[(int(blk.get("address", addr)), size)] = int(blk.get("requested_size", size))
            addr += size
    return blocks


def block_diff(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> dict[str, Any]:
    """What the allocator's block list says happened between two snapshots."""
    new = {k: v for k, v in after.items() if k not in before}
    gone = {k: v for k, v in before.items() if k not in after}
    slack = sum(size - round_block(req) for (_, size), req in new.items())
    biggest = sorted(new.items(), key=lambda kv: -kv[0][1])[:MAX_BLOCK_DETAILS]
    return {
        "new_blocks": len(new),
        "new_block_bytes": sum(size for _, size in new),
        "new_requested_bytes": sum(new.values()),
        "gone_blocks": len(gone),
        "gone_block_bytes": sum(size for _, size in gone),
        "slack_bytes": slack,
        "largest_new": [{"size": size, "requested": req} for (_, size), req in biggest],
    }


def row_details(rows: list[Any]) -> list[dict[str, Any]]:
    keys = (
        "op",
        "saved_as",
        "bytes",
        "storage",
        "storage_bytes",
        "resides",
        "via",
        "aliases_output",
        "is_parameter",
        "shape",
        "dtype",
        "device",
    )
    return [{k: getattr(r, k, None) for k in keys} for r in rows[:MAX_ROW_DETAILS]]


class _Warnings:
    """Collect torch warnings (nondeterminism notes in particular) while a run goes."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __enter__(self) -> _Warnings:
        self._cm = warnings.catch_warnings(record=True)
        self._caught = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)
        for w in self._caught:
            msg = str(w.message).strip().splitlines()[0][:300] if str(w.message).strip() else type(w.message).__name__
            if msg not in self.messages:
                self.messages.append(msg)


# ---- one model ------------------------------------------------------------------------------------
def bare_step(case: Case, model: nn.Module, inputs: list[torch.Tensor]) -> None:
    clear_grads(model, inputs)
    out = case.forward(model, inputs)
    backward(out)


def dropped_graph(case: Case, model: nn.Module, inputs: list[torch.Tensor], cuda: bool) -> dict[str, Any]:
    """A forward whose outputs are dropped without backward gives all its memory back."""
    from memaudit.capture import capture

    if not cuda:
        return {"available": False, "reason": "needs CUDA (torch.cuda.memory_allocated)"}
    clear_grads(model, inputs)
    gc.collect()
    sync(cuda)
    res: dict[str, Any] = {"available": True}
    enabled = gc.isenabled()
    gc.disable()
    try:
        # Control: the same forward with no capture at all.
        bare_before = allocated(cuda)
        out = case.forward(model, inputs)
        bare_during = allocated(cuda)
        del out
        bare_after = allocated(cuda)
        res["bare"] = {
            "before": bare_before,
            "during": bare_during,
            "after_del": bare_after,
            "ok": bare_after == bare_before,
        }

        before = allocated(cuda)
        with capture(verify_allocator=True) as cap:
            out = case.forward(model, inputs)
        during = allocated(cuda)
        report = cap.report(outputs=out)
        res["rows"] = len(report.rows)
        del out
        after_del_outputs = allocated(cuda)  # the capture and its report are still alive here
        del report, cap
        after_del_capture = allocated(cuda)
        gc.collect()
        after_gc = allocated(cuda)
    finally:
        if enabled:
            gc.enable()
    res.update(
        {
            "before": before,
            "during": during,
            "after_del_outputs": after_del_outputs,
            "after_del_capture": after_del_capture,
            "after_gc": after_gc,
            "ok_without_gc": after_del_outputs == before and after_del_capture == before,
            "ok_after_gc": after_gc == before,
        }
    )
    res["ok"] = res["ok_without_gc"] and res["ok_after_gc"]
    return res


def run_case(case: Case, device: torch.device, shrink: int = 1) -> dict[str, Any]:
    from memaudit.capture import capture

    cuda = device.type == "cuda"
    entry: dict[str, Any] = {"name": case.name, "note": case.note}
    t0 = time.perf_counter()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    torch.manual_seed(0)
    model, inputs = case.build(device, shrink)
    entry["input_shapes"] = [list(x.shape) for x in inputs]

    with _Warnings() as warm:
        bare_step(case, model, inputs)  # warm-up: workspaces, lazy init, compile
        sync(cuda)
    entry["warmup_s"] = round(time.perf_counter() - t0, 3)

    with _Warnings() as bare_w:
        bare_step(case, model, inputs)
        reference = grads_of(model, inputs)
        bare_step(case, model, inputs)
        again = grads_of(model, inputs)
    bare_diff = mismatched(reference, again)

    # The captured forward.
    clear_grads(model, inputs)
    gc.collect()
    sync(cuda)
    blocks_before = active_blocks() if cuda else None
    graphs_before = _compiled_graphs()
    with _Warnings() as cap_w:
        with capture(verify_allocator=True) as cap:
            out = case.forward(model, inputs)
        blocks_after = active_blocks() if cuda else None
        report = cap.report(outputs=out)
        backward(out)
    captured = grads_of(model, inputs)
    del out
    cap_diff = mismatched(reference, captured)

    totals = report.totals
    alloc = dict(report.allocator or {})
    entry.update(
        {
            "rows": len(report.rows),
            "freed_rows": len(report.freed),
            "saved_bytes": totals.saved_bytes,
            "output_bytes": totals.output_bytes,
            "ctx_bytes": totals.ctx_bytes,
            "host_bytes": totals.host_bytes,
            "unknown_bytes": totals.unknown_bytes,
            "parameter_bytes": totals.parameter_bytes,
            "complete": report.complete,
            "warnings": len(report.warnings),
            "warning_messages": report.warnings[:10],
            "allocator": alloc,
            "resides": _count(r.resides for r in report.rows),
            "via": _count(r.via for r in report.rows),
            "graphs_compiled_during_capture": _compiled_graphs() - graphs_before,  # a recompile would allocate
        }
    )
    if blocks_before is not None and blocks_after is not None:
        blocks = block_diff(blocks_before, blocks_after)
        if alloc.get("available"):
            # Our own reading of the same span: the block list must add up to memaudit's delta.
            blocks["delta_matches"] = blocks["new_block_bytes"] - blocks["gone_block_bytes"] == alloc["allocated_delta"]
            blocks["unexplained_bytes"] = alloc["hidden_bytes"] - blocks["slack_bytes"]
        entry["blocks"] = blocks
    entry["row_details"] = row_details(report.rows)
    del report, cap

    nondet = [m for m in warm.messages + bare_w.messages + cap_w.messages if "determinis" in m]
    grads: dict[str, Any] = {
        "compared": len(reference),
        "bitwise": not cap_diff,
        "bare_reproducible": not bare_diff,
        "mismatched": cap_diff,
        "bare_mismatched": bare_diff,
        "nondeterministic_warnings": _unique(nondet),
        "reason": None,
    }
    if cap_diff and bare_diff:
        grads["reason"] = "the bare run is not bitwise reproducible itself" + (f" ({nondet[0]})" if nondet else "")
    elif cap_diff:
        grads["reason"] = (
            "captured gradients differ from a bare run that is bitwise reproducible: capture changed the computation"
        )
    elif bare_diff:
        grads["reason"] = "captured run matched the first bare run although two bare runs differed"
    entry["grads"] = grads
    entry["torch_warnings"] = _unique([m for m in warm.messages + bare_w.messages + cap_w.messages if m not in nondet])[
        :10
    ]

    entry["dropped_graph"] = dropped_graph(case, model, inputs, cuda)
    entry["wall_s"] = round(time.perf_counter() - t0, 3)
    del model, inputs
    return entry


def _compiled_graphs() -> int:
    """Graphs torch.compile has produced so far in this process (0 before dynamo is imported)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return 0
    try:
        return int(dynamo_utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return 0


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in items:
        out[str(k)] = out.get(str(k), 0) + 1
    return out


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---- output ---------------------------------------------------------------------------------------
def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def failures(entry: dict[str, Any], *, allow_slack: bool, strict: bool) -> list[str]:
    if "error" in entry:
        return ["error"]
    out = []
    alloc = entry.get("allocator") or {}
    blocks = entry.get("blocks") or {}
    if alloc.get("available"):
        if allow_slack and "unexplained_bytes" in blocks:
            if blocks["unexplained_bytes"] != 0:
                out.append(f"unexplained_bytes={blocks['unexplained_bytes']}")
        elif alloc.get("hidden_bytes") != 0:
            out.append(f"hidden_bytes={alloc.get('hidden_bytes')}")
    if strict:
        dropped = entry.get("dropped_graph") or {}
        if dropped.get("available") and not dropped.get("ok"):
            out.append("dropped graph kept memory")
        grads = entry.get("grads") or {}
        if not grads.get("bitwise") and grads.get("bare_reproducible"):
            out.append("grads differ")
    return out


def print_table(entries: list[dict[str, Any]], fails: dict[str, list[str]]) -> None:
    head = (
        f"{'model':<26} {'rows':>5} {'saved':>11} {'delta':>11} {'accounted':>11} {'hidden':>9} {'slack':>9} "
        f"{'grads':>9} {'dropped':>8}  status"
    )
    print(head)
    print("-" * len(head))
    for e in entries:
        if "error" in e:
            print(f"{e['name']:<26} ERROR {e['error'][:120]}")
            continue
        a = {**(e.get("allocator") or {}), **{k: v for k, v in (e.get("blocks") or {}).items() if k == "slack_bytes"}}
        g = e.get("grads") or {}
        d = e.get("dropped_graph") or {}
        grads = "bitwise" if g.get("bitwise") else ("nondet" if not g.get("bare_reproducible") else "DIFFER")
        dropped = "-" if not d.get("available") else ("ok" if d.get("ok") else "KEPT")

        def num(k: str, a: dict[str, Any] = a) -> str:
            return str(a[k]) if a.get("available") and k in a else "-"

        status = "FAIL " + ", ".join(fails[e["name"]]) if fails.get(e["name"]) else "ok"
        print(
            f"{e['name']:<26} {e['rows']:>5} {e['saved_bytes']:>11} {num('allocated_delta'):>11} "
            f"{num('accounted_bytes'):>11} "
            f"{num('hidden_bytes'):>9} {num('slack_bytes'):>9} {grads:>9} {dropped:>8}  {status}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path("verify_allocator.json"), help="JSON result path")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument(
        "--size",
        choices=["full", "small"],
        default=None,
        help="small: batch-like dimensions / 8 (default: full on cuda, small on cpu, where bf16 matmuls are slow)",
    )
    ap.add_argument("--models", default="all", help=f"comma list of: {','.join(c.name for c in CASES)}")
    ap.add_argument("--no-deterministic", action="store_true", help="leave cuDNN/torch determinism settings alone")
    ap.add_argument("--allow-slack", action="store_true", help="pass when hidden bytes are all allocator block slack")
    ap.add_argument(
        "--strict", action="store_true", help="also fail on a dropped graph that kept memory or grads that differ"
    )
    args = ap.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here (use --device cpu for the smoke test)")
    names = (
        [c.name for c in CASES] if args.models == "all" else [n.strip() for n in args.models.split(",") if n.strip()]
    )
    unknown = [n for n in names if n not in {c.name for c in CASES}]
    if unknown:
        ap.error(f"unknown model(s): {', '.join(unknown)}")

    size = args.size or ("full" if args.device == "cuda" else "small")
    shrink = 1 if size == "full" else 8
    deterministic = not args.no_deterministic
    if deterministic:
        # Before the first cuBLAS handle: use_deterministic_algorithms needs it for cuBLAS matmuls.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)  # a kernel without one warns (recorded)

    from memaudit.environment import environment

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    try:
        env: dict[str, Any] = environment(args.device)
    except Exception as exc:  # noqa: BLE001 - the models still run; the JSON says why this is missing
        env = {"error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, Any] = {
        "environment": env,
        "settings": {
            "device": str(device),
            "size": size,
            "deterministic": deterministic,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "allow_slack": args.allow_slack,
            "strict": args.strict,
        },
        "models": [],
    }
    entries: list[dict[str, Any]] = result["models"]
    for case in CASES:
        if case.name not in names:
            continue
        print(f"== {case.name}", flush=True)
        try:
            entry = run_case(case, device, shrink)
        except Exception as exc:  # noqa: BLE001 - one model's failure is recorded, the others run
            text = str(exc).strip().splitlines()
            entry = {
                "name": case.name,
                "note": case.note,
                "error": f"{type(exc).__name__}: {text[0] if text else ''}"[:1000],
                "traceback": traceback.format_exc().splitlines()[-25:],
            }
        entries.append(entry)
        write_json(args.out, result)  # a partial result survives a crash in a later model

    fails = {e["name"]: failures(e, allow_slack=args.allow_slack, strict=args.strict) for e in entries}
    result["failed"] = {k: v for k, v in fails.items() if v}
    write_json(args.out, result)
    print()
    print_table(entries, fails)
    print(f"\nwrote {args.out}")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
