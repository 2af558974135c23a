"""The environment a report was measured in: versions and device, nothing machine-specific."""

from __future__ import annotations

import importlib
import platform
from typing import Any

import torch

import memaudit

LIBRARY_PROBES = ("memaudit.te.environment",)
"""Modules whose ``probe()`` adds a library's versions (each imports its library only if already imported)."""


def device_class(device: str) -> str:
    """'cpu', or 'sm90' / 'sm100' for a CUDA device."""
    if device.startswith("cuda") and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm{major}{minor}"
    return "cpu"


def environment(device: str) -> dict[str, Any]:
    """Deterministic facts: versions, device name and class; TE details if TE is imported."""
    env: dict[str, Any] = {
        "memaudit": memaudit.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": "cpu",
        "device_class": device_class(device),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        try:
            env["cudnn"] = torch.backends.cudnn.version()
        except RuntimeError:  # TE's wheel may load another cuDNN than torch's
            env["cudnn"] = None
    for probe in LIBRARY_PROBES:
        env.update(importlib.import_module(probe).probe())
    return env
