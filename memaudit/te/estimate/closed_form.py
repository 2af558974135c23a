"""The totals of an estimate in closed form, no rows built: for sweeps, plots and the bench.

The same rules as :mod:`.model` and :mod:`.buffers`; ``tests/te/test_estimate.py`` checks that
:func:`estimate_totals` equals ``compute_totals`` of the rows over a grid of configurations.

Why it stays beside :mod:`.compiled` (which replays the model and restates nothing): measured over
216 warm estimates (4 recipes x T 16K-256K x H 1K/4K x G 1/8/64 x 3 variants, median of 5), the
totals here take 4.0 ms, the compiled rows and their totals 10.6 ms (2.7x): sweeps and plots draw
totals only, over thousands of points. The cost is a second statement of the byte rules, held to
the first by that test.
"""

from __future__ import annotations

from dataclasses import dataclass

from memaudit.errors import UsageError
from memaudit.te.estimate.config import VARIANTS, Config
from memaudit.te.estimate.shapes import (
    HP_DTYPES,
    ITEMSIZE,
    SLOT_INFO,
    grouped_buffers_cpp,
    prod,
    rup,
    scale_shape,
    single_buffers,
)


@dataclass
class FastTotals:
    """Byte totals of one estimate without its rows (same meaning as :class:`Totals`)."""

    logical_bytes: int
    physical_bytes: int
    parameter_bytes: int
    by_kind: dict[str, int]

    @property
    def saved_bytes(self) -> int:
        return self.physical_bytes - self.parameter_bytes


def _keep_single(slots: list[tuple[str, tuple[int, ...], str]], ideal: bool) -> list[tuple[str, tuple[int, ...], str]]:
    """Single-tensor slots the ``ideal`` variant keeps (columnwise copies, their scales and amax)."""
    if not ideal:
        return slots
    has_t = any(s == "_transpose" for s, _, _ in slots)
    out = []
    for s, shape, dtype in slots:
        if s == "_data":
            if not has_t:
                out.append((s, shape, dtype))
            continue
        if SLOT_INFO[s][1] in ("columnwise", "both"):
            out.append((s, shape, dtype))
    return out


def estimate_totals(c: Config, variant: str = "te-2.20") -> FastTotals:
    """Totals of :func:`estimate_config` in closed form (no rows): for sweeps and plots."""
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}", key="--variant")
    ideal = variant == "ideal"
    recipe, t, h, f, g = c.recipe, c.tokens, c.hidden, c.ffn, c.groups
    b = ITEMSIZE[HP_DTYPES[c.dtype]]
    kinds: dict[str, int] = {}
    logical = physical = params = 0

    def add(kind: str, nbytes: int, phys: int | None = None, dup: bool = False) -> None:
        nonlocal logical, physical
        logical += nbytes
        physical += nbytes if phys is None else phys
        if not dup:
            kinds[kind] = kinds.get(kind, 0) + nbytes

    def weights(n: int, k: int, rowwise: bool) -> None:
        nonlocal logical, physical, params
        if recipe == "bf16":
            nbytes = g * n * k * b
            logical += nbytes
            physical += nbytes
            params += nbytes
            return
        for slot, shape, dtype in _keep_single(
            single_buffers(recipe, n, k, rowwise=rowwise, columnwise=True, arch=c.arch, block_dim=2), ideal
        ):
            add(SLOT_INFO[slot][0], g * prod(shape) * ITEMSIZE[dtype])

    def grouped_q_input(k: int, keep_row: bool, prune: bool) -> None:
        bufs = grouped_buffers_cpp(recipe, t, k, g, arch=c.arch, block_dim=1)
        has_col = "columnwise_data" in bufs
        for slot, (numel, dtype) in bufs.items():
            if recipe == "fp8-current" and slot == "scale_inv" and has_col:
                continue
            if has_col and slot in ("rowwise_data", "scale_inv") and (prune or not keep_row):
                continue
            if ideal and recipe != "fp8-current" and SLOT_INFO[slot][1] == "rowwise":
                continue
            if ideal and recipe == "fp8-current" and slot in ("amax", "scale"):
                continue
            add(SLOT_INFO[slot][0], numel * ITEMSIZE[dtype])
        add("metadata", 8 * g, 0, dup=True)  # first_dims
        add("metadata", 8 * (g + 1), 0, dup=True)  # tensor_offsets

    def offsets(n_int64: int) -> None:  # from_blob views: each its own storage, no slack
        add("metadata", 4 * g + 8 * (g + 1) * n_int64)

    def split_sizes(second: bool) -> None:
        if second and c.split_sizes_dtype == "int64":
            add("metadata", 8 * g, 0, dup=True)
        else:
            add("metadata", 8 * g)

    def activation() -> None:
        if c.fused:
            add("tensor", t * 2 * f * 2)
            add("tensor", t * ITEMSIZE[c.probs_dtype])
        else:
            add("tensor", t * 2 * f * b)
            add("tensor", t * b)

    if c.path == "unfused-split":
        splits = c.splits
        if recipe == "fp8-block":
            s_scale = sum(-(-m // 128) for m in splits)
        elif recipe == "mxfp8":
            s_scale = sum(-(-(m // 32) // 4) * 4 for m in splits)
        elif recipe == "nvfp4":
            s_scale = sum(-((-m // 16) // 4) * 4 for m in splits)
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            split_sizes(op == "fc2")
            if recipe == "bf16":
                add("tensor", t * k * b)
            elif recipe in ("fp8-delayed", "fp8-current"):
                add("data", t * k)
                add("scale_inv", 4 * g)
            else:
                data = t * k // 2 if recipe == "nvfp4" else t * k
                if recipe == "fp8-block":
                    scales = 4 * rup(k, 4) * s_scale
                else:
                    scales = rup(k, 128) * s_scale
                amax = 4 * g if recipe == "nvfp4" else 0
                add("data", data)  # bulk_allocate views: from_blob storages of exactly their bytes
                add("scale_inv", scales)
                if amax:
                    add("amax", amax)
            weights(n, k, rowwise=False)
            if op == "fc1":
                activation()
    elif c.path == "unfused-grouped":
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            split_sizes(op == "fc2")
            offsets(3)
            if recipe == "bf16":
                add("data", t * k * b)
                add("metadata", 8 * g, 0, dup=True)  # first_dims
                add("metadata", 8 * (g + 1), 0, dup=True)  # tensor_offsets
            else:
                grouped_q_input(k, keep_row=False, prune=True)
            weights(n, k, rowwise=True)
            if op == "fc1":
                activation()
    else:  # fused
        nvfp4 = recipe == "nvfp4"
        keep_row = nvfp4 and variant == "te-2.20"
        split_sizes(False)
        offsets(5)
        for op, k, n in (("fc1", h, 2 * f), ("fc2", f, h)):
            if op == "fc2" and recipe == "mxfp8":
                add("data", t * k)
                add("scale_inv", prod(scale_shape("mxfp8", t, k, True)))
                add("metadata", 8 * g, 0, dup=True)
                add("metadata", 8 * (g + 1), 0, dup=True)
            elif g == 1 and c.dense_single_group:
                for slot, shape, dtype in single_buffers(recipe, t, k, arch=c.arch):
                    orient = SLOT_INFO[slot][1]
                    if slot in ("_rowwise_data", "_rowwise_scale_inv") and not keep_row:
                        continue
                    if ideal and orient == "rowwise":
                        continue
                    add(SLOT_INFO[slot][0], prod(shape) * ITEMSIZE[dtype])
                add("metadata", 8, 0, dup=True)
                add("metadata", 16, 0, dup=True)
            else:
                grouped_q_input(k, keep_row=keep_row, prune=not nvfp4)
            weights(n, k, rowwise=True)
            if op == "fc1":
                activation()
    return FastTotals(logical, physical, params, kinds)
