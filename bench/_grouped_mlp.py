"""The grouped MLP forward the GPU probes run (as the TE target builds it), and their common start."""

from __future__ import annotations

import argparse
import os

FUSED_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"


def start(doc: str | None) -> argparse.Namespace:
    """Parse ``--out``, switch the fused op off for TE's import, and import TE."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ[FUSED_ENV] = "0"
    import transformer_engine.pytorch  # noqa: F401

    return args


def forward(recipe_name: str, groups: int, tokens: int, hidden: int, ffn: int) -> object:
    """TE's GroupedLinear -> ScaledSwiGLU -> GroupedLinear forward on CUDA, synchronized."""
    import torch
    import transformer_engine.pytorch as te

    from memaudit.spec import CaseSpec
    from memaudit.targets.registry import get_target
    from memaudit.te.targets.grouped_mlp import make_recipe

    spec = CaseSpec.make(
        get_target("te-grouped-mlp"), recipe_name, groups, tokens=tokens, hidden=hidden, ffn=ffn, device="cuda"
    )
    recipe = make_recipe(recipe_name)
    fc1 = te.ops.GroupedLinear(groups, hidden, 2 * ffn, bias=False, device="cuda", dtype=torch.bfloat16)
    fc2 = te.ops.GroupedLinear(groups, ffn, hidden, bias=False, device="cuda", dtype=torch.bfloat16)
    model = te.ops.Sequential(fc1, te.ops.ScaledSwiGLU(glu_interleave_size=32), fc2)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    split = torch.tensor(spec.split_sizes(), dtype=torch.int64, device="cuda")
    probs = torch.rand(tokens, device="cuda", requires_grad=True)
    with te.autocast(enabled=recipe is not None, recipe=recipe):
        model(x, split, probs, split)
    torch.cuda.synchronize()
    return model
