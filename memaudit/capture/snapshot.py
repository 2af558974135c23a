"""Allocator snapshots whose saved-tensor blocks carry memaudit's row names.

``capture(snapshot=PATH)`` records the CUDA caching allocator's history from entering the capture
to its first ``report()``. That report names each live saved buffer's allocation after its row
(``fc1.input data columnwise nvfp4``) and writes the snapshot, a pickle that PyTorch's
``memory_viz`` opens. The hook itself does nothing more: names are attached at ``report()`` time,
when they are final, so the pack hook's cost is unchanged.

Two ways to attach a name, both used where available:

- ``torch.cuda.memory._annotate_tensor`` (torch 2.14 and later) records an ``annotate`` trace
  entry on the allocation; ``memory_viz`` lists it beside the allocation's own metadata.
- A frame ``memaudit: <name>`` put first in the stack of the allocation's trace entry and of its
  block in the segment list: every ``memory_viz`` version shows it at the top of the block's stack.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

MAX_ENTRIES = 200_000
"""Allocator trace entries kept (a ring buffer); enough for a grouped-MLP forward many times over."""

FRAME_FILE = "memaudit"
"""The file name of the frame that carries a row's name in the snapshot."""


class SnapshotUnavailable(RuntimeError):
    """Allocator snapshots need the CUDA caching allocator; raised where it is absent."""


def unavailable_reason() -> str | None:
    """Why an allocator snapshot cannot be recorded here, or None when it can."""
    if not torch.cuda.is_available():
        return "needs the CUDA caching allocator: no CUDA device here (torch.cuda.is_available() is False)"
    backend = torch.cuda.memory.get_allocator_backend()
    if backend != "native":
        return (
            f"needs the CUDA caching allocator: this process uses the {backend!r} allocator backend "
            "(PYTORCH_CUDA_ALLOC_CONF)"
        )
    return None


def row_label(row: Any) -> str:
    """A row's name as the snapshot shows it: operand, kind, orientation, format (those set)."""
    parts = [row.operand or row.slot or f"row {row.index}", row.kind, row.orientation, row.format]
    return " ".join(str(p) for p in parts if p)


@dataclass
class SnapshotResult:
    """What one written snapshot holds: ``labelled`` allocations named after rows (storage name ->
    the label and the allocation's requested bytes), and ``unlabelled`` rows' storages that had no
    live block to name (freed before ``report()``, or not from the caching allocator)."""

    path: str
    labelled: dict[str, tuple[str, int]] = field(default_factory=dict)
    unlabelled: list[str] = field(default_factory=list)
    native_annotations: bool = False


class AllocatorHistory:
    """One recording of the allocator's history, from :meth:`start` to :meth:`write` (or :meth:`stop`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise SnapshotUnavailable(f"memory snapshot {reason}")
        self.path = Path(path)
        self.recording = False
        self.result: SnapshotResult | None = None

    def start(self) -> None:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=MAX_ENTRIES)
        self.recording = True

    def stop(self) -> None:
        if self.recording:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False

    def write(self, storages: list[tuple[str, Any, list[str]]]) -> SnapshotResult:
        """Name each storage's allocation and write the snapshot atomically; stop recording.

        ``storages``: (memaudit's storage name, the untyped storage, its rows' labels) per live
        device storage the report names.
        """
        try:
            annotate = getattr(torch.cuda.memory, "_annotate_tensor", None)
            named: dict[int, tuple[str, str]] = {}
            for sname, st, labels in storages:
                if st is None or st.device.type != "cuda" or st.nbytes() == 0:
                    continue
                label = "; ".join(dict.fromkeys(labels))
                named[st.data_ptr()] = (sname, label)
                if annotate is not None:
                    annotate(torch.empty(0, dtype=torch.uint8, device=st.device).set_(st), label)
            snap = torch.cuda.memory._snapshot()
        finally:
            self.stop()
        result = SnapshotResult(str(self.path), native_annotations=annotate is not None)
        _name_blocks(snap, named, result)
        _write_atomically(self.path, snap)
        self.result = result
        return result


def _frame(label: str) -> dict[str, Any]:
    return {"filename": FRAME_FILE, "line": 0, "name": label}


def _name_blocks(snap: dict[str, Any], named: dict[int, tuple[str, str]], result: SnapshotResult) -> None:
    """Put each name first in the frames of its live block and of its latest ``alloc`` entry."""
    found: set[int] = set()
    for seg in snap.get("segments", []):
        for block in seg.get("blocks", []):
            hit = named.get(block.get("address"))
            if hit is not None and block.get("state") == "active_allocated":
                block["frames"] = [_frame(hit[1]), *block.get("frames", [])]
                result.labelled[hit[0]] = (hit[1], int(block.get("requested_size", block.get("size", 0))))
                found.add(block["address"])
    for trace in snap.get("device_traces", []):
        latest: dict[int, dict[str, Any]] = {}
        for entry in trace:
            if entry.get("action") == "alloc" and entry.get("addr") in found:
                latest[entry["addr"]] = entry
        for addr, entry in latest.items():
            entry["frames"] = [_frame(named[addr][1]), *entry.get("frames", [])]
    result.unlabelled = sorted(s for ptr, (s, _) in named.items() if ptr not in found)


def _write_atomically(path: Path, snap: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
