"""Run a matrix of cases; a fault in one case never stops the others."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

import torch

import memaudit
from memaudit.capture import capture
from memaudit.environment import environment
from memaudit.errors import Terminated
from memaudit.report import CaseReport, PathInfo, Report
from memaudit.spec import CaseSpec
from memaudit.targets.base import Fallback, Target


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: the case's code called sys.exit({exc.code!r})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def empty_case(spec: CaseSpec) -> CaseReport:
    """A case report with the spec's fields and no rows yet."""
    return CaseReport(dataclasses.replace(spec, options=dict(spec.options), splits=tuple(spec.split_sizes())))


def run_case(target: Target, spec: CaseSpec, *, backward: bool = True, verify_allocator: bool = False,
             stack: bool = False, snapshot: str | None = None) -> CaseReport:
    """Run one case under ``capture()``; errors and OOM become an ``error`` cell.

    ``stack`` records the user source line of each save (``Row.source``). ``snapshot`` (CUDA)
    writes the allocator history of the captured forward there, each saved buffer's block named
    after its row (:mod:`memaudit.capture.snapshot`).

    ``verify_allocator`` (CUDA) first runs one forward and backward as a warm-up (lazy library
    handles and workspaces are allocated there, not in the measured forward), then compares the
    allocator's growth over the measured forward with the rows (``case.allocator``).

    A target whose ``case_host(spec)`` names a host (a child process, for TE's forward on fake
    CUDA) runs the case there; a host that fails to return it makes the case's error cell.
    """
    elsewhere = target.case_host(spec)
    if elsewhere is None:
        return run_case_here(target, spec, backward=backward, verify_allocator=verify_allocator, stack=stack, snapshot=snapshot)
    if snapshot is not None:
        raise ValueError("an allocator snapshot is recorded in this process: a case run elsewhere cannot write one")
    try:
        return elsewhere(lambda: run_case_here(target, spec, backward=backward, verify_allocator=verify_allocator, stack=stack))
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one cell's fault is that cell's error
        case = empty_case(spec)
        case.status, case.reason = "error", _first_line(exc)
        return case


def run_case_here(target: Target, spec: CaseSpec, *, backward: bool = True, verify_allocator: bool = False,
                  stack: bool = False, snapshot: str | None = None) -> CaseReport:
    """:func:`run_case` in this process, whatever host the target names."""
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
        with capture(verify_allocator=verify_allocator, stack=stack, snapshot=snapshot) as cap:
            outputs = built.forward(cap)
        measured = cap.report(outputs=outputs)
        path = built.annotate(measured.rows, cap)
        case.path = None if path is None else PathInfo(path)
        case.rows = measured.rows
        case.freed = measured.freed
        case.complete = measured.complete
        case.totals = measured.totals  # the capture's, over these rows (annotate names a path, never a row)
        case.allocator = measured.allocator
        case.modules = measured.modules
        case.warnings = measured.warnings + built.warnings
        if backward:
            built.backward(outputs)
    except torch.cuda.OutOfMemoryError as exc:
        case.status, case.reason = "error", "out of memory: " + _first_line(exc)
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one cell's fault is that cell's error (a sys.exit too)
        case.status, case.reason = "error", _first_line(exc)
    finally:
        if built is not None:
            case.emulation = built.emulation()
        del built, outputs
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return case


def plan_fallbacks(target: Target, specs: Sequence[CaseSpec], mode: str, *, backward: bool = True) -> list[Fallback | None]:
    """For each spec the target cannot run on real kernels here, its best available answer
    (:class:`~memaudit.targets.base.Fallback`: emulated or estimated), else None. ``mode`` is one
    of :data:`~memaudit.targets.base.FALLBACKS`; ``none`` (or a target that offers none)
    plans nothing, and those cases stay skipped."""
    if mode == "none":
        return [None] * len(specs)
    out: list[Fallback | None] = []
    for spec in specs:
        reason = target.skip_reason(spec)
        out.append(target.fallback(spec, reason, mode, backward=backward) if reason else None)
    return out


def _run_fallback(fallback: Fallback, spec: CaseSpec) -> CaseReport:
    try:
        return fallback.run()
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one cell's fault is that cell's error
        case = empty_case(spec)
        case.status, case.reason = "error", f"{fallback.execution} fallback: {_first_line(exc)}"
        return case


def run_matrix(
    target: Target,
    specs: Iterable[CaseSpec],
    *,
    backward: bool = True,
    verify_allocator: bool = False,
    on_case: Callable[[CaseReport], None] | None = None,
    fallbacks: Sequence[Fallback | None] | None = None,
    on_start: Callable[[CaseSpec, int, int], None] | None = None,
    stack: bool = False,
    rank: int = 0,
    world_size: int = 1,
    backend: str | None = None,
    snapshot: str | None = None,
) -> Report:
    """Run every spec in order and collect a Report; where ``fallbacks`` (from
    :func:`plan_fallbacks`) names an answer for a spec, that answer replaces the skipped cell.

    ``on_start(spec, i, n)`` is called before case ``i`` of ``n`` (from 1) runs, ``on_case(case)``
    after it. Each spec is first placed (:meth:`~memaudit.targets.base.Target.place`) for ``rank`` of
    ``world_size``; with a process-group ``backend`` (a distributed run) each case records where it
    ran (``case.dist``) and its id ends with its coordinates. ``snapshot`` (one case, run here on
    CUDA) writes that case's allocator snapshot (:func:`run_case`).
    """
    specs = list(specs)
    device = specs[0].device if specs else "cpu"
    cases = []
    for i, given in enumerate(specs, 1):
        if on_start is not None:
            on_start(given, i, len(specs))
        spec, info = target.place(given, rank, world_size)
        fallback = fallbacks[i - 1] if fallbacks is not None else None
        if fallback is not None:
            case = _run_fallback(fallback, spec)
        else:
            case = run_case(target, spec, backward=backward, verify_allocator=verify_allocator, stack=stack, snapshot=snapshot)
        if backend is not None:
            case.dist = dataclasses.replace(info, backend=backend)
            case.id = f"{case.id}/{info.key}"
        cases.append(case)
        if on_case is not None:
            on_case(case)
    return Report(
        cases=cases,
        environment=environment(device),
        memaudit=memaudit.__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
