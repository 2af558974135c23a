"""A rank's case against one process: the same local experts at the same split sizes, run alone.

What a rank of the expert-parallel target saves is its local experts' state, plus what the
dispatch keeps. :func:`one_process` runs the experts' own single-process target (``reference``,
or ``te-grouped-mlp`` for ``--experts te``, with the same kernels) at the rank's split sizes;
:func:`row_differences` says which rows differ (storages compared by grouping, not by name).
``bench/verify/dist_equivalence.py`` applies it to every rank of a merged report (on two GPUs).
"""

from __future__ import annotations

from typing import Any

from memaudit.report import CaseReport, Row
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

DISPATCH = "dispatch."
"""The operands the expert-parallel dispatch names (what one process of the experts does not save)."""

_TARGETS = {"reference": "reference", "te": "te-grouped-mlp"}


def one_process(case: CaseReport, device: str | None = None) -> CaseReport:
    """The rank's local experts run in this process at its split sizes (no dispatch, no collective)."""
    from memaudit.runner import run_case

    experts = case.options.get("experts", "reference")
    name = _TARGETS[experts]
    flags: dict[str, Any] = {k: v for k, v in case.options.items() if k in ("single_grouped_weight", "activation")}
    if "fused_env" in case.options:  # the fused switch the rank ran with
        flags["fused"] = case.options["fused_env"] == "1"
    if case.emulation is not None:
        flags.update(
            kernels=case.emulation.machine.get("kernels", "emulated"), arch=case.emulation.machine.get("arch", "sm100")
        )
    target = get_target(name).configure(flags)
    splits = tuple(case.splits)
    spec = CaseSpec.make(
        target,
        case.recipe,
        case.groups,
        dtype=case.dtype,
        device=device or case.device,
        options=dict(target.options),
        splits=splits,
        tokens=sum(splits),
        hidden=case.dims["hidden"],
        ffn=case.dims["ffn"],
    )
    return run_case(target, spec)


def signature(rows: list[Row]) -> list[tuple[Any, ...]]:
    """What each row saves, in order; storages named by first appearance among ``rows``."""
    names: dict[str, int] = {}
    out = []
    for r in rows:
        storage = names.setdefault(r.storage, len(names)) if r.storage is not None else None
        out.append(
            (
                r.operand,
                r.group,
                r.kind,
                r.format,
                r.orientation,
                tuple(r.shape),
                r.dtype,
                r.bytes,
                r.storage_bytes,
                r.is_parameter,
                r.duplicate_of is not None,
                r.container,
                r.slot,
                storage,
            )
        )
    return out


def row_differences(rank_case: CaseReport, single: CaseReport) -> list[str]:
    """The rows of ``rank_case`` (its dispatch's aside) that differ from ``single``'s, in words."""
    mine = [r for r in rank_case.rows if not (r.operand or "").startswith(DISPATCH)]
    a, b = signature(mine), signature(single.rows)
    out = [
        f"row {mine[i].index} ({mine[i].operand}): {x} on the rank, {y} in one process"
        for i, (x, y) in enumerate(zip(a, b, strict=False))
        if x != y
    ]
    if len(a) != len(b):
        out.append(f"{len(a)} rows on the rank (dispatch aside), {len(b)} in one process")
    return out


def dispatch_bytes(case: CaseReport) -> int:
    """What the rank's dispatch keeps beyond its experts: saved bytes of its ``dispatch.*`` storages."""
    params = {r.storage for r in case.rows if r.is_parameter}
    seen: dict[str, int] = {}
    for r in case.rows:
        if (
            (r.operand or "").startswith(DISPATCH)
            and r.storage is not None
            and r.storage not in params
            and r.resides == "device"
        ):
            seen[r.storage] = r.storage_bytes
    return sum(seen.values())
