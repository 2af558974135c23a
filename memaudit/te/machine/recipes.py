"""TE's quantization recipes as memaudit names them, and the token alignment each needs.

Pure data: importing this module imports nothing of TE. ``make_recipe`` in
:mod:`memaudit.te.targets.grouped_mlp` turns a name into TE's recipe object.
"""

from __future__ import annotations

FUSED_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"
"""TE's switch for the fused CuTeDSL grouped MLP, read once when TE is imported (te-internals §1.1)."""

RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")

ALIGNMENT = {
    "bf16": 16,
    "fp8-delayed": 16,
    "fp8-current": 16,
    "fp8-block": 16,
    "mxfp8": 32,
    "nvfp4": 128,
}
"""Per-group token alignment: TE's quantized GEMMs need multiples of these (te-internals §5.3)."""


def alignment(recipe: str) -> int:
    """The per-group token alignment of ``recipe`` (16 for a name TE does not define)."""
    return ALIGNMENT.get(recipe, 16)


MINIMUM_CAPABILITY = {
    "bf16": (8, 0),
    "fp8-delayed": (8, 9),
    "fp8-current": (8, 9),
    "fp8-block": (9, 0),
    "mxfp8": (10, 0),
    "nvfp4": (10, 0),
}
"""The compute capability TE 2.20.2's own gate asks for each recipe (``utils.py:746-766``
``is_bf16_available``; ``quantization.py:149-185`` ``_compute_*_support``; FP8 on 8.9 also needs
cuBLASLt 12.1.3 and CUDA 12.1, FP8 block scaling CUDA 12.9, MXFP8 is refused on 12.0+).
``tests/cli/test_headline.py`` checks it against TE's gates."""


def needs(recipe: str) -> str:
    """What real kernels need for ``recipe``, in words: ``a CUDA GPU of compute capability 10.0+``."""
    major, minor = MINIMUM_CAPABILITY.get(recipe, (8, 0))
    return f"a CUDA GPU of compute capability {major}.{minor} or higher"
