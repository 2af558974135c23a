"""Estimates as CaseReports: from a :class:`~.config.Config`, from a spec, and as ``run --expected`` rows."""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import memaudit
from memaudit.errors import UsageError
from memaudit.report import CaseReport, PathInfo, Report, Row, Totals, compute_totals
from memaudit.spec import CaseSpec
from memaudit.te.estimate.buffers import finalize
from memaudit.te.estimate.compiled import compiled
from memaudit.te.estimate.config import DEVICE, TARGET, TE_VERSION, VARIANTS, Config, resolve
from memaudit.te.estimate.model import Model


def case_id(c: Config) -> str:
    """Stable id: the run-style id plus the estimate's path and arch. The variant is left out so
    that ``memaudit compare`` matches the same case across two variants' reports."""
    dims = f"t{c.tokens}-h{c.hidden}-f{c.ffn}"
    return f"{TARGET}/{c.recipe}/g{c.groups}/{dims}/{c.dtype}/estimate,path={c.path},arch={c.arch}"


def estimate_config(c: Config, variant: str = "te-2.20") -> CaseReport:
    """The saved set of a resolved :class:`Config` under ``variant`` as a CaseReport.

    Runs the model compiled for ``c``'s structure (:mod:`.compiled`); a structure the model
    cannot be compiled for takes :func:`estimate_config_direct`'s path. Both give the same case.
    """
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}", key="--variant")
    fn = compiled(c, variant)
    if fn is None:
        return estimate_config_direct(c, variant)
    rows, totals, padded, ideal_bytes, padded_bytes = fn(c.tokens, c.hidden, c.ffn, c.splits)
    return _case(c, variant, rows, totals, ideal_bytes, padded_bytes, padded)


def estimate_config_direct(c: Config, variant: str = "te-2.20") -> CaseReport:
    """:func:`estimate_config` the straightforward way: walk the model, number the buffers, total the rows."""
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}", key="--variant")
    acc = Model(c).build()
    rows, ideals = finalize(acc, c, variant)
    padded = [
        {"index": r.index, "ideal_bytes": ideal, "padded_bytes": r.bytes}
        for r, ideal in zip(rows, ideals, strict=True)
        if ideal != r.bytes
    ]
    return _case(c, variant, rows, compute_totals(rows), sum(ideals), sum(r.bytes for r in rows), padded)


def _case(
    c: Config,
    variant: str,
    rows: list[Row],
    totals: Totals,
    ideal_bytes: int,
    padded_bytes: int,
    padded: list[dict[str, int]],
) -> CaseReport:
    # CaseSpec.make(TARGET, ...) with the TE target's dimensions, made directly (the estimator's hot path)
    spec = object.__new__(CaseSpec)  # CaseSpec(...) without the frozen dataclass's per-field __setattr__
    spec.__dict__.update(
        target=TARGET,
        recipe=c.recipe,
        groups=c.groups,
        shape=(("tokens", c.tokens), ("hidden", c.hidden), ("ffn", c.ffn)),
        dtype=c.dtype,
        device=DEVICE,
        options={"estimate": True, "variant": variant, "path": c.path, "arch": c.arch, "te": TE_VERSION},
        splits=tuple(c.splits),
    )
    return CaseReport(
        spec,
        id=case_id(c),
        path=PathInfo(
            {
                "estimated": True,
                "name": c.path,
                "fused": c.fused,
                "arch": c.arch,
                "dense_single_group": c.fused and c.groups == 1 and c.dense_single_group,
                "padding": {
                    "ideal_bytes": ideal_bytes,
                    "padded_bytes": padded_bytes,
                    "rows": padded,
                },
            }
        ),
        rows=rows,
        totals=totals,
    )


def estimate(
    spec: CaseSpec,
    *,
    path: str | None = None,
    variant: str = "te-2.20",
    arch: str | None = None,
    dense_single_group: bool = True,
    probs_dtype: str | None = None,
    split_sizes_dtype: str | None = None,
) -> CaseReport:
    """Estimate the saved set of ``spec`` (a CaseSpec or anything with its fields) on ``path``.

    ``probs_dtype`` / ``split_sizes_dtype`` default to ``spec.options`` keys of the same name,
    else float32 probs and int64 split sizes (one tensor passed to FC1 and FC2).
    """
    options = getattr(spec, "options", None) or {}
    splits = getattr(spec, "splits", None)
    dims = dict(spec.shape) if type(spec) is CaseSpec else {}  # a CaseSpec's dimensions without its __getattr__
    c = resolve(
        spec.recipe,
        dims["tokens"] if "tokens" in dims else spec.tokens,
        dims["hidden"] if "hidden" in dims else spec.hidden,
        dims["ffn"] if "ffn" in dims else spec.ffn,
        spec.groups,
        splits=splits,
        path=path,
        arch=arch,
        dtype=getattr(spec, "dtype", "bf16"),
        dense_single_group=dense_single_group,
        probs_dtype=probs_dtype or options.get("probs_dtype", "float32"),
        split_sizes_dtype=split_sizes_dtype or options.get("split_sizes_dtype", "int64"),
    )
    return estimate_config(c, variant)


def make_spec(
    recipe: str, tokens: int, hidden: int, ffn: int, groups: int, splits: Sequence[int] | None = None, **options: Any
) -> CaseSpec:
    """A CaseSpec for the TE grouped-MLP target (for callers without one): ``CaseSpec.make`` with
    the target's dimensions, made directly (a test checks the two agree)."""
    return CaseSpec(
        TARGET,
        recipe,
        groups,
        (("tokens", tokens), ("hidden", hidden), ("ffn", ffn)),
        "bf16",
        "cpu",
        options,
        tuple(splits) if splits is not None else None,
    )


EXPECTED_RECIPES = ("bf16", "fp8-delayed", "fp8-current")


def expected_rows(spec: CaseSpec) -> list[Row] | None:
    """Rows the H200 (SM90, cuBLASLt < 13.4: split-quantize path) should measure for ``spec``.

    None where the estimator does not cover the case: another target, recipe or activation, a
    single grouped weight, or specs the estimator rejects. Assumes the target passes int64 split
    sizes on the device (one tensor for FC1 and FC2) and float32 probs unless ``spec.options``
    says otherwise (``split_sizes_dtype``, ``probs_dtype``).
    """
    if spec.target != TARGET or spec.recipe not in EXPECTED_RECIPES:
        return None
    opts = spec.options or {}
    if opts.get("single_grouped_weight") or opts.get("activation", "swiglu") != "swiglu":
        return None
    try:
        case = estimate(spec, path="unfused-split", arch="sm90")
    except UsageError:
        return None
    device = spec.device if ":" in spec.device or spec.device == "cpu" else f"{spec.device}:0"
    return [dataclasses.replace(r, device=device) for r in case.rows]


def estimate_report(cases: list[CaseReport]) -> Report:
    """A memaudit report around estimated cases (environment: this memaudit, Python, the modelled TE)."""

    return Report(
        cases=cases,
        environment={
            "memaudit": memaudit.__version__,
            "python": platform.python_version(),
            "estimate": True,
            "transformer_engine": TE_VERSION,
            "device": "estimate",
        },
        memaudit=memaudit.__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
