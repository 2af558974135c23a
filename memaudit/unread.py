"""``--unread``: whether backward reads each saved buffer, by two independent methods.

- **observed** (:func:`observe`): one backward under :class:`memaudit.capture.reads.Observer`
  (ATen ops, the libraries' kernel entry points, C calls). Runs under real and emulated kernels.
- **poisoned** (:func:`poisoned`): the case is rebuilt and run again with the contents of groups
  of saved buffers overwritten before backward (two fills: 0xFF bytes, which are NaN in every
  float and FP8 format, and random bytes); a buffer whose poisoning leaves every gradient bit for
  bit as two clean runs gave is unread. Needs real kernels (values), a deterministic backward,
  and never poisons integer buffers (an index out of range asserts on a GPU). Groups that change
  the result are split, so an unread buffer costs about log2(rows) backwards, a read one one.

Where both run they must agree: :func:`combine` turns a row one calls read and the other unread
into a disagreement (the case's error), never a silent choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memaudit.capture import reads
from memaudit.capture.reads import READ, UNKNOWN, UNREAD
from memaudit.extension import read_watchers
from memaudit.report import Row

if TYPE_CHECKING:
    import torch

    from memaudit.capture import Capture

METHODS = ("observed", "poisoned", "both")
"""``run --unread-method``: which methods give the verdicts."""

PAYLOAD_KINDS = frozenset({"tensor", "data", "scale_inv", "amax", "scale"})
"""Row kinds the poisoned method may overwrite (float data, FP8/FP4 bytes, scales); integer
metadata (indices, offsets, split sizes) is never poisoned."""

FILLS = ("ff", "random")

RESIDES_WHY = {
    "recomputed": "not kept: checkpointing recomputes it in backward (the recomputed tensor is a new buffer)",
    "host": "kept on the host by another hook pair (save_on_cpu): backward reads the copy it unpacks",
    "unknown": "where it is kept is unknown",
}
"""Why a row not kept on its device gets no verdict of its own."""

Verdicts = dict[int, tuple[str, str | None]]
"""Row index -> (verdict, read_by or why)."""


def watchers() -> list[Callable[[], Any]]:
    """The ``reads`` watcher of every extension whose library the caller has imported."""
    return read_watchers()


@contextmanager
def observe(cap: Capture) -> Iterator[reads.Observer]:
    """Observe the block (a backward) for the rows of ``cap``'s last report."""
    obs = reads.Observer(cap.row_storages())
    with reads.observing(obs, watchers()):
        yield obs


def observed_verdicts(obs: reads.Observer, rows: Sequence[Row]) -> Verdicts:
    """A verdict for every row from what ``obs`` saw (containers: from their buffers)."""
    out: Verdicts = {}
    for row in rows:
        if row.kind == "container":
            continue
        if row.resides != "device":
            out[row.index] = (UNKNOWN, RESIDES_WHY.get(row.resides, f"kept {row.resides}: its reads are not followed"))
        else:
            out[row.index] = obs.verdict(row.storage)
    _containers(rows, out)
    return out


def _containers(rows: Sequence[Row], out: Verdicts) -> None:
    """A container row (a tensor subclass saved whole, 0 bytes) is read if any of its buffers is,
    unread if all are, else unknown."""
    inner: dict[int, list[str]] = {}
    for row in rows:
        if row.container_index is not None and row.index in out:
            inner.setdefault(row.container_index, []).append(out[row.index][0])
    for row in rows:
        if row.kind != "container":
            continue
        got = inner.get(row.index, [])
        if READ in got:
            out[row.index] = (READ, "a buffer it holds was read")
        elif got and all(v == UNREAD for v in got):
            out[row.index] = (UNREAD, None)
        else:
            out[row.index] = (UNKNOWN, "its buffers' verdicts" + (" are unknown" if got else ": none"))


def poisonable(rows: Sequence[Row]) -> list[str]:
    """Storage names the poisoned method may overwrite: device-resident, and every row in them a
    payload (no integer metadata shares the storage)."""
    kinds: dict[str, bool] = {}
    for row in rows:
        if row.storage is None:
            continue
        ok = (
            row.kind in PAYLOAD_KINDS
            and row.resides == "device"
            and not row.dtype.startswith(("int", "uint16", "bool"))
        )
        if row.kind == "data" or row.kind in ("scale_inv", "amax", "scale"):
            ok = row.resides == "device"  # FP8/FP4 bytes and scales: uint8 is their container dtype
        kinds[row.storage] = kinds.get(row.storage, True) and ok
    return [name for name, ok in kinds.items() if ok]


Trial = Callable[[frozenset[str], str], "list[torch.Tensor] | BaseException"]
"""Run the case once with the named storages poisoned with a fill: the gradients, or the exception
backward raised."""


def same(a: list[torch.Tensor] | BaseException, b: list[torch.Tensor] | BaseException) -> bool:
    """Bit for bit the same gradients (an exception is never the same)."""
    import torch

    if isinstance(a, BaseException) or isinstance(b, BaseException) or len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not torch.equal(x.detach().contiguous().view(torch.uint8), y.detach().contiguous().view(torch.uint8)):
            return False
    return True


def poisoned(
    trial: Trial, storages: Sequence[str], prior: Mapping[str, str] | None, reference: list[torch.Tensor]
) -> tuple[dict[str, bool], int]:
    """Which of ``storages`` backward reads (True) by poisoning, and the number of trials run.

    ``prior`` (storage -> an observed verdict) orders the search: the storages it does not call
    read are tested together first (two trials when none is read), the ones it calls read one by
    one. ``reference`` is the gradients of a clean run that a second clean run reproduced."""
    count = 0
    read: dict[str, bool] = {}

    def changes(group: frozenset[str]) -> bool:
        nonlocal count
        for fill in FILLS:
            count += 1
            if not same(trial(group, fill), reference):
                return True
        return False

    def search(group: list[str]) -> None:
        if not group:
            return
        if not changes(frozenset(group)):
            read.update(dict.fromkeys(group, False))
            return
        if len(group) == 1:
            read[group[0]] = True
            return
        half = len(group) // 2
        search(group[:half])
        search(group[half:])

    if prior:
        search([s for s in storages if prior.get(s) != READ])
        for s in storages:
            if prior.get(s) == READ:
                search([s])
    else:
        search(list(storages))
    return read, count


def gradients(model: Any, inputs: Any) -> list[torch.Tensor]:
    """Every gradient backward left: the parameters' of ``model`` and the inputs' that require grad
    (an empty tensor where a gradient is None, so that None and a value never compare equal)."""
    import torch

    from memaudit.capture import iter_tensors

    leaves: list[torch.Tensor] = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    leaves += [t for t in iter_tensors(inputs) if t.requires_grad]
    return [t.grad.detach().clone() if t.grad is not None else torch.empty(0) for t in leaves]


def poison_storage(st: Any, fill: str) -> Callable[[], None]:
    """Overwrite a storage's bytes in place (``ff``: 0xFF, NaN in every float and FP8 format;
    ``random``: random bytes), keeping every view's sizes, strides and offset (views see the
    poison through their own layout); returns the function that puts the bytes back."""
    import torch

    with torch.no_grad():
        alias = torch.empty(0, dtype=torch.uint8, device=st.device)
        alias.set_(st, 0, (st.nbytes(),), (1,))
        original = alias.clone()
        if fill == "ff":
            alias.fill_(255)
        else:
            gen = torch.Generator().manual_seed(0x5EED)
            alias.copy_(torch.randint(0, 256, (st.nbytes(),), dtype=torch.uint8, generator=gen))

    def undo() -> None:
        with torch.no_grad():
            alias.copy_(original)

    return undo


def poisoned_verdicts(read: Mapping[str, bool], rows: Sequence[Row]) -> Verdicts:
    """Row verdicts from the storages' results; rows not poisoned are unknown, with why."""
    out: Verdicts = {}
    for row in rows:
        if row.kind == "container":
            continue
        if row.storage is not None and row.storage in read:
            out[row.index] = (
                (READ, "gradients changed when its contents were poisoned") if read[row.storage] else (UNREAD, None)
            )
        elif row.kind not in PAYLOAD_KINDS:
            out[row.index] = (UNKNOWN, "integer metadata is never poisoned")
        else:
            out[row.index] = (UNKNOWN, "not poisoned (shares its storage with metadata, or is not on the device)")
    _containers(rows, out)
    return out


def combine(first: Verdicts, second: Verdicts, rows: Sequence[Row]) -> tuple[Verdicts, list[str]]:
    """One verdict per row from both methods, and the disagreements (read against unread)."""
    out: Verdicts = {}
    disagree = []
    by_index = {r.index: r for r in rows}
    for index, (v1, why1) in first.items():
        v2, why2 = second.get(index, (UNKNOWN, None))
        if {v1, v2} == {READ, UNREAD}:
            row = by_index[index]
            disagree.append(
                f"row {index} ({row.operand or row.op}, storage {row.storage}): observed {v1}"
                f"{f' ({why1})' if why1 else ''}, poisoned {v2}{f' ({why2})' if why2 else ''}"
            )
            out[index] = (UNKNOWN, "the two methods disagree")
        elif v1 == UNKNOWN and v2 != UNKNOWN:
            out[index] = (v2, why2)
        else:
            out[index] = (v1, why1)
    return out, disagree
