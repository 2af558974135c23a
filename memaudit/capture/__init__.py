"""Stage 1 of the pipeline: record what autograd saves (hooks, graph walk, plain-tensor metadata).

``capture()`` and :class:`Capture` are the public entry points; see :mod:`memaudit.capture.recorder`.
"""

from memaudit.capture.recorder import Capture, Plugin, capture, iter_tensors

__all__ = ["Capture", "Plugin", "capture", "iter_tensors"]
