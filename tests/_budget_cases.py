"""Synthetic cases for the budget tests, shaped after docs/internals/te-internals.md §2.1-§2.4 (no torch run).

Each builder returns a CaseReport whose rows are what TE 2.20.2 saves on that path, so the shipped
scenario can be tested against every recipe without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memaudit.report import CaseReport, PathInfo, Report, Row, compute_totals
from memaudit.runner import empty_case
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

T, H, F = 4096, 1024, 2048
H200_ENV = {"device_class": "sm90", "transformer_engine": "2.20.2"}


class Rows:
    """Appends rows with consecutive indices; each gets its own storage unless one is given."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._storages = 0

    def storage(self) -> str:
        self._storages += 1
        return f"s{self._storages - 1}"

    def add(
        self,
        operand: str | None,
        kind: str,
        fmt: str,
        shape: list[int],
        dtype: str,
        nbytes: int,
        *,
        storage: str | None = None,
        storage_bytes: int | None = None,
        **kw: Any,
    ) -> int:
        index = len(self.rows)
        if kind == "container":
            storage, storage_bytes = None, 0
        elif storage is None:
            storage = self.storage()
        row = Row(
            index=index,
            kind=kind,
            format=fmt,
            shape=list(shape),
            dtype=dtype,
            bytes=nbytes,
            operand=operand,
            storage=storage,
            storage_bytes=nbytes if storage_bytes is None else storage_bytes,
            **kw,
        )
        self.rows.append(row)
        return index


def make_case(
    recipe: str,
    groups: int,
    rows: list[Row],
    *,
    target: str = "te-grouped-mlp",
    tokens: int = T,
    hidden: int = H,
    ffn: int = F,
    dtype: str = "bf16",
    status: str = "ok",
    reason: str | None = None,
    path: dict[str, Any] | None = None,
) -> CaseReport:
    case = empty_case(
        CaseSpec.make(get_target(target), recipe, groups, tokens=tokens, hidden=hidden, ffn=ffn, dtype=dtype)
    )
    case.status, case.reason = status, reason
    case.path = PathInfo(path) if path is not None else None
    case.rows, case.totals = rows, compute_totals(rows)
    return case


def _meta(b: Rows, groups: int) -> str:
    st = b.storage()
    b.add("fc1.split_sizes", "metadata", "int64", [groups], "int64", 8 * groups, storage=st)
    return st


def _activation(b: Rows, tokens: int, ffn: int) -> None:
    b.add("activation.activation_in", "tensor", "bf16", [tokens, 2 * ffn], "bfloat16", tokens * 2 * ffn * 2)
    b.add("activation.scales", "tensor", "fp32", [tokens], "float32", tokens * 4)


def bf16_case(groups: int, *, copy_input: bool = False, weight_copy: bool = False) -> CaseReport:
    """Split path: inputs are torch.split views, weights the Parameters themselves."""
    splits = CaseSpec.make(get_target("te-grouped-mlp"), "bf16", groups, tokens=T, hidden=H, ffn=F).split_sizes()
    b = Rows()
    st = _meta(b, groups)
    for prefix, k in (("fc1", H), ("fc2", F)):
        if prefix == "fc2":
            b.add("fc2.split_sizes", "metadata", "int64", [groups], "int64", 8 * groups, storage=st, duplicate_of=0)
        x = b.storage()
        offset = 0
        for g, m in enumerate(splits):
            own = b.storage() if copy_input and prefix == "fc1" else x
            b.add(
                f"{prefix}.input",
                "tensor",
                "bf16",
                [m, k],
                "bfloat16",
                m * k * 2,
                group=g,
                storage=own,
                storage_bytes=m * k * 2 if own != x else T * k * 2,
                storage_offset=offset,
            )
            offset += m * k * 2
        out = 2 * F if prefix == "fc1" else H
        for g in range(groups):
            b.add(
                f"{prefix}.weight[{g}]",
                "tensor",
                "bf16",
                [out, k],
                "bfloat16",
                out * k * 2,
                group=g,
                is_parameter=not (weight_copy and g == 0),
            )
        if prefix == "fc1":
            _activation(b, T, F)
    return make_case("bf16", groups, b.rows, path=_unfused_path())


def _unfused_path(grouped: bool = False) -> dict[str, Any]:
    return {
        "fused": False,
        "forward_ops": ["GroupedLinear", "ScaledSwiGLU", "GroupedLinear"],
        "grouped_linear_path": "grouped-tensor" if grouped else "split-quantize",
    }


def fp8_case(
    recipe: str,
    groups: int,
    *,
    zero_group_rows: bool = False,
    keep_rowwise: bool = False,
    drop_transpose_group: int | None = None,
) -> CaseReport:
    """Hopper split-quantize path: per group one ``_transpose`` (K, M) and one ``_scale_inv``."""
    splits = CaseSpec.make(get_target("te-grouped-mlp"), recipe, groups, tokens=T, hidden=H, ffn=F).split_sizes()
    b = Rows()
    _meta(b, groups)
    for prefix, k, out in (("fc1", H, 2 * F), ("fc2", F, H)):
        for g, m in enumerate(splits):
            if m == 0 and not zero_group_rows:
                continue
            common = {"group": g, "container": "Float8TensorStorage"}
            if keep_rowwise:
                b.add(
                    f"{prefix}.input",
                    "data",
                    "fp8",
                    [m, k],
                    "uint8",
                    m * k,
                    orientation="rowwise",
                    slot="_data",
                    **common,
                )
            if drop_transpose_group != g:
                b.add(
                    f"{prefix}.input",
                    "data",
                    "fp8",
                    [k, m],
                    "uint8",
                    m * k,
                    orientation="columnwise",
                    slot="_transpose",
                    **common,
                )
            b.add(
                f"{prefix}.input",
                "scale_inv",
                "fp32",
                [1],
                "float32",
                4,
                orientation="both",
                slot="_scale_inv",
                **common,
            )
        for g in range(groups):
            common = {"group": g, "container": "Float8TensorStorage"}
            b.add(
                f"{prefix}.weight[{g}]",
                "data",
                "fp8",
                [k, out],
                "uint8",
                k * out,
                orientation="columnwise",
                slot="_transpose",
                **common,
            )
            b.add(
                f"{prefix}.weight[{g}]",
                "scale_inv",
                "fp32",
                [1],
                "float32",
                4,
                orientation="both",
                slot="_scale_inv",
                **common,
            )
        if prefix == "fc1":
            _activation(b, T, F)
    return make_case(recipe, groups, b.rows, path=_unfused_path())


def fused_case(recipe: str, groups: int, *, pruned: bool) -> CaseReport:
    """Fused CuTeDSL path (Blackwell). NVFP4 before PR #3545 (``pruned=False``) keeps rowwise data and
    scales; MXFP8 is always pruned. One group takes the dense path: a GroupedTensor saved whole."""
    b = Rows()
    _meta(b, groups)
    nvfp4 = recipe == "nvfp4"
    for prefix, k in (("fc1", H), ("fc2", F)):
        container = "GroupedTensorStorage"
        extra: dict[str, Any] = {}
        if groups == 1 and nvfp4:
            ci = b.add(prefix + ".input", "container", recipe, [T, k], "bfloat16", 0, container="GroupedTensor")
            extra = {"container_index": ci}
            container = "GroupedTensor"
        data = T * k // 2 if nvfp4 else T * k
        scale = T * k // 16 if nvfp4 else T * k // 32
        op = f"{prefix}.input"
        if nvfp4 and not pruned:
            b.add(
                op,
                "data",
                recipe,
                [data],
                "uint8",
                data,
                orientation="rowwise",
                container=container,
                slot="rowwise_data",
                **extra,
            )
        b.add(
            op,
            "data",
            recipe,
            [data],
            "uint8",
            data,
            orientation="columnwise",
            container=container,
            slot="columnwise_data",
            **extra,
        )
        if nvfp4 and not pruned:
            b.add(
                op,
                "scale_inv",
                recipe,
                [scale],
                "uint8",
                scale,
                orientation="rowwise",
                container=container,
                slot="scale_inv",
                **extra,
            )
        b.add(
            op,
            "scale_inv",
            recipe,
            [scale],
            "uint8",
            scale,
            orientation="columnwise",
            container=container,
            slot="columnwise_scale_inv",
            **extra,
        )
        if nvfp4:
            b.add(
                op,
                "amax",
                "fp32",
                [groups],
                "float32",
                4 * groups,
                orientation="rowwise",
                container=container,
                slot="amax",
                **extra,
            )
            b.add(
                op,
                "amax",
                "fp32",
                [groups],
                "float32",
                4 * groups,
                orientation="columnwise",
                container=container,
                slot="columnwise_amax",
                **extra,
            )
        b.add(op, "metadata", "int64", [groups], "int64", 8 * groups, container=container, slot="first_dims", **extra)
        b.add(
            op,
            "metadata",
            "int64",
            [groups + 1],
            "int64",
            8 * (groups + 1),
            container=container,
            slot="tensor_offsets",
            **extra,
        )
        if prefix == "fc1":
            _activation(b, T, F)
    path = {"fused": True, "forward_ops": ["GroupedMLP_CuTeGEMMGLU"]}
    return make_case(recipe, groups, b.rows, path=path)


def h200_report(**overrides: CaseReport) -> Report:
    """What the H200 gives for scenarios/grouped_mlp.toml: bf16/fp8 ok, fp8-block error, MXFP8/NVFP4 skipped."""
    cases = []
    for recipe in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"):
        for g in (1, 4, 8):
            if recipe == "bf16":
                c = bf16_case(g)
            elif recipe in ("fp8-delayed", "fp8-current"):
                c = fp8_case(recipe, g)
            elif recipe == "fp8-block":
                c = make_case(recipe, g, [], status="error", reason="RuntimeError: cuBLAS error")
            else:
                c = make_case(recipe, g, [], status="skipped", reason=f"{recipe} needs compute capability 10.0")
            cases.append(overrides.get(f"{recipe}/g{g}", c))
    return Report(cases=cases, environment=dict(H200_ENV))


def blackwell_report(*, pruned: bool, te: str | None = "2.20.2") -> Report:
    """bf16/fp8 unfused, MXFP8/NVFP4 fused; fp8-block runs too."""
    cases = []
    for recipe in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"):
        for g in (1, 4, 8):
            if recipe == "bf16":
                cases.append(bf16_case(g))
            elif recipe.startswith("fp8"):
                cases.append(fp8_case(recipe, g))
            else:
                cases.append(fused_case(recipe, g, pruned=pruned))
    return Report(cases=cases, environment={"device_class": "sm100", "transformer_engine": te})


def grouped_structural():
    """scenarios/grouped_mlp.toml without its per-case ceilings (measured bytes; synthetic reports differ)."""
    import tomllib

    from memaudit.judge.scenario import parse_scenario

    path = Path(__file__).resolve().parent.parent / "scenarios" / "grouped_mlp.toml"
    data = tomllib.loads(path.read_text())
    data["budget"] = [b for b in data["budget"] if not b["name"].startswith("ceiling-")]
    return parse_scenario(data, source=str(path))
