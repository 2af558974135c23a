"""Every kernel stand-in against the real kernel, call by call, where the real kernel runs here.

CUDA and TE needed. Inside the emulation each ``tex`` entry point that has a stand-in runs the
real kernel first and then the stand-in on the same arguments; the two results are compared
buffer by buffer (class, attribute, shape, dtype, which buffers share a storage, the flags
TE's Python reads). The forward continues with the real result; where the real kernel fails,
the stand-in's result is used and the call is counted as "real failed". GEMMs and in-place
swizzles are not compared (the GEMMs write preallocated outputs; swizzles mutate their input).

Usage: python bench/verify/standin_diff.py --out diff.json
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: bench's helpers import as bench._x
from bench._grouped_mlp import forward, start  # noqa: E402

SKIP = {
    "te_general_grouped_gemm",
    "te_general_grouped_gemm_for_discrete_in",
    "te_general_grouped_gemm_for_grouped_tensor",
    "generic_gemm",
    "swizzle_scales_for_gemm_",
    "grouped_swizzle_for_gemm",
    "fused_amax_and_scale_update_after_reduction",
}
FLAGS = ("_with_gemm_swizzled_scales", "_dtype", "_is_2D_scaled", "num_tensors", "row_scaled_nvfp4")


def shape_of(x: Any, storages: dict[int, str], path: str = "$") -> Any:
    from memaudit.te.capture.classify import inner_buffers

    if isinstance(x, torch.Tensor) and type(x) in (torch.Tensor, torch.nn.Parameter):
        ptr = x.untyped_storage().data_ptr()
        first = storages.setdefault(ptr, path) if ptr else None
        return {
            "shape": list(x.shape),
            "dtype": str(x.dtype),
            "stride": list(x.stride()),
            "shares": first if first != path else None,
        }
    if isinstance(x, list | tuple):
        return [shape_of(v, storages, f"{path}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, dict):
        return {k: shape_of(v, storages, f"{path}.{k}") for k, v in x.items()}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    out: dict[str, Any] = {"class": type(x).__name__}
    try:
        bufs = dict(inner_buffers(x))
    except Exception:  # noqa: BLE001 - not a TE storage
        bufs = {}
    for attr, b in bufs.items():
        out[attr] = shape_of(b, storages, f"{path}.{attr}")
    for f in FLAGS:
        if hasattr(x, f):
            out[f] = str(getattr(x, f))
    return out


def diff(a: Any, b: Any, path: str = "$") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: real {a.get(k, '<absent>')!r} vs stand-in {b.get(k, '<absent>')!r}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: real {a!r} vs stand-in {b!r}"]


def run_cell(
    recipe_name: str, arch: str, fused: bool, groups: int, tokens: int, hidden: int, ffn: int
) -> dict[str, Any]:

    from memaudit.te.emulate.context import Machine, emulation
    from memaudit.te.emulate.cudnn import CUDNN_STANDINS
    from memaudit.te.emulate.kernels import tex_functions
    from memaudit.te.emulate.run import default_cublaslt
    from memaudit.te.emulate.standins import STANDINS

    originals = tex_functions()
    report: dict[str, Any] = {
        "recipe": recipe_name,
        "arch": arch,
        "fused": fused,
        "groups": groups,
        "compared": Counter(),
        "differences": [],
        "real_failed": Counter(),
    }

    def checked(name: str, real: Any, standin: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if name in SKIP:
                return standin(*args, **kwargs)
            try:
                got = real(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the stand-in carries on where the kernel fails here
                report["real_failed"][f"{name}: {str(exc).splitlines()[0][:120]}"] += 1
                return standin(*args, **kwargs)
            mine = standin(*args, **kwargs)
            report["compared"][name] += 1
            for d in diff(shape_of(got, {}), shape_of(mine, {})):
                report["differences"].append(f"{name}: {d}")
            return got

        return call

    table = {n: checked(n, originals[n], f) for n, f in STANDINS.items()}
    os.environ["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1" if fused else "0"
    try:
        with emulation(Machine(arch, default_cublaslt(arch)), table, CUDNN_STANDINS):
            forward(recipe_name, groups, tokens, hidden, ffn)
            report["status"] = "completed"
    except Exception as exc:  # noqa: BLE001 - a probe reports every failure
        report["status"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        os.environ["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "0"
    report["compared"] = dict(report["compared"])
    report["real_failed"] = dict(report["real_failed"])
    report["differences"] = sorted(set(report["differences"]))
    return report


def main() -> None:
    args = start(__doc__)

    cells = []
    for arch, recipes in (
        ("sm90", ("bf16", "fp8-delayed", "fp8-current", "fp8-block")),
        ("sm100", ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")),
    ):
        for recipe in recipes:
            for fused in (False, True) if recipe in ("mxfp8", "nvfp4") else (False,):
                for groups in (1, 4):
                    cell = run_cell(recipe, arch, fused, groups, 1024, 256, 256)
                    print(
                        arch,
                        recipe,
                        "fused" if fused else "unfused",
                        groups,
                        cell["status"][:100],
                        "compared",
                        sum(cell["compared"].values()),
                        "differences",
                        len(cell["differences"]),
                        flush=True,
                    )
                    for d in cell["differences"][:6]:
                        print("   ", d[:220])
                    cells.append(cell)
    with open(args.out, "w") as f:
        json.dump(cells, f, indent=1, default=str)


if __name__ == "__main__":
    main()
