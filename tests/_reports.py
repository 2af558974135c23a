"""Report factories for the baseline, markdown and compare tests (built in memory, no torch run)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from memaudit.report import CaseReport, PathInfo, Report, Row, compute_totals, validate_report, write_report
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

ENV = {
    "torch": "2.14.1",
    "python": "3.11.9",
    "device": "NVIDIA H200",
    "device_class": "sm90",
    "transformer_engine": "2.20.2",
    "cuda": "13.0",
}

TE_FP8 = CaseSpec.make(get_target("te-grouped-mlp"), "fp8-current", 4, tokens=4096, hidden=1024, ffn=2048).id
TE_BF16 = CaseSpec.make(get_target("te-grouped-mlp"), "bf16", 4, tokens=4096, hidden=1024, ffn=2048).id
TE_NVFP4 = CaseSpec.make(get_target("te-grouped-mlp"), "nvfp4", 4, tokens=4096, hidden=1024, ffn=2048).id
REF_BF16 = CaseSpec.make(get_target("reference"), "bf16", 1, tokens=256, hidden=64, ffn=128).id


class RowBuilder:
    """Appends rows with consecutive indices and storages, one storage per row unless shared."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(
        self,
        operand: str,
        kind: str = "data",
        *,
        nbytes: int,
        orientation: str | None = None,
        fmt: str = "bf16",
        shape: tuple[int, ...] | None = None,
        dtype: str = "bfloat16",
        is_parameter: bool = False,
        duplicate_of: int | None = None,
        container: str | None = None,
        slot: str | None = None,
    ) -> RowBuilder:
        index = len(self.rows)
        if duplicate_of is not None:
            storage = self.rows[duplicate_of].storage
            storage_bytes = self.rows[duplicate_of].storage_bytes
        elif kind == "container":
            storage, storage_bytes = None, 0
        else:
            storage, storage_bytes = f"s{index}", nbytes
        self.rows.append(
            Row(
                index=index,
                kind=kind,
                format=fmt,
                shape=list(shape) if shape is not None else [nbytes],
                dtype=dtype,
                bytes=nbytes,
                slot=slot or f"saved[{index}]",
                operand=operand,
                container=container,
                orientation=orientation,
                storage=storage,
                storage_bytes=storage_bytes,
                is_parameter=is_parameter,
                duplicate_of=duplicate_of,
            )
        )
        return self


def fp8_rows() -> list[Row]:
    """A TE-like FP8 grouped MLP forward: columnwise inputs + scale_inv, a parameter, a bf16 activation."""
    b = RowBuilder()
    b.add(
        "fc1.input",
        "data",
        nbytes=4096 * 1024,
        orientation="columnwise",
        fmt="fp8",
        shape=(1024, 4096),
        dtype="uint8",
        container="Float8Tensor",
    )
    b.add(
        "fc1.input",
        "scale_inv",
        nbytes=4,
        orientation="columnwise",
        fmt="fp8",
        shape=(1,),
        dtype="float32",
        container="Float8Tensor",
    )
    b.add("fc1.weight[0]", "tensor", nbytes=2 * 4096 * 1024, fmt="bf16", shape=(4096, 1024), is_parameter=True)
    b.add("activation.input", "tensor", nbytes=2 * 4096 * 4096, fmt="bf16", shape=(4096, 4096))
    b.add(
        "fc2.input",
        "data",
        nbytes=4096 * 2048,
        orientation="columnwise",
        fmt="fp8",
        shape=(2048, 4096),
        dtype="uint8",
        container="Float8Tensor",
    )
    b.add(
        "fc2.input",
        "scale_inv",
        nbytes=4,
        orientation="columnwise",
        fmt="fp8",
        shape=(1,),
        dtype="float32",
        container="Float8Tensor",
    )
    b.add(
        "fc1.input",
        "data",
        nbytes=4096 * 1024,
        orientation="columnwise",
        fmt="fp8",
        shape=(1024, 4096),
        dtype="uint8",
        duplicate_of=0,
    )
    return b.rows


def bf16_rows(tokens: int = 4096, hidden: int = 1024, ffn: int = 2048) -> list[Row]:
    b = RowBuilder()
    b.add("fc1.input", "tensor", nbytes=2 * tokens * hidden, shape=(tokens, hidden))
    b.add("activation.input", "tensor", nbytes=2 * tokens * 2 * ffn, shape=(tokens, 2 * ffn))
    b.add("fc2.input", "tensor", nbytes=2 * tokens * ffn, shape=(tokens, ffn))
    b.add("fc1.weight", "tensor", nbytes=2 * 2 * ffn * hidden, shape=(2 * ffn, hidden), is_parameter=True)
    return b.rows


def make_case(
    case_id: str,
    rows: list[Row] | None = None,
    *,
    status: str = "ok",
    reason: str | None = None,
    path: dict[str, Any] | None = None,
) -> CaseReport:
    """A CaseReport whose fields are parsed from a CaseSpec-style id, totals computed from rows."""
    target, recipe, g, shape, dtype = case_id.split("/")[:5]
    t, h, f = (int(x[1:]) for x in shape.split("-"))
    rows = [] if status != "ok" else (rows if rows is not None else bf16_rows())
    return CaseReport(
        CaseSpec.make(get_target(target), recipe, int(g[1:]), tokens=t, hidden=h, ffn=f, dtype=dtype, splits=()),
        id=case_id,
        status=status,
        reason=reason,
        path=PathInfo(path) if path is not None else None,
        rows=rows,
        totals=compute_totals(rows),
    )


def make_report(cases: list[CaseReport], **env: Any) -> Report:
    return Report(cases=cases, environment={**ENV, **env}, memaudit="0.1.0", created="2025-01-01T00:00:00Z")


def sample_report() -> Report:
    """Two targets, three recipes: an FP8 TE case (unfused), a BF16 TE case, a skipped NVFP4 cell, a CPU reference
    case."""
    return make_report(
        [
            make_case(
                TE_FP8, fp8_rows(), path={"fused": False, "forward_ops": ["GroupedLinear", "SwiGLU", "GroupedLinear"]}
            ),
            make_case(TE_BF16, bf16_rows(), path={"fused": False}),
            make_case(TE_NVFP4, status="skipped", reason="Device compute capability 10.0 or higher required for NVFP4"),
            make_case(REF_BF16, bf16_rows(256, 64, 128)),
        ]
    )


def copy_report(report: Report) -> Report:
    """A deep copy through the JSON round trip."""
    return validate_report(json.loads(report.to_json()))


def resize_row(report: Report, case_id: str, index: int, by: int, *, storage: bool = True) -> Report:
    """A copy with one buffer grown (``by`` > 0) or shrunk, its storage too unless ``storage=False``."""
    out = copy_report(report)
    case = out.case(case_id)
    assert case is not None
    row = case.rows[index]
    shape = [row.shape[0] + by] + row.shape[1:] if len(row.shape) == 1 else row.shape
    row = dataclasses.replace(row, bytes=row.bytes + by, shape=shape)
    case.rows[index] = row
    if storage:
        grown = row.storage_bytes + by
        case.rows = [dataclasses.replace(r, storage_bytes=grown) if r.storage == row.storage else r for r in case.rows]
    case.totals = compute_totals(case.rows)
    return out


def write(report: Report, path: Path) -> Path:
    write_report(report, path)
    return path
