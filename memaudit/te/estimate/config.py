"""Inputs of an estimate: the target's constants, TE's defaults and validation, :class:`Config`.

Paths (te-internals §1, §2):

* ``fused``: the CuTeDSL fused grouped MLP (``ops/fused/grouped_mlp.py``), SM100 only, MXFP8/NVFP4.
* ``unfused-grouped``: ``GroupedLinear._fuser_forward_grouped_tensor`` (graph-safe grouped tensors).
* ``unfused-split``: ``GroupedLinear._fuser_forward_split_quantize`` (``tex.split_quantize``), what
  an H200 with cuBLASLt < 13.4 runs for BF16 / FP8 delayed / FP8 current.

Variants: ``te-2.20`` (what 2.20.2 saves), ``pr3545`` (NVFP4 fused-path rowwise input data and
scales pruned, amax kept), ``ideal`` (only what the backward GEMMs read: columnwise copies of
quantized inputs and weights, their scales and columnwise amax, plus activations and metadata).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from memaudit.errors import UsageError
from memaudit.spec import default_splits, validate_splits
from memaudit.targets.matrix import parse_range as parse_range
from memaudit.te.estimate.shapes import HP_DTYPES
from memaudit.te.machine.recipes import ALIGNMENT, RECIPES

TARGET = "te-grouped-mlp"
TE_VERSION = "2.20.2"
PATHS = ("fused", "unfused-grouped", "unfused-split")
VARIANTS = ("te-2.20", "pr3545", "ideal")
ARCHS = ("sm90", "sm100")
"""sm90: Hopper (H100/H200; FP8 GEMMs are TN-only, so FP8 keeps a transpose). sm100: Blackwell."""
FUSABLE = ("mxfp8", "nvfp4")
DEVICE = "cuda:0"

# Dimension rules: (multiple, why). TE raises (or its tests skip) otherwise.
DIM_MULTIPLE = {
    "fp8-delayed": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "fp8-current": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "fp8-block": (16, "FP8 GEMMs need dims divisible by 16 (TE tests skip otherwise)"),
    "mxfp8": (32, "MXFP8 requires tensor dims divisible by 32 (csrc/quantizer.cpp MXFP8Quantizer::create_tensor)"),
    "nvfp4": (16, "NVFP4 requires tensor dims divisible by 16 (csrc/quantizer.cpp NVFP4Quantizer::create_tensor)"),
}
FUSED_DIM_MULTIPLE = 64  # validate_grouped_mlp_dims, ops/fused/grouped_mlp.py:911-941
FUSED_TOKEN_MULTIPLE = 128  # ops/fused/grouped_mlp.py:1203-1204 raises ValueError


@dataclass(frozen=True)
class Config:
    """One fully resolved estimate input (validated; see :func:`resolve`)."""

    recipe: str
    tokens: int
    hidden: int
    ffn: int
    groups: int
    splits: tuple[int, ...]
    path: str
    arch: str
    dtype: str = "bf16"
    dense_single_group: bool = True
    probs_dtype: str = "float32"
    split_sizes_dtype: str = "int64"

    @property
    def fused(self) -> bool:
        return self.path == "fused"


DEFAULT_PATH_HELP = (
    "Default: fused for mxfp8/nvfp4 when H and F are multiples of 64, else unfused-grouped; "
    "unfused-split for bf16/fp8 (the H200's path)."
)
"""What :func:`default_path` chooses, in words (``memaudit estimate --help``)."""
DEFAULT_ARCH_HELP = "Default: sm100 for fused/mxfp8/nvfp4, else sm90. Decides FP8 transpose vs single data copy."
"""The architecture :func:`resolve` models where none is given, in words."""


def default_path(recipe: str, hidden: int, ffn: int) -> str:
    """The path TE takes by default: Blackwell fused for MXFP8/NVFP4 when the dims allow it (else the
    Blackwell grouped-tensor path); the H200's split-quantize path for BF16 and FP8 (cuBLASLt < 13.4)."""
    if recipe in FUSABLE:
        if hidden % FUSED_DIM_MULTIPLE == 0 and ffn % FUSED_DIM_MULTIPLE == 0:
            return "fused"
        return "unfused-grouped"
    return "unfused-split"


def default_arch(recipe: str, path: str) -> str:
    """SM100 for the fused path and MXFP8/NVFP4 (they need compute capability 10.x), else SM90."""
    return "sm100" if path == "fused" or recipe in FUSABLE else "sm90"


def resolve(
    recipe: str,
    tokens: int,
    hidden: int,
    ffn: int,
    groups: int,
    *,
    splits: Sequence[int] | None = None,
    path: str | None = None,
    arch: str | None = None,
    dtype: str = "bf16",
    dense_single_group: bool = True,
    probs_dtype: str = "float32",
    split_sizes_dtype: str = "int64",
) -> Config:
    """Validate the inputs as TE would and pick defaults; every problem is a UsageError naming its flag."""
    if recipe not in RECIPES:
        raise UsageError(f"unknown recipe {recipe!r}; use one of {', '.join(RECIPES)}", key="--recipe")
    for value, flag in ((tokens, "--tokens"), (hidden, "--hidden"), (ffn, "--ffn"), (groups, "--groups")):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"must be an integer >= 1, got {value!r}", key=flag)
    if path is None:
        path = default_path(recipe, hidden, ffn)
    if path not in PATHS:
        raise UsageError(f"unknown path {path!r}; use one of {', '.join(PATHS)}", key="--path")
    if arch is None:
        arch = default_arch(recipe, path)
    if arch not in ARCHS:
        raise UsageError(f"unknown arch {arch!r}; use one of {', '.join(ARCHS)}", key="--arch")
    if dtype not in HP_DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(HP_DTYPES)}", key="--dtype")
    if probs_dtype not in ("float32", "bfloat16"):
        raise UsageError(f"unknown probs dtype {probs_dtype!r}; use float32 or bfloat16", key="--probs-dtype")
    if split_sizes_dtype not in ("int64", "int32"):
        raise UsageError(f"unknown split-sizes dtype {split_sizes_dtype!r}; use int64 or int32", key="--split-dtype")
    if recipe in FUSABLE and arch != "sm100":
        raise UsageError(f"{recipe} needs compute capability 10.x (sm100); got {arch}", key="--arch")
    if path == "fused":
        if recipe not in FUSABLE:
            raise UsageError(
                f"TE never fuses {recipe}: the fused grouped MLP needs an MXFP8 or NVFP4 recipe "
                "(ops/fused/grouped_mlp.py:970); use --path unfused-split or unfused-grouped",
                key="--path",
            )
        if arch != "sm100":
            raise UsageError(f"the fused grouped MLP runs on sm100 only, got {arch}", key="--arch")
        for value, flag in ((hidden, "--hidden"), (ffn, "--ffn")):
            if value % FUSED_DIM_MULTIPLE:
                raise UsageError(
                    f"{value} is not a multiple of {FUSED_DIM_MULTIPLE}: TE does not fuse then "
                    "(validate_grouped_mlp_dims, ops/fused/grouped_mlp.py:911-941); use --path unfused-grouped",
                    key=flag,
                )
        if tokens % FUSED_TOKEN_MULTIPLE:
            raise UsageError(
                f"{tokens} tokens: the fused grouped MLP raises unless total tokens % {FUSED_TOKEN_MULTIPLE} == 0 "
                "(ops/fused/grouped_mlp.py:1203); use a multiple of 128 or --path unfused-grouped",
                key="--tokens",
            )
        if dtype != "bf16":
            raise UsageError("the fused grouped MLP is modelled for bf16 only", key="--dtype")
    if path == "unfused-grouped":
        if recipe == "fp8-delayed":
            raise UsageError(
                "DelayedScaling always takes the split-quantize path "
                "(is_op_fuser_grouped_tensor_path_supported, ops/basic/grouped_linear.py:74-132)",
                key="--path",
            )
        if recipe == "fp8-block" and arch != "sm90":
            raise UsageError("block-FP8 grouped tensors are used on sm90 only (grouped_linear.py:74-132)", key="--arch")
        if dtype != "bf16":
            raise UsageError("the grouped-tensor path needs bf16/fp16 (grouped_linear.py:74-132)", key="--dtype")
    if recipe in DIM_MULTIPLE:
        mult, why = DIM_MULTIPLE[recipe]
        for value, flag in ((hidden, "--hidden"), (ffn, "--ffn")):
            if value % mult:
                raise UsageError(f"{value} is not a multiple of {mult} for {recipe}: {why}", key=flag)
    align = ALIGNMENT[recipe]
    if splits is None:
        split_tuple = default_splits_tuple(tokens, groups, align)
    else:
        split_list = [int(s) for s in splits]
        validate_splits(split_list, tokens, groups, align, key="--splits")
        split_tuple = tuple(split_list)
    # Config(recipe=recipe, ...), made without the frozen dataclass's per-field __setattr__ (the
    # estimator's hot path); the fields are set in declaration order, as __init__ sets them.
    c = object.__new__(Config)
    c.__dict__.update(
        recipe=recipe,
        tokens=tokens,
        hidden=hidden,
        ffn=ffn,
        groups=groups,
        splits=split_tuple,
        path=path,
        arch=arch,
        dtype=dtype,
        dense_single_group=dense_single_group,
        probs_dtype=probs_dtype,
        split_sizes_dtype=split_sizes_dtype,
    )
    return c


@functools.lru_cache(maxsize=1024)
def default_splits_tuple(tokens: int, groups: int, align: int) -> tuple[int, ...]:
    """:func:`memaudit.spec.default_splits` as a tuple, kept for the last 1,024 (tokens, groups,
    alignment): a sweep asks for the same splits for each recipe of one alignment and each path
    (``default_splits_tuple.cache_clear()`` forgets them)."""
    return tuple(default_splits(tokens, groups, align))
