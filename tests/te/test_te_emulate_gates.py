"""The capability gates under ``emulated_arch``, against TE 2.20.2's real gate code on CPU.

TE's own ``is_*_available`` functions run: only the compute capability they read is emulated,
so the answers and reasons are TE's (te-internals recipe availability table).
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch  # noqa: F401  (TE's import needs torch loaded first)

try:
    import transformer_engine.pytorch as te
    import transformer_engine.pytorch.quantization as quantization
    import transformer_engine.pytorch.utils as te_utils
except Exception as exc:  # noqa: BLE001 - not installed, or broken
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from memaudit.errors import UsageError  # noqa: E402
from memaudit.te.emulate.gates import GATE_NAME, SUPPORT_CACHES, emulated_arch  # noqa: E402

pytestmark = pytest.mark.te

REAL_GATE = te_utils.get_device_compute_capability
"""TE's own function, taken before any test emulates anything."""

MXFP8_REASON = "Device compute capability 10.0 or higher required for MXFP8 execution."
NVFP4_REASON = "Device compute capability 10.0 or higher required for NVFP4 execution."


def _bindings() -> dict[str, object]:
    return {
        name: getattr(m, GATE_NAME)
        for name, m in sys.modules.items()
        if name.startswith("transformer_engine") and m is not None and hasattr(m, GATE_NAME)
    }


def test_sm100_makes_te_say_yes_and_sm90_gives_tes_own_reasons() -> None:
    with emulated_arch("sm100") as cc:
        assert cc == (10, 0)
        assert te.is_mxfp8_available(return_reason=True) == (True, "")
        assert te.is_nvfp4_available(return_reason=True) == (True, "")
        assert quantization.FP8GlobalStateManager.is_nvfp4_available() == (True, "")
    with emulated_arch("sm90"):
        assert te.is_mxfp8_available(return_reason=True) == (False, MXFP8_REASON)
        assert te.is_nvfp4_available(return_reason=True) == (False, NVFP4_REASON)
        assert te.is_fp8_available(return_reason=True) == (True, "")


def test_everything_is_restored_on_exit_even_after_an_error() -> None:
    before_bindings = _bindings()
    before_caches = {n: getattr(quantization, n) for n in SUPPORT_CACHES}
    assert len(before_bindings) >= 3, before_bindings  # utils, quantization and the GroupedLinear op at least
    with pytest.raises(RuntimeError, match="inside"), emulated_arch("sm100"):
        assert all(f() == (10, 0) for f in _bindings().values())
        raise RuntimeError("inside")
    assert _bindings() == before_bindings
    assert {n: getattr(quantization, n) for n in SUPPORT_CACHES} == before_caches
    assert te_utils.get_device_compute_capability is REAL_GATE


def test_a_module_imported_inside_keeps_the_real_gate_afterwards() -> None:
    name = "transformer_engine.pytorch.attention.fused_mla_q_uproj"
    sys.modules.pop(name, None)
    try:
        with emulated_arch("sm100"):
            mod = importlib.import_module(name)
            assert getattr(mod, GATE_NAME)() == (10, 0)
    except ImportError as exc:  # pragma: no cover - that module needs more than CPU TE gives
        pytest.skip(f"{name} does not import here: {exc}")
    assert getattr(mod, GATE_NAME) is REAL_GATE and te_utils.get_device_compute_capability is REAL_GATE


def test_unknown_architecture_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="sm70"), emulated_arch("sm70"):
        pass
