"""``memaudit doctor``: what this machine can audit, and which TE path each recipe would take."""

from __future__ import annotations

import importlib.util
import platform
from typing import Any

import torch
from rich.console import Group
from rich.table import Table

from memaudit.spec import CaseSpec
from memaudit.te.environment import te_version
from memaudit.te.recipes import RECIPES


def _cudnn(info: dict[str, Any]) -> None:
    # Asked only after TE's import: torch loading its own cuDNN first can make TE's import fail.
    if torch.cuda.is_available():
        try:
            info["cudnn"] = torch.backends.cudnn.version()
        except RuntimeError as exc:  # TE's wheel may load another cuDNN than torch's
            info["cudnn"] = str(exc).splitlines()[0][:120]


def doctor_report() -> dict[str, Any]:
    """Facts as a dict (also printed as JSON-able data). Never raises for a missing GPU or TE."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": None,
        "compute_capability": None,
        "cudnn": None,
        "transformer_engine": None,
        "te_error": None,
        "cublaslt": None,
        "cudnn_frontend": None,
        "recipes": {},
        "fused": None,
        "fused_why_not": None,
        "grouped_linear": {},
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["compute_capability"] = "{}.{}".format(*torch.cuda.get_device_capability())
    if importlib.util.find_spec("transformer_engine") is None:
        info["te_error"] = "transformer_engine is not installed"
        _cudnn(info)
        return info
    from memaudit.te import target as tgm

    tgm.set_fused_env(None)
    te, why = tgm.import_te()
    _cudnn(info)
    if te is None:
        info["te_error"] = why
        return info
    info["transformer_engine"] = te_version()
    info["cudnn_frontend"] = tgm.cudnn_frontend_version()
    info["cublaslt"] = tgm.fmt_cublaslt(tgm.cublaslt_version()) if torch.cuda.is_available() else None
    if not torch.cuda.is_available():
        info["te_error"] = "no CUDA device: TE imports but runs no kernels here"
        return info
    for name, (ok, reason) in tgm.recipe_availability(te).items():
        info["recipes"][name] = {"available": ok, "reason": reason}
    why_reg = tgm.why_fused_cannot_register()
    info["fused"] = why_reg is None
    info["fused_why_not"] = why_reg
    for name in RECIPES:
        spec = CaseSpec.make("te-grouped-mlp", name, 4, tokens=4096, hidden=1024, ffn=2048, device="cuda")
        try:
            path, why = tgm.grouped_linear_path(spec, tgm.make_recipe(name))
        except Exception as exc:  # noqa: BLE001 - report, don't crash
            path, why = "unknown", f"{type(exc).__name__}: {exc}"
        info["grouped_linear"][name] = {"path": path, "why": why}
    return info


def render_doctor(info: dict[str, Any]) -> Group:
    """Rich tables for the doctor report."""
    env = Table(title="environment", title_justify="left", show_header=False)
    env.add_column("what")
    env.add_column("value")
    for key in ("gpu", "compute_capability", "python", "torch", "cuda", "cudnn", "transformer_engine", "cublaslt", "cudnn_frontend"):
        value = info.get(key)
        env.add_row(key, "-" if value is None else str(value))
    parts: list[Any] = [env]
    if info.get("gpu") is None:
        parts.append("No CUDA GPU: memaudit runs the CPU reference target; the TE target is skipped.")
    if info.get("te_error"):
        parts.append(f"TransformerEngine: {info['te_error']}")
    if info.get("recipes"):
        rec = Table(title="recipes", title_justify="left")
        for col in ("recipe", "available", "TE's reason", "GroupedLinear path", "why"):
            rec.add_column(col)
        for name, r in info["recipes"].items():
            gl = info["grouped_linear"].get(name, {})
            rec.add_row(name, "yes" if r["available"] else "no", r["reason"] or "", gl.get("path", ""), gl.get("why", ""))
        parts.append(rec)
        fused = "can register" if info["fused"] else f"cannot register: {info['fused_why_not']}"
        parts.append(f"fused grouped MLP (CuTeDSL): {fused}")
    return Group(*parts)
