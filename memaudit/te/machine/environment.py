"""TE's facts for a report's environment, and TE's version (imports TE only if already imported).

No torch or TE import at module level: the pytest plugin asks for the version at collection.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any

from memaudit.environment import Library

DIST = "transformer_engine"
LIBRARY = Library(
    key="transformer_engine", short="TE", name="TransformerEngine", rule_key="te", package="transformer-engine"
)


def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def imported() -> bool:
    """True when the caller imported ``transformer_engine.pytorch`` (memaudit never does on its own)."""
    return "transformer_engine.pytorch" in sys.modules


def te_version(*, imported_only: bool = False) -> str | None:
    """TE's installed version (TE's Python modules carry none); None where not installed, or,
    with ``imported_only``, where the caller has not imported TE."""
    if imported_only and DIST not in sys.modules:
        return None
    version = package_version(DIST)
    if version is None and imported():
        version = getattr(sys.modules["transformer_engine.pytorch"], "__version__", None)
    return version


def version(*, imported_only: bool = False) -> str | None:
    """:func:`te_version` (the environment probe's interface, :mod:`memaudit.environment`)."""
    return te_version(imported_only=imported_only)


def probe() -> dict[str, Any]:
    """TE's environment keys: its version always; cuBLASLt and cuDNN-frontend versions once imported."""
    env: dict[str, Any] = {DIST: te_version()}
    if not imported():
        return env
    try:
        import transformer_engine_torch as tex

        v = int(tex.get_cublasLt_version())
        env["cublaslt"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    except Exception:  # noqa: BLE001 - no CUDA driver on CPU machines
        env["cublaslt"] = None
    env["cudnn_frontend"] = package_version("nvidia-cudnn-frontend")
    return env
