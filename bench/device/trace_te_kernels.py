"""Which TE kernel entry points the grouped MLP's forward reaches, and what the real ones return.

A probe for the emulated-kernels work (CUDA and TE needed). For each cell it runs TE's real
forward inside :func:`memaudit.te.emulate.context.emulation` with every ``tex`` entry point
calling the real kernel through a recorder, except the GEMMs, which are no-ops here (their
outputs are preallocated by TE's Python; on the H200 cuBLAS refuses some of them). It writes,
per cell, every call in order: the entry point, a summary of its arguments (shapes, dtypes,
quantizer types and usages) and of its result (each buffer's attribute, shape, dtype, and which
results share one storage), or the error that stopped the forward.

Usage: python bench/device/trace_te_kernels.py --out trace.json
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench's helpers import as bench._x
from bench._grouped_mlp import forward, start  # noqa: E402

GEMM_NOOPS = {
    # TE's Python preallocates the outputs (grouped_linear.py:1253-1257, 1415-1425); the return
    # value is what the callers read: general_grouped_gemm returns ``bias`` (gemm.py:504).
    "te_general_grouped_gemm": lambda *a, **k: a[7],
    "te_general_grouped_gemm_for_discrete_in": lambda *a, **k: None,
    "te_general_grouped_gemm_for_grouped_tensor": lambda *a, **k: None,
    "generic_gemm": lambda *a, **k: (a[4], None, None, None),
}


def summarize(x: Any, storages: dict[int, int], depth: int = 0) -> Any:
    from memaudit.te.capture.classify import inner_buffers

    if isinstance(x, torch.Tensor) and type(x) is torch.Tensor or isinstance(x, torch.nn.Parameter):
        if x.device.type == "meta":
            return {"tensor": list(x.shape), "dtype": str(x.dtype)}
        ptr = x.untyped_storage().data_ptr()
        sid = storages.setdefault(ptr, len(storages)) if ptr else None
        return {
            "tensor": list(x.shape),
            "dtype": str(x.dtype).removeprefix("torch."),
            "device": x.device.type,
            "storage": sid,
            "storage_bytes": x.untyped_storage().nbytes(),
            "offset": x.storage_offset(),
        }
    if isinstance(x, list | tuple) and depth < 3:
        return [summarize(v, storages, depth + 1) for v in x]
    if x is None or isinstance(x, bool | int | float | str):
        return x
    name = type(x).__name__
    out: dict[str, Any] = {"type": name}
    if "Quantizer" in name:
        out.update(
            {
                k: getattr(x, k, None)
                for k in (
                    "rowwise_usage",
                    "columnwise_usage",
                    "internal",
                    "optimize_for_gemm",
                    "with_rht",
                    "with_post_rht_amax",
                    "with_2d_quantization",
                    "stochastic_rounding",
                )
                if isinstance(getattr(x, k, None), bool)
            }
        )
        return out
    try:
        bufs = inner_buffers(x)
    except Exception:  # noqa: BLE001 - not a TE storage
        bufs = []
    if bufs:
        out["buffers"] = {attr: summarize(b, storages, depth + 1) for attr, b in bufs}
        for k in ("num_tensors", "logical_shape", "_with_gemm_swizzled_scales", "_fp8_dtype"):
            v = getattr(x, k, None)
            if v is not None:
                out[k] = v if isinstance(v, bool | int) else str(v)
        return out
    if isinstance(x, torch.Tensor):
        out["shape"] = list(x.shape)
        return out
    return {"type": name, "repr": repr(x)[:80]}


def run_cell(
    recipe_name: str, arch: str, cublaslt: int, fused: bool, groups: int, tokens: int, hidden: int, ffn: int
) -> dict[str, Any]:

    from memaudit.spec import CaseSpec
    from memaudit.targets.registry import get_target
    from memaudit.te.emulate.context import Machine, emulation
    from memaudit.te.emulate.kernels import tex_functions

    calls: list[dict[str, Any]] = []
    storages: dict[int, int] = {}
    originals = tex_functions()

    def recorder(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {
                "name": name,
                "args": summarize(list(args), storages),
                "kwargs": summarize(dict(kwargs), storages) if kwargs else {},
            }
            calls.append(entry)
            result = fn(*args, **kwargs)
            entry["result"] = summarize(result, storages)
            return result

        return call

    standins = {n: recorder(n, GEMM_NOOPS.get(n, f)) for n, f in originals.items()}
    cudnn_calls: list[dict[str, Any]] = []

    def cudnn_standin(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            cudnn_calls.append({"name": name, "kwargs": {k: summarize(v, storages) for k, v in kwargs.items()}})
            raise NotImplementedError(f"cudnn.{name}: trace stops here")

        return call

    cudnn = {
        n: cudnn_standin(n)
        for n in (
            "grouped_gemm_glu_wrapper_sm100",
            "grouped_gemm_dglu_wrapper_sm100",
            "grouped_gemm_quant_wrapper_sm100",
            "grouped_gemm_wgrad_wrapper_sm100",
            "grouped_gemm_srelu_wrapper_sm100",
            "grouped_gemm_dsrelu_wrapper_sm100",
        )
    }
    spec = CaseSpec.make(
        get_target("te-grouped-mlp"), recipe_name, groups, tokens=tokens, hidden=hidden, ffn=ffn, device="cuda"
    )
    out: dict[str, Any] = {
        "recipe": recipe_name,
        "arch": arch,
        "cublaslt": cublaslt,
        "fused": fused,
        "groups": groups,
        "splits": spec.split_sizes(),
    }
    os.environ["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1" if fused else "0"
    try:
        with emulation(Machine(arch, cublaslt), standins, cudnn) as log:
            model = forward(recipe_name, groups, tokens, hidden, ffn)
            out["status"] = "completed"
            out["fusions"] = log.fusions
            out["forward_ops"] = [
                type(op).__name__
                for g in getattr(model, "_module_groups", ())
                for op, _ in getattr(g, "_forward_ops", ())
            ]
    except Exception as exc:  # noqa: BLE001 - a probe reports every failure
        tb = traceback.extract_tb(exc.__traceback__)
        out["status"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        out["where"] = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in tb[-8:]]
    finally:
        os.environ["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "0"
    out["calls"] = calls
    out["cudnn_calls"] = cudnn_calls
    return out


def main() -> None:
    args = start(__doc__)

    cells = []
    for arch, lt in (("sm90", 130100), ("sm90", 130600), ("sm100", 130600)):
        for recipe in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"):
            for fused in (False, True) if arch == "sm100" and recipe in ("mxfp8", "nvfp4") else (False,):
                for groups in (1, 4):
                    cell = run_cell(recipe, arch, lt, fused, groups, 1024, 256, 256)
                    print(arch, lt, recipe, "fused" if fused else "unfused", groups, cell["status"][:160], flush=True)
                    cells.append(cell)
    with open(args.out, "w") as f:
        json.dump(cells, f, indent=1, default=str)


if __name__ == "__main__":
    main()
