"""Run a matrix of cases; a fault in one case never stops the others."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import torch

import memaudit
from memaudit.capture import capture
from memaudit.environment import environment
from memaudit.report import CaseReport, PathInfo, Report, compute_totals
from memaudit.spec import CaseSpec
from memaudit.targets.base import Target


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def empty_case(spec: CaseSpec) -> CaseReport:
    """A case report with the spec's fields and no rows yet."""
    return CaseReport(dataclasses.replace(spec, options=dict(spec.options), splits=tuple(spec.split_sizes())))


def run_case(target: Target, spec: CaseSpec, *, backward: bool = True, verify_allocator: bool = False,
             stack: bool = False) -> CaseReport:
    """Run one case under ``capture()``; errors and OOM become an ``error`` cell.

    ``stack`` records the user source line of each save (``Row.source``).

    ``verify_allocator`` (CUDA) first runs one forward and backward as a warm-up (lazy library
    handles and workspaces are allocated there, not in the measured forward), then compares the
    allocator's growth over the measured forward with the rows (``case.allocator``).
    """
    case = empty_case(spec)
    reason = target.skip_reason(spec)
    if reason:
        case.status, case.reason = "skipped", reason
        return case
    built = outputs = None
    try:
        built = target.build(spec)
        case.options = {**case.options, **built.options}
        if verify_allocator:
            with capture() as warm:
                outputs = built.forward(warm)
            built.backward(outputs)
            outputs = None
            del warm
            gc.collect()
        with capture(verify_allocator=verify_allocator, stack=stack) as cap:
            outputs = built.forward(cap)
        measured = cap.report(outputs=outputs)
        path = built.annotate(measured.rows, cap)
        case.path = None if path is None else PathInfo(path)
        case.rows = measured.rows
        case.freed = measured.freed
        case.complete = measured.complete
        case.totals = compute_totals(case.rows, case.freed)
        case.allocator = measured.allocator
        case.warnings = measured.warnings + built.warnings
        if backward:
            built.backward(outputs)
    except torch.cuda.OutOfMemoryError as exc:
        case.status, case.reason = "error", "out of memory: " + _first_line(exc)
    except Exception as exc:  # noqa: BLE001 - one cell's fault is that cell's error
        case.status, case.reason = "error", _first_line(exc)
    finally:
        if built is not None:
            case.emulation = built.emulation()
        del built, outputs
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return case


def run_matrix(
    target: Target,
    specs: Iterable[CaseSpec],
    *,
    backward: bool = True,
    verify_allocator: bool = False,
    on_case: Callable[[CaseReport], None] | None = None,
    stack: bool = False,
) -> Report:
    """Run every spec in order and collect a Report."""
    specs = list(specs)
    device = specs[0].device if specs else "cpu"
    cases = []
    for spec in specs:
        case = run_case(target, spec, backward=backward, verify_allocator=verify_allocator, stack=stack)
        cases.append(case)
        if on_case is not None:
            on_case(case)
    return Report(
        cases=cases,
        environment=environment(device),
        memaudit=memaudit.__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
