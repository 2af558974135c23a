"""TE's quantization recipes as memaudit names them, and the token alignment each needs.

Pure data: importing this module imports nothing of TE. ``make_recipe`` in
:mod:`memaudit.te.target` turns a name into TE's recipe object.
"""

from __future__ import annotations

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
