"""``memaudit doctor``: what this machine can audit, and which TE path each recipe would take."""

from __future__ import annotations

import importlib.util
import platform
from typing import Any

import torch
from rich.console import Group
from rich.table import Table
from rich.text import Text

from memaudit.targets.base import Target
from memaudit.te.estimate import PATHS
from memaudit.te.machine import probes as tgm
from memaudit.te.machine.availability import path_answers, recipe_answers
from memaudit.te.machine.environment import te_version
from memaudit.te.machine.recipes import RECIPES, needs
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget


def _cudnn(info: dict[str, Any]) -> None:
    # Asked only after TE's import: torch loading its own cuDNN first can make TE's import fail.
    if torch.cuda.is_available():
        try:
            info["cudnn"] = torch.backends.cudnn.version()
        except RuntimeError as exc:  # TE's wheel may load another cuDNN than torch's
            info["cudnn"] = str(exc).splitlines()[0][:120]


def _answers(info: dict[str, Any], te: Any | None) -> None:

    from memaudit.te.emulate.host import needs_child  # imports torch (fake CUDA): only when asked

    answers = recipe_answers(te, gpu=torch.cuda.is_available(), te_error=info.get("te_error"))
    info["answers"] = {name: a.to_dict() for name, a in answers.items()}
    info["paths"] = path_answers()
    emulated = next(iter(answers.values())).emulated
    info["emulation_host"] = None if not emulated else ("fake CUDA (no GPU)" if needs_child() else info.get("gpu"))


def doctor_report(target: Target) -> dict[str, Any]:
    """Facts as a dict (also printed as JSON-able data); ``target`` (the TE grouped-MLP target)
    makes the specs whose GroupedLinear path is asked. Never raises for a missing GPU or TE."""
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
        "answers": {},
        "paths": {},
        "emulation_host": None,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["compute_capability"] = "{}.{}".format(*torch.cuda.get_device_capability())
    if importlib.util.find_spec("transformer_engine") is None:
        info["te_error"] = "transformer_engine is not installed"
        _cudnn(info)
        _answers(info, None)
        return info

    tgm.set_fused_env(None)
    te, why = tgm.import_te()
    _cudnn(info)
    if te is None:
        info["te_error"] = why
        _answers(info, None)
        return info
    info["transformer_engine"] = te_version()
    info["cudnn_frontend"] = tgm.cudnn_frontend_version()
    info["cublaslt"] = tgm.fmt_cublaslt(tgm.cublaslt_version()) if torch.cuda.is_available() else None
    if not torch.cuda.is_available():
        info["te_error"] = "no CUDA device: TE imports but runs no kernels here"
        _answers(info, te)
        return info
    _answers(info, te)
    for name, (ok, reason) in tgm.recipe_availability(te).items():
        info["recipes"][name] = {"available": ok, "reason": reason}
    why_reg = tgm.why_fused_cannot_register()
    info["fused"] = why_reg is None
    info["fused_why_not"] = why_reg
    for name in RECIPES:
        spec = target.spec(name, 4, tokens=4096, hidden=1024, ffn=2048, device="cuda")
        try:
            path, why = tgm.grouped_linear_path(spec, tgm.make_recipe(name))
        except Exception as exc:  # noqa: BLE001 - report, don't crash
            path, why = "unknown", f"{type(exc).__name__}: {exc}"
        info["grouped_linear"][name] = {"path": path, "why": why}
    return info


def _answers_table(info: dict[str, Any]) -> Group:
    """One line per recipe (what ``run`` gives here, what real kernels need, TE's own gate on
    sm90 and sm100, the paths TE takes), then why real and emulated kernels are or are not here."""

    table = Table(title="what memaudit can do here, per recipe", title_justify="left")
    for col in (
        "recipe",
        "here",
        "real kernels need",
        "TE's gate on sm90",
        "TE's gate on sm100",
        "paths TE takes (estimator)",
    ):
        table.add_column(col)
    answers = info["answers"]
    for name, a in answers.items():
        gates = a.get("te_gates", {})
        best = "real" if a["real"] else "emulated" if a["emulated"] else "estimated"
        paths = info.get("paths", {}).get(name, {})
        taken = [p for p in PATHS if p in paths and not paths[p].startswith("no")]
        archs = sorted({paths[p] for p in taken})
        table.add_row(
            name,
            best,
            needs(name).removeprefix("a CUDA GPU of "),
            Text(gates.get("sm90", "-") or "available"),
            Text(gates.get("sm100", "-") or "available"),
            f"{', '.join(taken)} ({', '.join(archs)})",
        )
    first = next(iter(answers.values()))
    lines: list[Any] = [table]
    real = [n for n, a in answers.items() if a["real"]]
    lines.append(
        Text(
            f"real kernels here: {', '.join(real)}"
            if real
            else f"real kernels here: none ({first['real_why'].split(' (')[0]})"
        )
    )
    where = info.get("emulation_host")
    how = (
        f"yes, on {where}"
        + (": TE's forward on fake CUDA tensors, each case in a child process" if where == "fake CUDA (no GPU)" else "")
        if first["emulated"]
        else f"no: {first['emulated_why']}"
    )
    lines.append(Text(f"emulated kernels here (TE's real Python, stand-in kernels; --kernels emulated): {how}"))
    lines.append(Text("estimates (TE 2.20.2's layout rules, no GPU needed; memaudit estimate): every recipe and path"))
    return Group(*lines)


def render_doctor(info: dict[str, Any]) -> Group:
    """Rich tables for the doctor report."""
    env = Table(title="environment", title_justify="left", show_header=False)
    env.add_column("what")
    env.add_column("value")
    for key in (
        "gpu",
        "compute_capability",
        "python",
        "torch",
        "cuda",
        "cudnn",
        "transformer_engine",
        "cublaslt",
        "cudnn_frontend",
    ):
        value = info.get(key)
        env.add_row(key, "-" if value is None else str(value))
    parts: list[Any] = [env]
    if info.get("gpu") is None:
        if info.get("emulation_host"):
            parts.append(
                Text(
                    "No CUDA GPU: memaudit run runs TE's grouped MLP with emulated kernels on fake CUDA "
                    "(TE's real Python forward, labelled emulated)."
                )
            )
        else:
            parts.append(
                Text(
                    "No CUDA GPU: memaudit run measures the CPU reference target (bf16) and estimates every "
                    "recipe it cannot run (labelled estimated)."
                )
            )
    if info.get("te_error"):
        parts.append(Text(f"TransformerEngine: {info['te_error']}"))
    if info.get("answers"):
        parts.append(_answers_table(info))
    if info.get("recipes"):
        rec = Table(title="recipes", title_justify="left")
        for col in ("recipe", "available", "TE's reason", "GroupedLinear path", "why"):
            rec.add_column(col)
        for name, r in info["recipes"].items():
            gl = info["grouped_linear"].get(name, {})
            rec.add_row(
                name, "yes" if r["available"] else "no", r["reason"] or "", gl.get("path", ""), gl.get("why", "")
            )
        parts.append(rec)
        fused = "can register" if info["fused"] else f"cannot register: {info['fused_why_not']}"
        parts.append(f"fused grouped MLP (CuTeDSL): {fused}")
    return Group(*parts)


def section() -> Group:
    """TE's section of ``memaudit doctor`` (the extension's ``doctor``): GPU, versions, recipe
    availability, and which grouped-MLP path TE would take here."""
    return render_doctor(doctor_report(TEGroupedMLPTarget()))
