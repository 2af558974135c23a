"""What this machine can say about each recipe and path: real kernels, emulated kernels, estimate.

``memaudit doctor`` prints it; ``memaudit run`` uses the same answers for its fallbacks
(:mod:`memaudit.te.machine.fallback`). TE's reasons are TE's own strings: on a GPU its gates answer for
the GPU; without one, its gates answer for sm90 and sm100 as the emulation's gates present them
(:func:`memaudit.te.emulate.gates.emulated_arch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memaudit.errors import UsageError
from memaudit.te.emulate.gates import emulated_arch
from memaudit.te.estimate import PATHS, resolve
from memaudit.te.machine.fallback import can_emulate
from memaudit.te.machine.probes import recipe_gate
from memaudit.te.machine.recipes import RECIPES, needs

DOCTOR_SHAPE = {"tokens": 4096, "hidden": 1024, "ffn": 2048, "groups": 4}
"""The shape doctor's path answers are for (the TE target's default)."""


@dataclass(frozen=True)
class RecipeAnswer:
    """How one recipe can be audited here, and why not otherwise."""

    recipe: str
    real: bool
    real_why: str
    emulated: bool
    emulated_why: str
    estimated: bool = True
    te_gates: dict[str, str] = field(default_factory=dict)
    """TE's own gate answer per architecture (``here``, or ``sm90``/``sm100``): ``""`` = available."""

    def best(self) -> str:
        """``real``, ``emulated`` or ``estimated``: what ``memaudit run`` gives for this recipe."""
        return "real" if self.real else "emulated" if self.emulated else "estimated"

    def to_dict(self) -> dict[str, Any]:
        return {
            "real": self.real,
            "real_why": self.real_why,
            "emulated": self.emulated,
            "emulated_why": self.emulated_why,
            "estimated": self.estimated,
            "te_gates": dict(self.te_gates),
        }


def _gate(te: Any, recipe: str) -> str:

    try:
        ok, reason = recipe_gate(te, recipe)
    except Exception as exc:  # noqa: BLE001 - TE's check itself needs a GPU (bf16 asks the device)
        return f"TE's check asks the GPU itself ({type(exc).__name__})"
    return "" if ok else (reason or "not available")


def te_gates(te: Any, archs: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """TE's gate answer per recipe on each emulated architecture (its own strings)."""

    from memaudit.te.emulate.host import cuda_answers  # imports torch (fake CUDA): only when asked

    out: dict[str, dict[str, str]] = {r: {} for r in RECIPES}
    for arch in archs:
        for recipe in RECIPES:
            with cuda_answers(arch), emulated_arch(arch):
                out[recipe][arch] = _gate(te, recipe)
    return out


def recipe_answers(te: Any | None, *, gpu: bool, te_error: str | None) -> dict[str, RecipeAnswer]:
    """Every recipe: real here? emulated here? (estimated: always)."""

    emu_why = can_emulate() or ""
    gates: dict[str, dict[str, str]] = {r: {} for r in RECIPES}
    if te is not None:
        if gpu:
            for recipe in RECIPES:
                gates[recipe]["here"] = _gate(te, recipe)
        gates_other = te_gates(te, ("sm90", "sm100"))
        for recipe in RECIPES:
            gates[recipe].update(gates_other[recipe])
    answers = {}
    for recipe in RECIPES:
        if te is None:
            real, why = False, te_error or "TransformerEngine is not importable"
        elif not gpu:
            real, why = False, f"no CUDA device (TE runs {recipe} on {needs(recipe)})"
        else:
            here = gates[recipe].get("here", "")
            real, why = here == "", here
        answers[recipe] = RecipeAnswer(recipe, real, why, emu_why == "", emu_why, te_gates=gates[recipe])
    return answers


def path_answers() -> dict[str, dict[str, str]]:
    """Per recipe and path, what the estimator (TE's layout rules) says: ``sm100`` / ``sm90``
    where TE takes the path there, else TE's reason it never does (at :data:`DOCTOR_SHAPE`)."""

    out: dict[str, dict[str, str]] = {}
    for recipe in RECIPES:
        out[recipe] = {}
        for path in PATHS:
            try:
                c = resolve(
                    recipe,
                    DOCTOR_SHAPE["tokens"],
                    DOCTOR_SHAPE["hidden"],
                    DOCTOR_SHAPE["ffn"],
                    DOCTOR_SHAPE["groups"],
                    path=path,
                )
            except UsageError as exc:
                out[recipe][path] = f"no: {exc}"
            else:
                out[recipe][path] = c.arch
    return out
