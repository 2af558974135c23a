"""The run object: ``plan(...) -> Plan``, ``run(plan, on_case=...) -> Report``, then
:func:`memaudit.judge.outcome.conclude` (re-exported here) for the exit status.

``memaudit run`` is these three calls and what it shows and writes; a program does the same::

    from memaudit import audit
    p = audit.plan(target="reference", groups=[1, 4], dims={"tokens": 256})
    report = audit.run(p)
    outcome = audit.conclude(report, p.scenario)

Everything a plan holds is validated before anything runs (a bad flag, scenario key or value is a
:class:`~memaudit.errors.UsageError` naming it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memaudit.distributed.world import torchrun_env
from memaudit.errors import UsageError
from memaudit.judge.outcome import Outcome, conclude
from memaudit.judge.scenario import Scenario, allowed_targets, load_scenario
from memaudit.report import CaseReport, Report
from memaudit.runner import plan_fallbacks, run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets import registry
from memaudit.targets.base import Fallback, Target
from memaudit.targets.matrix import build_specs

__all__ = ["Outcome", "Plan", "conclude", "plan", "run"]


@dataclass(frozen=True)
class Plan:
    """What a run will run: the configured target (and the name it was asked by), the scenario
    (or None), the device, the fallback mode, the specs, and each spec's read analysis."""

    target: Target
    target_name: str
    scenario: Scenario | None
    device: str
    fallback: str
    specs: tuple[CaseSpec, ...]
    unread: tuple[str | None, ...]
    backward: bool = True

    def fallbacks(self) -> list[Fallback | None]:
        """What answers each spec the target cannot run on real kernels here (None: real kernels, or
        a skipped cell)."""
        return plan_fallbacks(self.target, list(self.specs), self.fallback, backward=self.backward)


def plan(
    *,
    target: str | None = None,
    recipe: str | None = None,
    groups: Sequence[int] | None = None,
    dims: Mapping[str, int | None] | None = None,
    flags: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    device: str | None = None,
    splits: str | None = None,
    scenario: str | Path | None = None,
    allow_targets: Sequence[str] = (),
    fallback: str | None = None,
    backward: bool = True,
    unread: str | None = None,
    distributed: bool = False,
) -> Plan:
    """Validate what to run: a target by name (the default where None) and its matrix, or a
    scenario file (its cases and flags; ``flags`` given here win where they differ from the
    target's defaults; a name that is no target's flag is a dimension, as the command line gives
    them together). ``unread`` is the read analysis for every case (``observed``, ``poisoned``,
    ``both``; the scenario's where None)."""
    loaded = load_scenario(scenario, allowed_targets(tuple(allow_targets))) if scenario is not None else None
    name = loaded.target if loaded is not None else (target or registry.default_target_name())
    tgt = loaded.owner if loaded is not None else registry.get_target(name)
    flag_names = {f.name for f in tgt.flags} | {f.name for t in registry.builtin_targets() for f in t.flags}
    given = {k: v for k, v in (flags or {}).items() if k in flag_names}
    dims = {**{k: v for k, v in (flags or {}).items() if k not in flag_names}, **(dims or {})}
    if loaded is not None:  # the scenario's [flags], where the caller left the default
        defaults = {f.name: f.default for f in tgt.flags}
        for key, value in loaded.flags.items():
            if given.get(key, defaults[key]) == defaults[key]:
                given[key] = value
    tgt = tgt.configure(given)
    options = dict(tgt.options)
    dev = device if device is not None else tgt.default_device
    mode = fallback if fallback is not None else ("none" if loaded is not None else "auto")
    if loaded is not None:
        specs = loaded.specs(device=dev, options=options, target=tgt)  # the target's options from the [flags] too
    else:
        specs = build_specs(
            tgt,
            recipe=recipe,
            groups=list(groups) if groups is not None else None,
            dims=dict(dims or {}),
            dtype=dtype,
            device=dev,
            options=options,
            splits=splits,
            all_recipes=tgt.fallback_recipes if mode != "none" else None,
        )
    methods = _unread_plan(specs, loaded, unread, backward=backward, distributed=distributed)
    return Plan(tgt, name, loaded, dev, mode, tuple(specs), tuple(methods), backward)


def _unread_plan(
    specs: list[CaseSpec], loaded: Scenario | None, given: str | None, *, backward: bool, distributed: bool
) -> list[str | None]:
    """The read analysis of each spec (``given`` wins over the scenario's ``unread``), checked
    before anything runs: it needs backward and a plain (not distributed) run."""
    scenario_methods = loaded.unread_methods() if loaded is not None else [None] * len(specs)
    methods = [given or m for m in scenario_methods]
    if not any(methods):
        return methods
    key = "--unread" if given else "unread"
    if not backward:
        raise UsageError("finds what backward never reads, so it needs backward: drop --no-backward", key=key)
    if distributed or torchrun_env() is not None:
        raise UsageError("runs in one process for now: not with --nproc or under torchrun", key=key)
    return methods


def run(
    p: Plan,
    *,
    on_case: Callable[[CaseReport], None] | None = None,
    on_start: Callable[[CaseSpec, int, int], None] | None = None,
    fallbacks: Sequence[Fallback | None] | None = None,
    verify_allocator: bool = False,
    stack: bool = False,
    snapshot: str | None = None,
) -> Report:
    """Run the plan's specs in this process (``on_start(spec, i, n)`` before each, ``on_case(case)``
    after each); one report. Consecutive specs with the same read analysis run as one matrix."""
    fbs = list(fallbacks) if fallbacks is not None else p.fallbacks()
    chunks: list[tuple[int, int, str | None]] = []  # (start, end, method)
    for i, m in enumerate(p.unread):
        if chunks and chunks[-1][2] == m:
            chunks[-1] = (chunks[-1][0], i + 1, m)
        else:
            chunks.append((i, i + 1, m))
    chunks = chunks or [(0, 0, None)]
    specs = list(p.specs)
    reports = []
    for start, end, method in chunks:

        def started(spec: CaseSpec, i: int, n: int, start: int = start) -> None:
            if on_start is not None:
                on_start(spec, start + i, len(specs))

        extra: dict[str, Any] = {"unread": method} if method is not None else {}
        reports.append(
            run_matrix(
                p.target,
                specs[start:end],
                backward=p.backward,
                verify_allocator=verify_allocator,
                on_case=on_case,
                on_start=started,
                fallbacks=fbs[start:end],
                stack=stack,
                snapshot=snapshot,
                **extra,
            )
        )
    report = reports[0]
    for other in reports[1:]:
        report.cases.extend(other.cases)
    return report
