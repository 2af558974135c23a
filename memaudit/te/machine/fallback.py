"""The best available answer for a grouped-MLP case that cannot run on real kernels here.

``memaudit run --recipe nvfp4`` on a machine without Blackwell: TE's real forward with emulated
kernels wherever TE is installed (``--kernels emulated --arch sm100``: TE's own Python decides what
is saved; on a GPU, or with no GPU on fake CUDA, :mod:`memaudit.te.emulate.host`), else TE 2.20.2's
layout rules (``memaudit estimate``): without TE, or on a CPU-only torch build. Each answer is
labelled (``execution``) and comes with the command that gives it on its own.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import CaseReport
from memaudit.spec import CaseSpec
from memaudit.targets.base import Fallback, Target
from memaudit.te.estimate import TE_VERSION, estimate
from memaudit.te.machine.recipes import FUSED_ENV, RECIPES

TARGET = "te-grouped-mlp"
EMULATION_FAILED = "TE's real forward with emulated kernels failed"
"""How the warning of an estimate that replaced a failed emulated forward begins."""
EMULATED_ARCH = "sm100"
"""The architecture an emulated fallback runs: every recipe and the fused op exist there."""


def _dims(spec: CaseSpec) -> list[str]:
    out = []
    for name, value in spec.shape:
        out += [f"--{name.replace('_', '-')}", str(value)]
    if spec.splits:
        out += ["--splits", ",".join(map(str, spec.splits))]
    return out


PR3545_SHAPE = (("tokens", 82944), ("hidden", 3072), ("ffn", 1536))
"""The shape TE PR #3545 measured (a Nemotron hybrid proxy's expert layer: 83k tokens, hidden
3072), where NVFP4's fused path keeps about 136 MiB of rowwise input it never reads."""
PR3545_CUDNN_FRONTEND = "1.26.0"
"""Below 1.27 a single group takes the grouped path, as in the PR's test
(docs/investigations/te-nvfp4-weight-scale-view.md)."""


def at_pr3545_shape(command: str) -> str:
    """``command`` (an emulate or estimate command of :func:`emulate_command` /
    :func:`estimate_command`) at PR #3545's shape. For NVFP4 an emulated run also names the cuDNN
    frontend version under which one group takes the grouped path, as in the PR's test, and an
    estimate shows the PR's pruning beside TE 2.20.2 (``--diff pr3545``)."""
    args = shlex.split(command)
    for name, value in PR3545_SHAPE:
        flag = f"--{name}"
        if flag in args:
            args[args.index(flag) + 1] = str(value)
        else:
            args += [flag, str(value)]
    if args[args.index("--recipe") + 1] == "nvfp4":
        if "--kernels" in args and "--cudnn-frontend" not in args:
            args += ["--cudnn-frontend", PR3545_CUDNN_FRONTEND]
        elif args[1] == "estimate" and "--diff" not in args:
            args += ["--diff", "pr3545"]  # the estimate beside the PR's pruning
    return shlex.join(args)


def estimate_command(spec: CaseSpec) -> str:
    """``memaudit estimate`` for the same recipe, group count and shape."""
    return shlex.join(["memaudit", "estimate", "--recipe", spec.recipe, "--groups", str(spec.groups), *_dims(spec)])


def emulate_command(spec: CaseSpec) -> str:
    """``memaudit run`` of TE's real forward with emulated kernels for the same case."""
    return shlex.join(
        [
            "memaudit",
            "run",
            "--target",
            TARGET,
            "--kernels",
            "emulated",
            "--arch",
            EMULATED_ARCH,
            "--recipe",
            spec.recipe,
            "--groups",
            str(spec.groups),
            *_dims(spec),
        ]
    )


def notes(case: CaseReport) -> list[str]:
    """An emulated answer that failed, and was replaced by the estimate, says why."""
    return [w for w in case.warnings if w.startswith(EMULATION_FAILED)]


def can_emulate() -> str | None:
    """None where TE's real forward can run with emulated kernels here (on a GPU, or with no GPU on
    fake CUDA: torch's CUDA build), else why not."""
    import importlib.util

    from memaudit.te.emulate.host import unavailable  # imports torch (fake CUDA): only when asked

    if importlib.util.find_spec("transformer_engine") is None:
        return "TransformerEngine is not installed"
    return unavailable()


def _emulated(
    make: Callable[[], Target], spec: CaseSpec, reason: str, flags: dict[str, Any], backward: bool
) -> Fallback | str:
    """TE's real forward with emulated kernels for ``spec`` (on the TE target ``make()`` gives), or
    why it cannot run here."""
    import os

    before = os.environ.get(FUSED_ENV)
    try:
        target = make().configure({**flags, "kernels": "emulated", "arch": EMULATED_ARCH, "cublaslt": None})
    except RuntimeError as exc:  # TE was already imported with the fused op on: emulation cannot switch it
        return str(exc)
    finally:  # the emulated forward sets the switch itself; the real cases keep theirs
        if before is None:
            os.environ.pop(FUSED_ENV, None)
        else:
            os.environ[FUSED_ENV] = before
    espec = spec.retarget(target).replace(
        device=spec.device if spec.device.startswith("cuda") else "cuda", options={**spec.options, **target.options}
    )
    why = target.skip_reason(espec)
    if why is not None:
        return why

    def run() -> CaseReport:
        from memaudit.runner import run_case

        case = run_case(target, espec, backward=backward)
        if case.status != "error":
            return case
        estimated = _estimated(spec, reason)  # the next best answer, saying why it is not the emulated one
        if estimated is None:
            return case
        answer = estimated.run()
        answer.warnings = [
            *answer.warnings,
            f"{EMULATION_FAILED} ({case.reason}); "
            f"this is the estimate instead (reproduce the failure: {emulate_command(espec)})",
        ]
        return answer

    return Fallback(
        "emulated",
        reason,
        emulate_command(espec),
        run,
        what="TE's real forward with emulated kernels (stand-ins that allocate what TE's C++ allocates)",
    )


def _estimated(spec: CaseSpec, reason: str, why: str | None = None) -> Fallback | None:
    """The estimate for ``spec``; ``why`` emulation cannot run here, where that was tried."""

    espec = spec.replace(target=TARGET)
    try:
        case = estimate(espec)
    except UsageError:
        return None  # a configuration TE would reject: the case stays skipped with its reason
    why = why or can_emulate()
    command = emulate_command(espec.replace(device="cuda"))
    if why is None:
        better = f"TE's real forward with emulated kernels: {command}"
    elif why == "TransformerEngine is not installed":
        better = f"with TE installed (a GPU is not needed), TE's real forward with emulated kernels: {command}"
    else:
        better = f"TE's real forward with emulated kernels cannot run here ({why}); where it can: {command}"
    return Fallback(
        "estimated",
        reason,
        estimate_command(espec),
        lambda: case,
        better,
        what=f"TE {TE_VERSION}'s layout rules (no kernel and no TE code runs)",
    )


def grouped_mlp_fallback(
    make: Callable[[], Target],
    spec: CaseSpec,
    reason: str,
    mode: str,
    flags: dict[str, Any] | None = None,
    *,
    backward: bool = True,
    defaults: Mapping[str, Any] | None = None,
) -> Fallback | None:
    """The best answer for ``spec`` under ``mode`` (``auto``, ``emulate``, ``estimate``), or None;
    ``make`` makes the TE grouped-MLP target that runs an emulated answer. Where ``spec`` is at the
    asking target's default shape (``defaults``: a toy size), the answer also offers its command at
    TE PR #3545's shape (``at_scale``)."""
    found = _best(make, spec, reason, mode, flags, backward)
    if found is None or defaults is None or any(defaults.get(n) != v for n, v in spec.shape):
        return found
    why = "; where NVFP4 keeps about 136 MiB per expert layer that no backward reads" if spec.recipe == "nvfp4" else ""
    return dataclasses.replace(
        found,
        at_scale=f"at TE PR #3545's shape (T=82,944, H=3,072, F=1,536{why}), not this "
        f"toy one: {at_pr3545_shape(found.command)}",
    )


def _best(
    make: Callable[[], Target], spec: CaseSpec, reason: str, mode: str, flags: dict[str, Any] | None, backward: bool
) -> Fallback | None:
    if spec.recipe not in RECIPES:
        return None
    if spec.device == "meta":  # nothing may be allocated: no emulated forward (it runs on CUDA), the estimate at most
        return _estimated(spec, reason) if mode in ("auto", "estimate") else None
    why = None
    if mode in ("auto", "emulate") and can_emulate() is None:
        found = _emulated(make, spec, reason, dict(flags or {}), backward)
        if not isinstance(found, str):
            return found
        if mode == "emulate":
            return None
        why = found
    if mode in ("auto", "estimate"):
        return _estimated(spec, reason, why)
    return None
