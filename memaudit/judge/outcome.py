"""A finished report's outcome: judged, with its exit status and what must be said about it.

:func:`conclude` is the one place that turns a report (and a scenario) into an exit status: the
verdicts, a case's error, data-parallel replicas that disagree, a run that measured nothing, and a
check that judged nothing or a budget that applied to no case. The command line only shows the
:class:`Outcome` and writes files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memaudit.judge import exitcodes
from memaudit.judge.scenario import (
    Scenario,
    Unjudged,
    evaluate,
    nothing_judged,
    outcome,
    record_verdicts,
    unjudged,
)
from memaudit.report import Report
from memaudit.targets.registry import owner_of

OUTCOME_CODES = {"ok": exitcodes.OK, "fail": exitcodes.FAIL, "case_error": exitcodes.CASE_ERROR}
"""A judged scenario's outcome (:func:`memaudit.judge.scenario.outcome`) -> exit status."""


@dataclass(frozen=True)
class Note:
    """Something to say about the outcome: ``level`` is ``error`` (it fails the run), ``warning``,
    ``note`` or ``info`` (said as it is)."""

    level: str
    text: str


@dataclass
class Outcome:
    """What a report came to: the exit status, the verdicts (None without a scenario), the notes
    in the order to say them, and the budgets that judged no case."""

    code: int
    verdicts: list[Any] | None = None
    notes: list[Note] = field(default_factory=list)
    unjudged: list[Unjudged] = field(default_factory=list)


def conclude(
    report: Report,
    scenario: Scenario | None = None,
    *,
    allow_incomplete: bool = False,
    allow_na: bool = False,
    strict: bool = False,
    expected: bool = False,
    must_measure: bool = True,
    replica_problems: list[str] | None = None,
    source: str | None = None,
) -> Outcome:
    """Judge ``report`` (against ``scenario``'s budgets where given; stores the verdicts on its
    cases) and pick the exit status.

    ``expected`` first puts each case's target model beside its rows (``run --expected``);
    ``must_measure`` (``run``) makes a report with no measured or emulated case exit
    :data:`~memaudit.judge.exitcodes.NOTHING_MEASURED`; ``replica_problems`` (a distributed run) are
    data-parallel replicas that should save the same and do not (each fails); ``strict`` fails a
    budget whose cases did not run (``check --strict``); ``allow_na`` passes a check that judged nothing.
    """
    if expected:
        for case in report.cases:  # the case's own target: a fallback's answer is TE's
            owner = owner_of(case.spec)
            if owner is not None:
                owner.attach_expected(case)
    result = Outcome(exitcodes.CASE_ERROR if any(c.status == "error" for c in report.cases) else exitcodes.OK)
    if scenario is not None:
        result.verdicts = evaluate(report, scenario, source=source or scenario.path, allow_incomplete=allow_incomplete)
        record_verdicts(report, result.verdicts, scenario)
        result.code = OUTCOME_CODES[outcome(report, result.verdicts, scenario)]
    for line in replica_problems or ():
        result.notes.append(Note("error", f"data-parallel replicas should save the same: {line}"))
        result.code = exitcodes.FAIL if result.code == exitcodes.OK else result.code
    answered = [c for c in report.cases if c.status == "ok" and c.execution in ("measured", "emulated")]
    if must_measure and not answered and result.code == exitcodes.OK:
        counts = {
            s: sum(1 for c in report.cases if (c.execution if c.status == "ok" else c.status) == s)
            for s in ("estimated", "skipped", "error")
        }
        what = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        result.notes.append(
            Note(
                "info",
                f"nothing was measured or emulated{': ' + what if what else ''} (exit {exitcodes.NOTHING_MEASURED})",
            )
        )
        result.code = exitcodes.NOTHING_MEASURED
    if scenario is not None and result.verdicts is not None and (scenario.rules or not must_measure):
        if _vacuity(result, report, scenario, allow_na=allow_na, strict=strict) and result.code == exitcodes.OK:
            result.code = exitcodes.FAIL
    return result


def _vacuity(result: Outcome, report: Report, scenario: Scenario, *, allow_na: bool, strict: bool) -> bool:
    """Note what a check did not judge; True when that fails it.

    A check that judged nothing (every budget n/a on every case: every case skipped, say) fails,
    and so does a budget that could apply to no case of the report (``Unjudged.vacuous``), unless
    ``allow_na``. A budget whose cases did not run or took another path is a note (a failure
    under ``strict``).
    """
    assert result.verdicts is not None
    fails = False
    if nothing_judged(result.verdicts):
        covered = [c for c in report.cases if scenario.covers(c)]
        states = {s: sum(1 for c in covered if c.status == s) for s in ("ok", "skipped", "error")}
        what = ", ".join(f"{n} {s}" for s, n in states.items() if n) or "no case"
        why = "the scenario has no budgets" if not scenario.rules else f"every budget is n/a on every case ({what})"
        if allow_na:
            result.notes.append(Note("warning", f"nothing was judged: {why}"))
        else:
            result.notes.append(Note("error", f"nothing was judged: {why}; --allow-na passes such a check"))
            fails = True
    for u in unjudged(report, result.verdicts, scenario):
        result.unjudged.append(u)
        failing = not allow_na and (u.vacuous or strict)
        level = "error" if failing else ("warning" if u.vacuous else "note")
        tail = "" if not failing else " (it checked nothing; --allow-na passes it)" if u.vacuous else " (--strict)"
        result.notes.append(Note(level, u.text() + tail))
        fails = fails or failing
    return fails
