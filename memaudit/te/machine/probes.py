"""What TE says about this machine, asked without building a model: the fused switch, TE's import,
its recipe gates with their reason strings, the fused op's registration conditions, GroupedLinear's
path choice, and the library versions those read. Used by the TE target and ``memaudit doctor``.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from typing import Any

from memaudit.spec import CaseSpec
from memaudit.te.machine.recipes import FUSED_ENV, RECIPES


def set_fused_env(fused: bool | None) -> str:
    """Set the fused-MLP env var before TE is imported; return the value in force.

    ``None`` means fused where TE can fuse: compute capability 10.x.
    """
    import torch

    if fused is None:
        can = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10
        value = os.environ.get(FUSED_ENV, "1" if can else "0")
    else:
        value = "1" if fused else "0"
    if "transformer_engine.pytorch" in sys.modules and os.environ.get(FUSED_ENV, "0") != value:
        raise RuntimeError(
            f"{FUSED_ENV} must be set before TE is imported; TE was imported with {os.environ.get(FUSED_ENV)!r}"
        )
    os.environ[FUSED_ENV] = value
    return value


def import_te() -> tuple[Any, str | None]:
    """(transformer_engine.pytorch, None) or (None, why it does not import)."""
    try:
        import transformer_engine.pytorch as te  # noqa: F401  (torch is already imported)
    except Exception as exc:  # noqa: BLE001 - any import failure means "TE not usable here"
        return None, f"transformer_engine.pytorch does not import: {type(exc).__name__}: {exc}".strip()
    return te, None


def make_recipe(name: str) -> Any:
    """The TE recipe object for a memaudit recipe name (None for bf16)."""
    from transformer_engine.common import recipe as r

    if name == "bf16":
        return None
    if name == "fp8-delayed":
        return r.DelayedScaling()
    if name == "fp8-current":
        return r.Float8CurrentScaling()
    if name == "fp8-block":
        return r.Float8BlockScaling()
    if name == "mxfp8":
        return r.MXFP8BlockScaling(fp8_format=r.Format.E4M3)
    if name == "nvfp4":  # as TE's tests configure "nvfp4_rht" (te-internals §3)
        return r.NVFP4BlockScaling(
            disable_rht=False,
            disable_stochastic_rounding=True,
            disable_2d_quantization=True,
            row_scaled_activation=False,
            nvfp4_4over6="none",
        )
    raise ValueError(f"unknown recipe {name!r}")


def recipe_gate(te: Any, name: str) -> tuple[bool, str | None]:
    """TE's own answer, with its reason string, for one recipe (te-internals §4)."""
    checks = {
        "bf16": getattr(te, "is_bf16_available", None),
        "fp8-delayed": te.is_fp8_available,
        "fp8-current": te.is_fp8_available,
        "fp8-block": te.is_fp8_block_scaling_available,
        "mxfp8": te.is_mxfp8_available,
        "nvfp4": te.is_nvfp4_available,
    }
    fn = checks[name]
    if fn is None:
        return True, None
    try:
        res = fn(return_reason=True)
    except TypeError:
        res = (fn(), None)
    ok, reason = res if isinstance(res, tuple) else (bool(res), None)
    return bool(ok), reason or None


def recipe_availability(te: Any) -> dict[str, tuple[bool, str | None]]:
    """TE's own answer, with its reason string, for every recipe (te-internals §4)."""
    return {name: recipe_gate(te, name) for name in RECIPES}


def cudnn_frontend_version() -> str | None:
    try:
        return metadata.version("nvidia-cudnn-frontend")
    except metadata.PackageNotFoundError:
        return None


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def why_fused_cannot_register(frontend: str | None = None) -> str | None:
    """The first failing condition of ``GroupedMLP_CuTeGEMMGLU.is_supported`` (te-internals §1.1);
    ``frontend`` is the cuDNN-frontend version to assume (an emulated machine's), else the installed one."""
    import torch

    from memaudit.te.emulate.host import cuda_here  # imports torch (fake CUDA): only when asked

    if int(os.environ.get(FUSED_ENV, "0") or 0) <= 0:
        return f"{FUSED_ENV} is not set to a positive value"
    if not cuda_here():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if major != 10:
        return f"compute capability {major}.{minor} is not 10.x (the fused CuTeDSL op needs Blackwell)"
    fe = frontend or cudnn_frontend_version()
    if fe is None:
        return "nvidia-cudnn-frontend is not installed (needs >= 1.23.0)"
    if _version_tuple(fe) < (1, 23, 0):
        return f"nvidia-cudnn-frontend {fe} < 1.23.0"
    try:
        from transformer_engine.pytorch.ops.fused.grouped_mlp import GroupedMLP_CuTeGEMMGLU as Fused
    except ImportError as exc:
        try:  # TE 2.14-2.16: the forward-only fused op
            from transformer_engine.pytorch.ops.fused.forward_grouped_mlp import (
                ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8 as Fused,
            )
        except ImportError:
            return f"the fused grouped MLP does not import: {exc}"
    if not Fused.is_supported():
        return "the cuDNN frontend grouped GEMM kernels do not import"
    return None


def why_not_fused(spec: CaseSpec, recipe: Any, frontend: str | None = None) -> str | None:
    """Every failing fusion condition for this case, TE's check order first (te-internals §1.1-1.2)."""
    import torch

    from memaudit.te.emulate.host import cuda_here  # imports torch (fake CUDA): only when asked

    reasons = []
    registered = why_fused_cannot_register(frontend)
    if registered:
        reasons.append(registered)
        if registered.startswith(FUSED_ENV) and cuda_here():
            major, minor = torch.cuda.get_device_capability()
            if major != 10:
                reasons.append(f"compute capability {major}.{minor} is not 10.x (the fused CuTeDSL op needs Blackwell)")
    if recipe is None or not (recipe.mxfp8() or recipe.nvfp4()):
        reasons.append(f"recipe {spec.recipe} never fuses (only mxfp8 and nvfp4 do)")
    elif recipe.nvfp4() and recipe.disable_rht:
        reasons.append("NVFP4 without RHT")
    elif recipe.mxfp8():
        from transformer_engine.common.recipe import Format

        if recipe.fp8_format != Format.E4M3:
            reasons.append(f"MXFP8 with fp8_format {recipe.fp8_format.name} (needs E4M3)")
    fc1_out = spec.ffn if spec.options.get("activation") == "srelu" else 2 * spec.ffn
    for name, value in (("hidden", spec.hidden), ("fc1 out", fc1_out), ("ffn", spec.ffn)):
        if value % 64:
            reasons.append(f"{name} {value} is not a multiple of 64")
    if spec.tokens % 128:
        reasons.append(f"tokens {spec.tokens} is not a multiple of 128")
    if not reasons:
        return "fusion conditions hold but TE did not fuse (check TE's activation list for this arch)"
    return "; ".join(reasons)


GROUPED_TENSOR_ENTRY_POINTS = (
    "group_quantize",
    "nvfp4_group_quantize_with_amax",
    "te_general_grouped_gemm_for_grouped_tensor",
)
SPLIT_ENTRY_POINTS = ("split_quantize", "te_general_grouped_gemm")


def grouped_linear_path(spec: CaseSpec, recipe: Any, called: frozenset[str] | None = None) -> tuple[str, str]:
    """Which GroupedLinear path TE takes and why, using TE's own predicate (te-internals §1.5).
    A TE version without the predicate (2.18 and older) is read from the kernel entry points its
    emulated forward ``called``."""
    import torch

    try:
        from transformer_engine.pytorch.ops.basic.grouped_linear import (
            is_op_fuser_grouped_tensor_path_supported,
        )
    except ImportError:
        why = "this TE has no is_op_fuser_grouped_tensor_path_supported"
        seen = sorted(set(called or ()) & {*GROUPED_TENSOR_ENTRY_POINTS, *SPLIT_ENTRY_POINTS})
        if any(n in GROUPED_TENSOR_ENTRY_POINTS for n in seen):
            return "grouped-tensor", f"{why}; its forward called {', '.join(seen)}"
        if seen:
            return "split-quantize", f"{why}; its forward called {', '.join(seen)}"
        return "unknown", f"{why}, and no grouped entry point was called"

    dtype = torch.bfloat16 if spec.dtype == "bf16" else torch.float32
    grouped = is_op_fuser_grouped_tensor_path_supported(recipe, dtype)
    return ("grouped-tensor" if grouped else "split-quantize"), _grouped_path_reason(spec, recipe, grouped)


def cublaslt_version() -> int | None:
    try:
        import transformer_engine_torch as tex

        return int(tex.get_cublasLt_version())
    except Exception:  # noqa: BLE001 - no CUDA runtime
        return None


def fmt_cublaslt(v: int | None) -> str:
    return "unknown" if v is None else f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _grouped_path_reason(spec: CaseSpec, recipe: Any, grouped: bool) -> str:
    import transformer_engine.pytorch.utils as te_utils

    from memaudit.te.emulate.host import cuda_here  # imports torch (fake CUDA): only when asked

    cc = te_utils.get_device_compute_capability() if cuda_here() else (0, 0)
    v = cublaslt_version() or 0
    lt = f"cuBLASLt {fmt_cublaslt(v)}"
    if spec.dtype != "bf16":
        return f"dtype {spec.dtype} is not bf16/fp16"
    if not (9, 0) <= cc <= (11, 0):
        return f"compute capability {cc[0]}.{cc[1]} outside 9.0-11.0"
    if v < 130300:
        return f"{lt} < 13.3"
    if cc < (10, 0) and v < 130400:
        return f"{lt} < 13.4 on Hopper"
    if recipe is None:
        return f"bf16 with {lt} on compute capability {cc[0]}.{cc[1]}"
    if recipe.float8_current_scaling():
        return (
            "fp8 current scaling "
            f"{'on Blackwell' if cc >= (10, 0) else ('with ' + lt + (' >= 13.5' if grouped else ' < 13.5 on Hopper'))}"
        )
    if recipe.float8_block_scaling():
        return "fp8 block scaling: grouped path only on Hopper with cuBLASLt >= 13.6" + ("" if grouped else f" ({lt})")
    if recipe.delayed():
        return "DelayedScaling has no grouped quantize kernel: always split-quantize"
    return f"recipe {spec.recipe} on compute capability {cc[0]}.{cc[1]}"
