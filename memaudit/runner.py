"""Run a matrix of cases; a fault in one case never stops the others."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import torch

import memaudit
from memaudit.capture import capture
from memaudit.capture.reads import UNKNOWN
from memaudit.environment import environment
from memaudit.errors import Terminated
from memaudit.report import CaseReport, PathInfo, Report, Totals, Unread, with_verdicts
from memaudit.spec import CaseSpec
from memaudit.targets.base import Fallback, Target
from memaudit.unread import (
    METHODS,
    Trial,
    Verdicts,
    combine,
    gradients,
    observe,
    observed_verdicts,
    poison_storage,
    poisonable,
    poisoned,
    poisoned_verdicts,
    same,
)


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: the case's code called sys.exit({exc.code!r})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def empty_case(spec: CaseSpec) -> CaseReport:
    """A case report with the spec's fields and no rows yet."""
    return CaseReport(dataclasses.replace(spec, options=dict(spec.options), splits=tuple(spec.split_sizes())))


def run_case(
    target: Target,
    spec: CaseSpec,
    *,
    backward: bool = True,
    verify_allocator: bool = False,
    stack: bool = False,
    snapshot: str | None = None,
    unread: str | None = None,
) -> CaseReport:
    """Run one case under ``capture()``; errors and OOM become an ``error`` cell.

    ``stack`` records the user source line of each save (``Row.source``). ``snapshot`` (CUDA)
    writes the allocator history of the captured forward there, each saved buffer's block named
    after its row (:mod:`memaudit.capture.snapshot`).

    ``verify_allocator`` (CUDA) first runs one forward and backward as a warm-up (lazy library
    handles and workspaces are allocated there, not in the measured forward), then compares the
    allocator's growth over the measured forward with the rows (``case.allocator``).

    ``unread`` (one of :data:`memaudit.unread.METHODS`) gives every saved buffer a verdict, read,
    unread or unknown, by the methods it names (:mod:`memaudit.unread`); it needs ``backward``.

    A target whose ``case_host(spec)`` names a host (a child process, for TE's forward on fake
    CUDA) runs the case there; a host that fails to return it makes the case's error cell.
    """
    if unread is not None and (unread not in METHODS or not backward):
        raise ValueError(f"unread must be one of {', '.join(METHODS)} and needs backward, got {unread!r}")
    elsewhere = target.case_host(spec)
    if elsewhere is None:
        return run_case_here(
            target,
            spec,
            backward=backward,
            verify_allocator=verify_allocator,
            stack=stack,
            snapshot=snapshot,
            unread=unread,
        )
    if snapshot is not None:
        raise ValueError("an allocator snapshot is recorded in this process: a case run elsewhere cannot write one")
    try:
        return elsewhere(
            lambda: run_case_here(
                target, spec, backward=backward, verify_allocator=verify_allocator, stack=stack, unread=unread
            )
        )
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one cell's fault is that cell's error
        case = empty_case(spec)
        case.status, case.reason = "error", _first_line(exc)
        return case


def run_case_here(
    target: Target,
    spec: CaseSpec,
    *,
    backward: bool = True,
    verify_allocator: bool = False,
    stack: bool = False,
    snapshot: str | None = None,
    unread: str | None = None,
) -> CaseReport:
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
        observed: Verdicts | None = None
        if backward and unread in ("observed", "both"):
            with observe(cap) as obs:
                built.backward(outputs)
            observed = observed_verdicts(obs, case.rows)
        elif backward:
            built.backward(outputs)
        if unread is not None:
            _verdicts(case, target, spec, unread, observed, built.emulation() is not None)
    except torch.cuda.OutOfMemoryError as exc:
        _failed(case, "out of memory: " + _first_line(exc))
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one cell's fault is that cell's error (a sys.exit too)
        _failed(case, _first_line(exc))
    finally:
        if built is not None:
            case.emulation = built.emulation()
        del built, outputs
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return case


class Disagreement(RuntimeError):
    """The two ``--unread`` methods call one row read and the other unread: the case's error."""


def _failed(case: CaseReport, reason: str) -> None:
    """Make ``case`` an error cell: what failed, and none of what a partial run had measured (an
    error case has no rows, so a fault after the forward leaves none behind)."""
    case.status, case.reason = "error", reason
    case.rows, case.freed, case.modules = [], [], []
    case.totals, case.allocator, case.unread = Totals(), None, None


def _verdicts(
    case: CaseReport, target: Target, spec: CaseSpec, method: str, observed: Verdicts | None, emulated: bool
) -> None:
    """Put the ``--unread`` verdicts on ``case``'s rows (:mod:`memaudit.unread`)."""
    methods = ["observed"] if observed is not None else []
    notes: list[str] = []
    second: Verdicts | None = None
    if method in ("poisoned", "both"):
        if emulated:
            notes.append(
                "poisoned buffers not run: emulated kernels compute no values (the poisoned method needs real kernels)"
            )
        else:
            second, note = _poison(case, target, spec, observed)
            if second is None:
                notes.append(note)
            else:
                methods.append("poisoned")
                notes.append(note)
    if observed is not None and second is not None:
        verdicts, disagree = combine(observed, second, case.rows)
        if disagree:
            raise Disagreement(
                f"observed reads and poisoned buffers disagree on {len(disagree)} row(s): "
                + "; ".join(disagree[:3])
                + (" ..." if len(disagree) > 3 else "")
            )
    elif observed is not None or second is not None:
        verdicts = observed if observed is not None else second  # type: ignore[assignment]
    else:  # no method could run: the case has no verdicts (unread_bytes stays null) and says why
        case.warnings = [*case.warnings, *(f"--unread: {n}" for n in notes)]
        return
    with_verdicts(case, verdicts, Unread(methods=methods, notes=notes))


def _poison(case: CaseReport, target: Target, spec: CaseSpec, observed: Verdicts | None) -> tuple[Verdicts | None, str]:
    """The poisoned method's verdicts (or None) and what to note about it."""
    storages = poisonable(case.rows)
    if not storages:
        return None, "poisoned buffers not run: no saved buffer holds a payload that may be poisoned"
    layout = _layout(case.rows)
    trial = _trial(target, spec, layout)
    first, again = trial(frozenset(), ""), trial(frozenset(), "")
    if isinstance(first, BaseException) or isinstance(again, BaseException):
        bad = first if isinstance(first, BaseException) else again
        assert isinstance(bad, BaseException)
        return None, f"poisoned buffers not run: a clean rerun failed ({_first_line(bad)})"
    if not same(first, again):
        return None, "poisoned buffers not run: two clean runs gave different gradients (backward is not deterministic)"
    if not first:
        return (
            None,
            "poisoned buffers not run: the case has no gradients to compare (no parameter or input requires grad)",
        )
    prior = None
    if observed is not None:
        by_storage: dict[str, str] = {}
        for row in case.rows:
            if row.storage is not None and row.index in observed:
                v = observed[row.index][0]
                by_storage[row.storage] = v if by_storage.get(row.storage) in (None, v) else UNKNOWN
        prior = by_storage
    read, trials = poisoned(trial, storages, prior, reference=first)
    return poisoned_verdicts(
        read, case.rows
    ), f"poisoned buffers: {len(storages)} storage(s) in {trials + 2} runs, two fills (0xFF, random bytes)"


def _layout(rows: list[Any]) -> list[tuple[Any, ...]]:
    """What a rerun must save again, row for row, for its storages to stand for this run's."""
    return [(r.kind, r.dtype, tuple(r.shape), r.storage, r.container_index) for r in rows]


def _trial(target: Target, spec: CaseSpec, layout: list[tuple[Any, ...]]) -> Trial:
    """One rerun of the case (a fresh build) with named storages poisoned before backward."""

    def trial(group: frozenset[str], fill: str) -> list[torch.Tensor] | BaseException:
        built = target.build(spec)
        with capture() as cap:
            outputs = built.forward(cap)
        rerun = cap.report(outputs=outputs)
        if _layout(rerun.rows) != layout:
            return RuntimeError("the rebuilt case saved other buffers than the measured run")
        refs = cap.row_storages()
        restore = [
            poison_storage(st, fill)
            for name in sorted(group)
            for ref in refs.get(name, ())
            if (st := ref()) is not None
        ]
        try:
            built.backward(outputs)
            return gradients(built.model, built.inputs)
        except Exception as exc:  # noqa: BLE001 - backward failing on poisoned contents is a read
            return exc
        finally:
            for undo in restore:
                undo()
            del built, outputs, cap

    return trial


def plan_fallbacks(
    target: Target, specs: Sequence[CaseSpec], mode: str, *, backward: bool = True
) -> list[Fallback | None]:
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
    unread: str | None = None,
) -> Report:
    """Run every spec in order and collect a Report; where ``fallbacks`` (from
    :func:`plan_fallbacks`) names an answer for a spec, that answer replaces the skipped cell.

    ``on_start(spec, i, n)`` is called before case ``i`` of ``n`` (from 1) runs, ``on_case(case)``
    after it. Each spec is first placed (:meth:`~memaudit.targets.base.Target.place`) for ``rank`` of
    ``world_size``; with a process-group ``backend`` (a distributed run) each case records where it
    ran (``case.dist``) and its id ends with its coordinates. ``snapshot`` (one case, run here on
    CUDA) writes that case's allocator snapshot (:func:`run_case`). ``unread`` gives every saved
    buffer of each case run (not of an estimate) a verdict (:func:`run_case`).
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
            case = run_case(
                target,
                spec,
                backward=backward,
                verify_allocator=verify_allocator,
                stack=stack,
                snapshot=snapshot,
                unread=unread,
            )
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
