"""TE 2.20.2's capability gates as an emulated architecture sees them.

Inside :func:`emulated_arch`, every TE module that bound ``get_device_compute_capability``
(``utils.py:159``, imported by name in ``quantization.py``, ``ops/basic/grouped_linear.py``,
``ops/fused/grouped_mlp.py`` and others) sees the emulated compute capability, and TE's cached
recipe-support answers (``quantization.py:50-53``) are recomputed by TE's own ``_compute_*``
functions, so the reasons are TE's own strings. On exit (also when the block raises) every
binding and cache is put back, including bindings made by modules imported inside the block.

Only the gates: no kernel is replaced, and the fused grouped-MLP op's ``is_supported`` caches
and import-time registration are not touched yet.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memaudit.errors import UsageError

ARCHS = {"sm90": (9, 0), "sm100": (10, 0)}
"""Emulated architectures and their compute capability."""

SUPPORT_CACHES = ("_FP8_SUPPORT", "_MXFP8_SUPPORT", "_NVFP4_SUPPORT", "_FP8_BLOCK_SCALING_SUPPORT")
"""Module globals of ``transformer_engine.pytorch.quantization`` caching each recipe's (ok, reason)."""

SUPPORT_CHECKS = ("check_fp8_support", "check_mxfp8_support", "check_nvfp4_support", "check_fp8_block_scaling_support")
"""TE 2.14's ``quantization.py``: the same answers as lru-cached functions (no module globals);
their caches are cleared on entry and exit."""

GATE_NAME = "get_device_compute_capability"


def _te_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items()) if m is not None and name.startswith("transformer_engine")]


@contextmanager
def emulated_arch(arch: str) -> Iterator[tuple[int, int]]:
    """TE's gates answer as on ``arch`` (``sm90``, ``sm100``) inside the block; yields its capability."""
    if arch not in ARCHS:
        raise UsageError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHS)}", key="--arch")
    capability = ARCHS[arch]
    import transformer_engine.pytorch.quantization as quantization
    import transformer_engine.pytorch.utils as te_utils

    original = getattr(te_utils, GATE_NAME)

    def get_device_compute_capability() -> tuple[int, int]:
        return capability

    bound = [m for m in _te_modules() if vars(m).get(GATE_NAME) is original]
    caches = {name: getattr(quantization, name) for name in SUPPORT_CACHES if hasattr(quantization, name)}
    checks: list[Any] = [f for name in SUPPORT_CHECKS if hasattr(f := getattr(quantization, name, None), "cache_clear")]
    try:
        for module in bound:
            setattr(module, GATE_NAME, get_device_compute_capability)
        for name in caches:
            setattr(quantization, name, None)
        for check in checks:
            check.cache_clear()
        yield capability
    finally:
        for module in _te_modules():  # also modules that bound the stand-in while inside
            if vars(module).get(GATE_NAME) is get_device_compute_capability:
                setattr(module, GATE_NAME, original)
        for name, value in caches.items():
            setattr(quantization, name, value)
        for check in checks:
            check.cache_clear()
