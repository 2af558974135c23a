"""Stage 1 of the pipeline: record what autograd saves (hooks, graph walk, plain-tensor metadata).

``capture()`` and :class:`Capture` are the public entry points; see :mod:`memaudit.capture.recorder`.
This package is also callable, so ``memaudit.capture()`` is ``capture()`` even though importing
the package makes ``memaudit.capture`` the module.
"""

import sys
import types

from memaudit.capture.recorder import Capture, Plugin, capture, iter_tensors
from memaudit.capture.snapshot import SnapshotUnavailable

__all__ = ["Capture", "Plugin", "SnapshotUnavailable", "capture", "iter_tensors"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204 - capture()'s signature
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
