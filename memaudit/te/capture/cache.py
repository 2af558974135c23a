"""TE's cached FP8 weights: the saved buffers that are a module's weight workspace (te-internals §13).

TE's modules keep the quantized copy of each weight in ``module._fp8_workspaces`` (a dict keyed by
a cache name such as ``weight``) when the caller passes ``is_first_microbatch``, and save that very
copy for backward (te-internals §13.1). Its buffers outlive the step: the first microbatch makes
them, later ones reuse them, and backward frees none. A row whose storage is one of those buffers'
is marked ``Row.cached`` and counted apart from ``saved_bytes`` (``Totals.cached_bytes``).

Found by storage identity, never by name or shape: the workspaces of every module the capture saw
called (:meth:`memaudit.capture.recorder.Capture.modules_called`), read when the report is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from memaudit.report import Row, replace_row

if TYPE_CHECKING:
    from memaudit.capture.recorder import Capture

WORKSPACES = "_fp8_workspaces"
"""The attribute of a TE module holding its cached quantized weights (te-internals §13.1)."""


def workspace_buffers(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors a cached workspace holds its bytes in: a storage object's buffer attributes
    (``_data``, ``_transpose``, ``_scale_inv``, ``_rowwise_data``, ...: every tensor in its
    ``__dict__``), or the tensor itself where it is a plain one (a debug workspace)."""
    attrs = getattr(obj, "__dict__", None)
    found = False
    if attrs is not None:
        for value in list(attrs.values()):
            if isinstance(value, torch.Tensor) and value is not obj:
                found = True
                yield value
    if not found and type(obj) is torch.Tensor:
        yield obj


def _storage_keys(t: torch.Tensor) -> tuple[int, tuple[str, int] | None] | None:
    """(id of the storage object, (device, data pointer)) of ``t``, or None where it has no storage."""
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    try:
        ptr = st.data_ptr()
        where = (str(st.device), ptr) if ptr else None
    except (RuntimeError, NotImplementedError, TypeError):
        where = None
    return id(st), where


def cached_storages(cap: Capture) -> dict[str, str]:
    """Storage name (as the last report's live rows name it) -> what holds it across steps
    (``fp8 weight cache of fc1``), for every buffer of every module's cached workspace."""
    by_id: dict[int, str] = {}
    by_ptr: dict[tuple[str, int], str] = {}
    for name, refs in cap.row_storages().items():
        for ref in refs:
            st = ref()
            if st is None:
                continue
            by_id[id(st)] = name
            try:
                ptr = st.data_ptr()
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            if ptr:
                by_ptr[(str(st.device), ptr)] = name
    if not by_id:
        return {}
    out: dict[str, str] = {}
    for module_name, module in cap.modules_called():
        workspaces = getattr(module, WORKSPACES, None)
        if not isinstance(workspaces, dict) or not workspaces:
            continue
        for key, workspace in list(workspaces.items()):
            what = f"fp8 weight cache of {module_name}" + ("" if key == "weight" else f" ({key})")
            for buf in workspace_buffers(workspace):
                keys = _storage_keys(buf)
                if keys is None:
                    continue
                storage = by_id.get(keys[0]) or (by_ptr.get(keys[1]) if keys[1] is not None else None)
                if storage is not None:
                    out.setdefault(storage, what)
    return out


def mark_cached(rows: list[Row], cap: Capture) -> list[Row]:
    """``rows`` with ``cached`` set on each device row whose storage a cached workspace holds, and on
    a container row whose every buffer row is so marked (the workspace saved whole)."""
    cached = cached_storages(cap)
    if not cached:
        return rows
    out = list(rows)
    children: dict[int, list[int]] = {}
    for r in out:
        if r.storage is not None and r.resides == "device" and r.storage in cached and r.cached is None:
            out[r.index] = replace_row(r, cached=cached[r.storage])
        if r.container_index is not None:
            children.setdefault(r.container_index, []).append(r.index)
    for parent, kids in children.items():
        marks = {out[k].cached for k in kids}
        if len(marks) == 1 and None not in marks and out[parent].cached is None:
            out[parent] = replace_row(out[parent], cached=marks.pop())
    return out
