"""The expert-parallel target's TE backend (``--experts te``): each rank's local experts are TE's grouped MLP.

``te.ops.Sequential(GroupedLinear, ScaledSwiGLU, GroupedLinear)`` built exactly as the
``te-grouped-mlp`` target builds it (its module; its own inputs are not used), run on the tokens
the dispatch brought this rank, with their probabilities as the activation's scales and the
tokens per local expert as ``split_sizes``, under ``te.autocast`` for the recipe. The TE target's
flags apply (``--fused``, ``--kernels emulated --arch sm100`` for MXFP8 / NVFP4 on an H200, ...),
and so do its skip reasons, in TE's own words. With emulated kernels only the experts' forward
runs inside the emulation (the dispatch's collectives are real) and no backward runs; with no GPU
that forward runs on fake CUDA, and the router and the dispatch on real host tensors beside it
(:func:`memaudit.te.targets.ep_model.build`). The experts are the ``experts`` of a module that calls
them (:func:`local_experts`), so their rows are named under ``experts``.

Imports TE only when a case is built.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from memaudit.report import PathInfo, Row
from memaudit.spec import CaseSpec
from memaudit.te.machine.recipes import RECIPES
from memaudit.te.targets.ep import Experts
from memaudit.te.targets.grouped_mlp import (
    FUSED_ENV,
    GroupedMLPPath,
    TEGroupedMLPTarget,
    grouped_linear_path,
    import_te,
    make_recipe,
    why_not_fused,
)

if TYPE_CHECKING:
    from memaudit.capture import Capture

TARGET = "te-grouped-mlp"


def grouped_mlp_path(model: Any, spec: CaseSpec, recipe: Any, frontend: str | None = None) -> PathInfo:
    """The path TE took (``path`` of a te-grouped-mlp case): the fuser's forward ops, fused or not and why."""
    ops = [
        type(op).__name__
        for group in getattr(model, "_module_groups", None) or ()
        for op, _ in getattr(group, "_forward_ops", ())
    ]
    env = os.environ.get(FUSED_ENV, "0")
    if any(name.startswith("GroupedMLP") for name in ops):
        return GroupedMLPPath(ops, True, env).info()
    name, why = grouped_linear_path(spec, recipe)
    return GroupedMLPPath(ops, False, env, why_not_fused(spec, recipe, frontend), name, why).info()


def local_experts(model: Any) -> Any:
    """``model`` (TE's grouped MLP) as the ``experts`` of a module that calls it, as a MoE layer keeps
    its experts (Megatron's ``mlp.experts``): its rows are named under ``experts``."""
    import torch

    class LocalExperts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = model

        def forward(self, x: Any, split_sizes: Any, probs: Any) -> Any:
            return self.experts(x, split_sizes, probs, split_sizes)

    return LocalExperts()


class TEExperts:
    """TE's grouped MLP as a rank's local experts (:class:`~memaudit.te.targets.ep.ExpertsBackend`)."""

    name = "te"
    recipes = RECIPES
    default_device = "cuda"

    def __init__(self) -> None:
        self.target = TEGroupedMLPTarget()

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        """The TE target's flags: the fused switch before TE's import, emulated kernels, its options
        (this backend, made for one configured expert-parallel target, keeps the configured TE target)."""
        self.target = self.target.configure(flags)
        return dict(self.target.options)

    def case_host(self, spec: CaseSpec) -> Any:
        """The TE target's host for the case (a child process on fake CUDA with emulated kernels
        and no GPU)."""
        return self.target.case_host(spec.replace(target=TARGET))

    def skip_reason(self, spec: CaseSpec) -> str | None:
        return self.target.skip_reason(spec.replace(target=TARGET))

    def build(self, spec: CaseSpec) -> Experts:
        te_spec = spec.replace(target=TARGET)
        built = self.target.build(te_spec)
        model = built.model
        te, why = import_te()
        if te is None:
            raise RuntimeError(why)
        recipe = make_recipe(spec.recipe)
        emulated = self.target.emulated
        emulation = None
        if emulated is not None:
            from memaudit.te.emulate.run import EmulatedRun

            emulation = EmulatedRun(
                emulated.kernels, emulated.arch, emulated.fused, spec.recipe, emulated.cublaslt, emulated.cudnn_frontend
            )
        paths: list[PathInfo] = []

        layer = local_experts(model)

        def run(x: Any, split_sizes: Any, probs: Any, cap: Capture) -> Any:
            cap.label(x, "fc1.input")
            cap.label(split_sizes, "fc1.split_sizes")
            cap.label(probs, "activation.scales")
            with emulation.active() if emulation is not None else contextlib.nullcontext():
                with te.autocast(enabled=recipe is not None, recipe=recipe):
                    y = layer(x, split_sizes, probs)
                frontend = emulation.machine.cudnn_frontend if emulation is not None else None
                paths.append(grouped_mlp_path(model, te_spec, recipe, frontend))
            return y

        def annotate(rows: list[Row], cap: Capture) -> PathInfo | None:
            return paths[-1] if paths else None

        return Experts(
            run=run,
            model=layer,
            annotate=annotate,
            options=dict(built.options),
            warnings=list(built.warnings),
            emulation=emulation.describe if emulation is not None else (lambda: None),
            backward=emulation is None,
        )
