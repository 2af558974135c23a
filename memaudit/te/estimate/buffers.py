"""The buffer list of one estimate: collected in pack-hook order, filtered by variant, made into rows.

:class:`Accumulator` records each saved :class:`Buffer` and the sizes of the storages they live in;
:func:`finalize` keeps what a variant saves and turns it into :class:`~memaudit.report.Row` s.
"""

from __future__ import annotations

from memaudit.report import Row
from memaudit.te.estimate.config import DEVICE, Config
from memaudit.te.estimate.shapes import ITEMSIZE, PLAIN_FORMAT, SLOT_INFO, prod


class Buffer:
    """One saved buffer (or a container's own row) before it becomes a Row; ``storage`` indexes
    :attr:`Accumulator.sizes`, ``ideal`` is its size without TE's tile padding."""

    __slots__ = (
        "operand",
        "group",
        "container",
        "slot",
        "fmt",
        "kind",
        "orient",
        "shape",
        "dtype",
        "nbytes",
        "storage",
        "soff",
        "ideal",
        "param",
        "note",
        "cref",
        "is_container",
        "prune",
    )

    def __init__(
        self,
        operand: str,
        group: int | None,
        container: str | None,
        slot: str | None,
        fmt: str,
        kind: str,
        orient: str | None,
        shape: tuple[int, ...],
        dtype: str,
        nbytes: int,
        storage: int | None,
        soff: int,
        ideal: int,
        param: bool,
        note: str | None,
        cref: int | None,
        is_container: bool,
        prune: str | None,
    ) -> None:
        self.operand = operand
        self.group = group
        self.container = container
        self.slot = slot
        self.fmt = fmt
        self.kind = kind
        self.orient = orient
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.storage = storage
        self.soff = soff
        self.ideal = ideal
        self.param = param
        self.note = note
        self.cref = cref
        self.is_container = is_container
        self.prune = prune


class Accumulator:
    """Collects buffers in pack-hook order and the sizes of the storages they live in."""

    __slots__ = ("bufs", "sizes", "ncont")

    def __init__(self) -> None:
        self.bufs: list[Buffer] = []
        self.sizes: list[int] = []
        self.ncont = 0

    def storage(self, nbytes: int) -> int:
        self.sizes.append(nbytes)
        return len(self.sizes) - 1

    def plain(
        self,
        operand: str,
        shape: tuple[int, ...],
        dtype: str,
        *,
        storage: int | None = None,
        soff: int = 0,
        kind: str | None = None,
        param: bool = False,
        note: str | None = None,
        group: int | None = None,
    ) -> None:
        nbytes = prod(shape) * ITEMSIZE[dtype]
        if storage is None:
            storage = self.storage(nbytes)
        if kind is None:
            kind = "metadata" if dtype in ("int64", "int32") else "tensor"
        self.bufs.append(
            Buffer(
                operand,
                group,
                None,
                None,
                PLAIN_FORMAT[dtype],
                kind,
                None,
                shape,
                dtype,
                nbytes,
                storage,
                soff,
                nbytes,
                param,
                note,
                None,
                False,
                None,
            )
        )

    def te(
        self,
        operand: str,
        group: int | None,
        container: str,
        slot: str,
        fmt: str,
        shape: tuple[int, ...],
        dtype: str,
        *,
        storage: int | None = None,
        soff: int = 0,
        ideal: int | None = None,
        note: str | None = None,
        cref: int | None = None,
        prune: str | None = None,
    ) -> None:
        nbytes = prod(shape) * ITEMSIZE[dtype]
        if storage is None:
            storage = self.storage(nbytes)
        kind, orient = SLOT_INFO[slot]
        if kind == "metadata":
            fmt = PLAIN_FORMAT[dtype]  # as memaudit.te.capture.classify: metadata keeps its dtype's format
        self.bufs.append(
            Buffer(
                operand,
                group,
                container,
                slot,
                fmt,
                kind,
                orient,
                shape,
                dtype,
                nbytes,
                storage,
                soff,
                nbytes if ideal is None else ideal,
                False,
                note,
                cref,
                False,
                prune,
            )
        )

    def container(
        self, operand: str, container: str, fmt: str, shape: tuple[int, ...], dtype: str, note: str | None = None
    ) -> int:
        ref = self.ncont
        self.ncont += 1
        self.bufs.append(
            Buffer(
                operand,
                None,
                container,
                None,
                fmt,
                "container",
                None,
                shape,
                dtype,
                0,
                None,
                0,
                0,
                False,
                note,
                ref,
                True,
                None,
            )
        )
        return ref


def _keep(b: Buffer, variant: str, recipe: str, fused: bool) -> bool:
    if variant == "te-2.20":
        return True
    if b.prune == "rowwise" and recipe == "nvfp4" and fused:
        return False  # PR #3545: NVFP4 fused-path rowwise input data and scales are pruned
    if variant == "pr3545":
        return True
    # ideal: only the orientation the backward GEMMs read (te-internals §2.3).
    if b.is_container or b.kind in ("metadata", "tensor") or b.fmt == "bf16":
        return True
    if b.prune == "rowwise":
        return False
    if recipe in ("fp8-delayed", "fp8-current"):
        return b.kind not in ("amax", "scale")  # _data vs _transpose: see _ideal_fp8
    return b.orient in ("columnwise", "both")


def finalize(acc: Accumulator, c: Config, variant: str) -> tuple[list[Row], list[int]]:
    """Filter by variant, number storages s0.. in first-seen order, mark duplicate views."""
    fused = c.fused
    bufs = [b for b in acc.bufs if _keep(b, variant, c.recipe, fused)]
    if variant == "ideal" and c.recipe in ("fp8-delayed", "fp8-current"):
        bufs = _ideal_fp8(bufs)
    names: dict[int, str] = {}
    first_view: dict[tuple[int, int, tuple[int, ...]], int] = {}
    cont_index: dict[int, int] = {}
    rows: list[Row] = []
    ideals: list[int] = []
    for i, b in enumerate(bufs):
        storage = None
        dup = None
        sbytes = 0
        if b.storage is not None:
            storage = names.get(b.storage)
            if storage is None:
                storage = names[b.storage] = f"s{len(names)}"
            sbytes = acc.sizes[b.storage]
            view = (b.storage, b.soff, b.shape)
            dup = first_view.setdefault(view, i)
            dup = None if dup == i else dup
        ci = None
        if b.is_container:
            cont_index[b.cref] = i  # type: ignore[index]
        elif b.cref is not None:
            ci = cont_index.get(b.cref)
        rows.append(
            Row(
                index=i,
                kind=b.kind,
                format=b.fmt,
                shape=list(b.shape),
                dtype=b.dtype,
                bytes=b.nbytes,
                op=None,
                slot=b.slot,
                operand=b.operand,
                group=b.group,
                container=b.container,
                container_index=ci,
                orientation=b.orient,
                storage=storage,
                storage_offset=b.soff,
                storage_bytes=sbytes,
                device=DEVICE,
                is_parameter=b.param,
                duplicate_of=dup,
                note=b.note,
            )
        )
        ideals.append(b.ideal)
    return rows, ideals


def _ideal_fp8(bufs: list[Buffer]) -> list[Buffer]:
    """Per-tensor FP8: keep ``_transpose`` where it exists (SM90), else the single ``_data`` copy (SM100)."""
    with_t = {(b.operand, b.group) for b in bufs if b.slot == "_transpose"}
    return [b for b in bufs if not (b.slot == "_data" and (b.operand, b.group) in with_t)]
