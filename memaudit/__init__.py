"""memaudit: what a layer keeps alive for backward, per tensor, and a CI gate on it.

Attributes load lazily, so that importing memaudit (e.g. its pytest plugin) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nothing imported at run time: the command's SIGINT handler comes first (memaudit.cli)
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Capture": "memaudit.capture",
    "capture": "memaudit.capture",
    "CaseReport": "memaudit.report",
    "Report": "memaudit.report",
    "Row": "memaudit.report",
    "Totals": "memaudit.report",
}

__all__ = ["Capture", "CaseReport", "Report", "Row", "Totals", "__version__", "capture"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memaudit' has no attribute {name!r}")
