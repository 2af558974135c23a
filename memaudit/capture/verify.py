"""Ground truth from the CUDA caching allocator: does the allocator's growth match the rows?

``torch.cuda.memory_allocated()`` is read when the capture starts and when it ends (a host-side
counter: no device sync). What the captured forward left allocated should be exactly the new
storages the rows name (saved tensors kept on the device, ``ctx`` attributes, unhooked saves)
plus the outputs' storages, each rounded up to the allocator's 512-byte block. Storages that
already existed when the capture started (parameters, inputs) are found by a scan of the live
tensors at start and left out. ``hidden_bytes`` is what the allocator holds beyond that: memory
the forward kept that memaudit did not see (a workspace, a cache, a tensor held elsewhere).

The 512-byte rounding is the caching allocator's default (``kMinBlockSize``); with
``PYTORCH_CUDA_ALLOC_CONF`` options that change rounding (``roundup_power2_divisions``) blocks are
larger and ``hidden_bytes`` says so.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import torch

BLOCK = 512


def round_block(nbytes: int) -> int:
    """Bytes the caching allocator reserves for a storage of ``nbytes`` (0 stays 0)."""
    return 0 if nbytes == 0 else -(-nbytes // BLOCK) * BLOCK


def _cuda_storages() -> dict[int, Any]:
    found: dict[int, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.device.type == "cuda":
                try:
                    ref = weakref.ref(obj.untyped_storage())
                except (RuntimeError, NotImplementedError, TypeError):
                    continue
                found[id(ref)] = ref
    return found


class AllocatorCheck:
    """Allocator counters around a capture; :meth:`result` compares them with the rows."""

    def __init__(self) -> None:
        self.available = torch.cuda.is_available()
        self.before = torch.cuda.memory_allocated() if self.available else 0
        self.existing = _cuda_storages() if self.available else {}
        self.after: int | None = None

    def stop(self) -> None:
        if self.available:
            self.after = torch.cuda.memory_allocated()

    def result(self, kept: dict[int, tuple[Any, int]], outputs: Any) -> dict[str, Any]:
        """``kept``: id -> (storage ref, nbytes) of the device storages the rows name."""
        if not self.available:
            return {"available": False, "reason": "no CUDA device: the allocator check needs one"}
        if self.after is None:
            return {"available": False, "reason": "report() ran before the capture ended"}
        from memaudit.capture.recorder import iter_tensors

        storages = dict(kept)
        for t in iter_tensors(outputs):
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            ref = weakref.ref(st)
            storages.setdefault(id(ref), (ref, st.nbytes()))
        accounted = 0
        for key, (ref, nbytes) in storages.items():
            st = ref()
            if st is None or key in self.existing or st.device.type != "cuda":
                continue
            accounted += round_block(nbytes)
        delta = self.after - self.before
        return {
            "available": True,
            "allocated_before": self.before,
            "allocated_after": self.after,
            "allocated_delta": delta,
            "accounted_bytes": accounted,
            "hidden_bytes": delta - accounted,
            "block_bytes": BLOCK,
        }
