"""Analytic model of what TE 2.20.2 saves for backward in the grouped MLP (``memaudit estimate``).

``te.ops.Sequential(GroupedLinear(G, H, 2F), ScaledSwiGLU, GroupedLinear(G, F, H))`` saves, per
path, a set of buffers whose shapes follow from (T, H, F, G, splits) and TE's layout rules alone.
The estimate is a list of :class:`~memaudit.report.Row` s in the format ``memaudit run`` measures,
so budgets and ``compare`` work on estimates too. Pure arithmetic: no torch, no TE.

Every rule cites TE 2.20.2 source (paths relative to ``transformer_engine/pytorch/``; C++ from the
``transformer_engine_torch`` sdist ``csrc/``) and docs/internals/te-internals.md sections.
Where TE and this package disagree, TE is right: ``tests/te/test_estimate_te.py`` checks the shape
rules against TE's own classes on CPU.

Modules: ``config`` (inputs, paths, variants, validation), ``shapes`` (TE's shape, padding and
allocation rules per recipe), ``buffers`` (the buffer list, variant filter, numbering into rows),
``model`` (what each path saves), ``rows`` (estimates as CaseReports, ``expected_rows``),
``diff`` (variant differences), ``closed_form`` (the totals without rows) and ``sweep`` (sweep points).
"""

from __future__ import annotations

from memaudit.te.estimate.closed_form import FastTotals, estimate_totals
from memaudit.te.estimate.config import (
    ARCHS,
    DEFAULT_ARCH_HELP,
    DEFAULT_PATH_HELP,
    PATHS,
    TARGET,
    TE_VERSION,
    VARIANTS,
    Config,
    default_path,
    parse_range,
    resolve,
)
from memaudit.te.estimate.diff import DiffEntry, bytes_by_kind, diff_cases
from memaudit.te.estimate.rows import estimate, estimate_config, estimate_report, expected_rows, make_spec
from memaudit.te.estimate.shapes import (
    ITEMSIZE,
    SINGLE_CONTAINER,
    SLOTS,
    grouped_buffers_cpp,
    scale_shape,
    single_buffers,
)
from memaudit.te.estimate.sweep import SweepPoint, skipped_case, sweep_point

HELP = (  # memaudit estimate --help
    "Estimate what TE 2.20.2 saves for backward in the grouped MLP "
    "(GroupedLinear(G, H, 2F), ScaledSwiGLU, GroupedLinear(G, F, H)) from shapes and TE's layout rules alone.\n\n"
    "Paths: fused (CuTeDSL fused op, sm100, MXFP8/NVFP4), unfused-grouped (graph-safe grouped tensors), "
    "unfused-split (tex.split_quantize; what an H200 with cuBLASLt < 13.4 runs). Default: fused for mxfp8/nvfp4 "
    "when hidden and ffn are multiples of 64 (else unfused-grouped); unfused-split for bf16 and FP8.\n\n"
    "Variants: te-2.20 (what 2.20.2 saves), pr3545 (NVFP4 fused-path rowwise input data and scales pruned), "
    "ideal (only what the backward GEMMs read)."
)


__all__ = [
    "ARCHS",
    "DEFAULT_ARCH_HELP",
    "DEFAULT_PATH_HELP",
    "ITEMSIZE",
    "PATHS",
    "SINGLE_CONTAINER",
    "SLOTS",
    "TARGET",
    "TE_VERSION",
    "VARIANTS",
    "Config",
    "DiffEntry",
    "FastTotals",
    "SweepPoint",
    "bytes_by_kind",
    "default_path",
    "diff_cases",
    "estimate",
    "estimate_config",
    "estimate_report",
    "estimate_totals",
    "expected_rows",
    "grouped_buffers_cpp",
    "make_spec",
    "parse_range",
    "resolve",
    "scale_shape",
    "single_buffers",
    "skipped_case",
    "sweep_point",
]
