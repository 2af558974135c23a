"""The environment a report was measured in: versions and device, nothing machine-specific.

Imports torch only when asked for an environment (the pytest plugin reads ``libraries()`` early).
"""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass
from typing import Any

import memaudit
from memaudit.extension import extensions


def library_probes() -> tuple[str, ...]:
    """Modules whose ``probe()`` adds a library's versions (each imports its library only if already
    imported) and whose ``LIBRARY`` names it: the extensions' (``Extension.environment``)."""
    return tuple(e.environment for e in extensions() if e.environment is not None)


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
    package: str = ""
    """Its distribution name as ``memaudit --version`` prints it (``transformer-engine``)."""


def libraries() -> tuple[Library, ...]:
    """Every probed library, in probe order."""
    return tuple(importlib.import_module(p).LIBRARY for p in library_probes())


def library_versions(*, imported_only: bool = False) -> dict[Library, str | None]:
    """Each probed library's version (None where not installed or, with ``imported_only``, where
    the caller has not imported it)."""
    out: dict[Library, str | None] = {}
    for p in library_probes():
        module = importlib.import_module(p)
        out[module.LIBRARY] = module.version(imported_only=imported_only)
    return out


def rule_versions(*, imported_only: bool = False) -> dict[str, str]:
    """The versions budget ``known_failure`` entries match, by their key (``{"te": "2.20.2"}``)."""
    return {
        lib.rule_key: v
        for lib, v in library_versions(imported_only=imported_only).items()
        if lib.rule_key is not None and v is not None
    }


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
    for probe in library_probes():
        env.update(importlib.import_module(probe).probe())
    return env
