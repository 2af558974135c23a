"""What a report must say consistently about its targets, before any verdict is drawn from it.

:func:`memaudit.report.load_report` checks everything a report can be checked for without knowing
its targets (the schema, every field's type and range, totals against rows, row references,
unique ids, duplicate keys). This module adds what needs the targets' declarations: a case's
dimensions are its target's, its recipe one the target knows, its id the one its fields make,
and its splits add up to the dimension they split. Every command that draws a verdict from a
report it reads (``compare``, ``check``, ``baseline update``, ``plot``) reads it through
:func:`read_report`. docs/guides/ci.md states the whole promise, and what it does not cover.
"""

from __future__ import annotations

import os

from memaudit.errors import UsageError
from memaudit.report import CaseReport, Report, load_report
from memaudit.spec import CaseSpec, ShapeParam
from memaudit.targets import registry
from memaudit.targets.base import MLP_SHAPE, Target
from memaudit.targets.custom import CustomTarget


def read_report(path: str | os.PathLike[str]) -> Report:
    """:func:`~memaudit.report.load_report`, then :func:`verify_targets`: a UsageError names the
    file, the case and the field of the first thing the report cannot truthfully say."""
    report = load_report(path)
    verify_targets(report, source=str(path))
    return report


def verify_targets(report: Report, *, source: str = "<report>") -> None:
    """Raise a UsageError for the first case that contradicts its target (:func:`case_problem`)."""
    for case in report.cases:
        problem = case_problem(case)
        if problem is not None:
            key, message = problem
            raise UsageError(message, source=source, key=f"cases[{case.id}]" + (f".{key}" if key else ""))


def _declared(case: CaseReport) -> tuple[Target | None, tuple[ShapeParam, ...]] | None:
    """(the case's registered target or None, its dimensions), or None for a target no
    declaration covers (a bare ``capture()`` report). A custom factory is not imported: it is told
    the grouped MLP's dimensions, or none."""
    target = registry.owner_of(case.spec)
    if target is not None:
        return target, tuple(target.shape)
    if ":" in case.target:
        return None, (MLP_SHAPE if case.dims else ())
    return None


def case_problem(case: CaseReport) -> tuple[str, str] | None:
    """``(field, what is wrong)`` when the case contradicts its target's declaration, else None."""
    declared = _declared(case)
    if declared is None:
        return None
    target, shape = declared
    names = [p.name for p in shape]
    split = next((p.name for p in shape if p.split), None)
    if set(case.dims) != set(names):
        return (
            "",
            f"target {case.target!r} has dimensions {', '.join(names) or 'none'}; the case records "
            f"{', '.join(sorted(case.dims)) or 'none'}",
        )
    if target is not None and case.recipe not in target.recipes:
        return (
            "recipe",
            f"target {case.target!r} has no recipe {case.recipe!r} (it knows {', '.join(target.recipes)})",
        )
    spec = CaseSpec(
        case.target, case.recipe, case.groups, tuple((n, case.dims[n]) for n in names), case.dtype, case.device
    )
    made = target.case_id(spec) if target is not None else CustomTarget.custom_case_id(spec)
    if case.id != made and not case.id.startswith(made + "/"):
        return (
            "id",
            f"the id says {case.id!r}, but the case's target, recipe, groups, dimensions and dtype make "
            f"{made!r} (the gate matches cases by id: an id and fields that disagree are refused)",
        )
    if case.splits and split is not None and sum(case.splits) != case.dims[split]:
        return (
            "splits",
            f"splits {case.splits} add up to {sum(case.splits)}, not the case's {split} ({case.dims[split]})",
        )
    if case.dist is not None and target is not None:  # a target that places cases on ranks checks its own
        return target.rank_problem(case)
    return None
