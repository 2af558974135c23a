"""The environment a report was measured in: versions and device, nothing machine-specific.

Imports torch only when asked for an environment (the pytest plugin reads ``libraries()`` early).
"""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass
from typing import Any

import memaudit

LIBRARY_PROBES = ("memaudit.te.environment",)
"""Modules whose ``probe()`` adds a library's versions (each imports its library only if already
imported) and whose ``LIBRARY`` names it."""


@dataclass(frozen=True)
class Library:
    """A library whose version can change what is saved: how reports and comments name it."""

    key: str
    """Its key in a report's ``environment``."""
    short: str
    """Its name in one-line summaries (PR comment footers)."""
    name: str
    """Its name in sentences."""
    rule_key: str | None = None
    """The key of budget ``known_failure`` entries that match its version (``te``), if any."""


def libraries() -> tuple[Library, ...]:
    """Every probed library, in probe order."""
    return tuple(importlib.import_module(p).LIBRARY for p in LIBRARY_PROBES)


def device_class(device: str) -> str:
    """'cpu', 'meta', or 'sm90' / 'sm100' for a CUDA device."""
    import torch

    if device == "meta":
        return "meta"

    if device.startswith("cuda") and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm{major}{minor}"
    return "cpu"


def environment(device: str) -> dict[str, Any]:
    """Deterministic facts: versions, device name and class; each probed library's details."""
    import torch

    env: dict[str, Any] = {
        "memaudit": memaudit.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": "meta" if device == "meta" else "cpu",
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
