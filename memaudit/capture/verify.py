"""Ground truth from the CUDA caching allocator: does the allocator's growth match the rows?

The allocator's counters are read when the capture starts and when it ends (host-side counters:
no device sync). ``requested_bytes.all.current`` counts the bytes each live allocation asked for,
before any rounding, so the forward's growth should be exactly the new storages the rows name
(saved tensors kept on the device, ``ctx`` attributes, unhooked saves) plus the outputs' storages.
Storages that already existed when the capture started (parameters, inputs) are found by a scan of
the live tensors at start and left out. ``hidden_bytes`` is the growth beyond that: memory the
forward kept that memaudit did not see (a workspace, a cache, a tensor held elsewhere).

``memory_allocated()`` (``allocated_delta``) is reported beside it: it counts whole blocks, which
are rounded up to 512 bytes (``kMinBlockSize``) and, for requests over 1 MiB served from a cached
block that is not split, larger still. Where the allocator has no ``requested_bytes`` counter
(older torch), the check falls back to ``memory_allocated()`` with 512-byte rounding per storage
and says so (``counter``).
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


def cuda_storages() -> dict[int, Any]:
    """id -> weak reference of the storage of every CUDA tensor the garbage collector tracks."""
    found: dict[int, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for obj in gc.get_objects():
            try:  # a weakref.proxy whose referent is gone (Dynamo keeps some) raises on any look
                if not (isinstance(obj, torch.Tensor) and obj.device.type == "cuda"):
                    continue
                ref = weakref.ref(obj.untyped_storage())
            except (ReferenceError, RuntimeError, NotImplementedError, TypeError):
                continue
            found[id(ref)] = ref
    return found


REQUESTED = "requested_bytes.all.current"


def _counters() -> tuple[int | None, int]:
    """(requested bytes or None where torch has no such counter, allocated bytes)."""
    return torch.cuda.memory_stats().get(REQUESTED), torch.cuda.memory_allocated()


class AllocatorCheck:
    """Allocator counters around a capture; :meth:`result` compares them with the rows."""

    def __init__(self) -> None:
        self.available = torch.cuda.is_available()
        self.existing = cuda_storages() if self.available else {}
        self.requested_before, self.before = _counters() if self.available else (None, 0)
        self.after: int | None = None
        self.requested_after: int | None = None

    def stop(self) -> None:
        if self.available:
            self.requested_after, self.after = _counters()

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
        exact = self.requested_before is not None and self.requested_after is not None
        accounted = 0
        for key, (ref, nbytes) in storages.items():
            st = ref()
            if st is None or key in self.existing or st.device.type != "cuda":
                continue
            accounted += nbytes if exact else round_block(nbytes)
        delta = self.after - self.before
        grown = self.requested_after - self.requested_before if exact else delta  # type: ignore[operator]
        return {
            "available": True,
            "counter": REQUESTED if exact else "memory_allocated (512-byte blocks)",
            "requested_delta": grown if exact else None,
            "allocated_before": self.before,
            "allocated_after": self.after,
            "allocated_delta": delta,
            "accounted_bytes": accounted,
            "hidden_bytes": grown - accounted,
            "block_bytes": BLOCK,
        }
