"""Target ``reference``: TE's grouped MLP written in plain PyTorch (the model is in
:mod:`memaudit.te.targets.reference_model`, imported when a case is built, so that reading this
target's declaration imports no torch).

It lives with TE because it speaks TE's recipe names, records TE's path keys for its fallback
answers, and hands a quantized recipe to TE's emulated forward or estimate (:mod:`memaudit.te.machine.fallback`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memaudit.spec import CaseSpec
from memaudit.targets.base import MLP_SHAPE, Built, Fallback, Target, backward_sum
from memaudit.te.machine.fallback import grouped_mlp_fallback
from memaudit.te.machine.recipes import RECIPES, alignment, needs
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

if TYPE_CHECKING:
    import torch

    from memaudit.capture import Capture


class ReferenceTarget(Target):
    """Target ``reference``: runs anywhere PyTorch runs."""

    name = "reference"
    recipes = RECIPES  # TE's names: the reference runs bf16 and says why it skips the others
    default_recipes = ("bf16",)
    supported_recipes = ("bf16",)
    fallback_recipes = RECIPES
    shape = MLP_SHAPE
    path_keys = TEGroupedMLPTarget.path_keys
    """The reference records no path itself; its fallback answers (TE's estimate or emulated
    forward, :meth:`fallback`) record TE's, so a scenario's ``when`` may name those."""
    defaults: dict[str, Any] = {"tokens": 1024, "hidden": 256, "ffn": 512, "groups": (1, 4, 8), "dtype": "bf16"}
    default_device = "cpu"

    @staticmethod
    def runs_here() -> bool:
        return True

    @staticmethod
    def alignment(recipe: str) -> int:
        return alignment(recipe)

    def skip_reason(self, spec: CaseSpec) -> str | None:
        if spec.recipe != "bf16":
            return (
                f"the reference target (plain PyTorch, no TE) runs bf16 only, not {spec.recipe}; TE runs "
                f"{spec.recipe} on {needs(spec.recipe)}"
            )
        if spec.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                return "CUDA is not available"
        return None

    def fallback(self, spec: CaseSpec, reason: str, mode: str, *, backward: bool = True) -> Fallback | None:
        """A quantized recipe the reference cannot run: TE's real forward with emulated kernels
        wherever it can run (a GPU, or fake CUDA), else TE's layout rules (:mod:`memaudit.te.machine.fallback`)."""
        if spec.recipe == "bf16":
            return None

        return grouped_mlp_fallback(TEGroupedMLPTarget, spec, reason, mode, backward=backward, defaults=self.defaults)

    def build(self, spec: CaseSpec) -> Built:
        from memaudit.te.targets.reference_model import DTYPES, ReferenceGroupedMLP, make_inputs

        model = ReferenceGroupedMLP(spec.groups, spec.hidden, spec.ffn, dtype=DTYPES[spec.dtype], device=spec.device)
        x, split_sizes, probs = make_inputs(spec)

        def forward(cap: Capture) -> torch.Tensor:
            model.labeler = cap.label
            try:
                return model(x, split_sizes, probs)
            finally:
                model.labeler = None

        return Built(forward=forward, backward=backward_sum, model=model, inputs=(x, probs))
