"""Find the first commit that changed a case's saved state, as ``git bisect run`` would, driven by
memaudit's exact compare (:func:`memaudit.te.history.model.saved_state`).

The commits are the first-parent line from GOOD (exclusive) to BAD (inclusive), oldest first
(TE merges by squashing, so each is one PR). GOOD's saved state is the reference: a commit whose
state equals it is *old*, one whose state differs is *new*. A commit whose case does not run (an
error or skip cell that BAD does not share) is *skipped*, as ``git bisect skip``: the search tries
its neighbours, and where only skipped commits separate the last old from the first new, the
answer is that range. ``on="unread"`` bisects on the bytes backward never read instead
(:func:`memaudit.te.history.model.unread_state`; each commit runs with the read analysis). Binary search assumes what
``git bisect`` assumes: once changed, the state
stays changed; every tested commit is listed so that a reader can see where it did not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import CaseReport
from memaudit.te.history.cases import HistoryCase
from memaudit.te.history.history import run_version
from memaudit.te.history.model import RowChange, row_changes, saved_state, unread_of, unread_state
from memaudit.te.history.sources import PR_RE, TESource, commit_info, git_rev, rev_range


@dataclass
class Probe:
    """One tested commit."""

    commit: str
    verdict: str
    """``old`` (same saved state as GOOD), ``new`` (differs) or ``skip`` (the case did not run)."""
    status: str
    saved_bytes: int | None
    rows: int | None
    reason: str | None
    seconds: float
    """Wall time of the probe: shown while it runs and measured by the bench, never saved (two
    runs of a bisect write the same bytes)."""
    unread_bytes: int | None = None
    """Bytes backward never read, where the commit's case was analysed (a bisect on unread bytes)."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "commit": self.commit,
            "verdict": self.verdict,
            "status": self.status,
            "saved_bytes": self.saved_bytes,
            "rows": self.rows,
            "reason": self.reason,
        }
        if self.unread_bytes is not None:
            out["unread_bytes"] = self.unread_bytes
        return out


@dataclass
class BisectResult:
    """What the bisect found."""

    case: HistoryCase
    good: str
    bad: str
    commits: int
    first: str | None
    """The first commit whose saved state differs from GOOD's (None where skipped commits hide it)."""
    last_old: str
    candidates: list[str]
    """The commits that may be the first (one when found; more where skipped commits hide it)."""
    subject: str | None = None
    date: str | None = None
    probes: list[Probe] = field(default_factory=list)
    changes: list[RowChange] = field(default_factory=list)
    before: CaseReport | None = None
    after: CaseReport | None = None
    end: CaseReport | None = None
    """BAD's case: where ``after`` differs from it, a later commit changed the state again."""
    on: str = "saved"
    """What was bisected: ``saved`` (the saved state) or ``unread`` (the bytes backward never read)."""

    def state(self, c: CaseReport) -> tuple[Any, ...]:
        return unread_state(c) if self.on == "unread" else saved_state(c)

    @property
    def changed_again(self) -> bool:
        """The state at the first changed commit is not BAD's: another commit changed it later."""
        return (
            self.first is not None
            and self.after is not None
            and self.end is not None
            and self.state(self.after) != self.state(self.end)
        )

    @property
    def pr(self) -> int | None:
        m = PR_RE.search(self.subject or "")
        return int(m.group(1)) if m else None

    def summary(self) -> str:
        """One line: the commit, its PR and subject, and what changed."""
        if self.first is None:
            return (
                f"not found: {len(self.candidates)} commits after {self.last_old[:12]} did not run this case; "
                f"the change is in {', '.join(c[:12] for c in self.candidates)}"
            )
        return f"{self.first[:12]} {self.subject} ({self.date})"

    def to_dict(self) -> dict[str, Any]:
        b, a = self.before, self.after
        extra = {"on": self.on} if self.on != "saved" else {}  # bisects on the saved state are written as before
        return {
            **extra,
            "case": self.case.id,
            "good": self.good,
            "bad": self.bad,
            "commits": self.commits,
            "first": self.first,
            "subject": self.subject,
            "date": self.date,
            "pr": self.pr,
            "last_old": self.last_old,
            "candidates": self.candidates,
            "probes": [p.to_dict() for p in self.probes],
            "before": _state_dict(b),
            "after": _state_dict(a),
            "changes": [c.to_dict() for c in self.changes],
            "changed_again": self.changed_again,
        }


def _state_dict(c: CaseReport | None) -> dict[str, Any] | None:
    if c is None:
        return None
    out = {
        "status": c.status,
        "reason": c.reason,
        "saved_bytes": c.totals.saved_bytes if c.status == "ok" else None,
        "rows": len(c.rows) if c.status == "ok" else None,
        "fused": c.fused,
    }
    if unread_of(c) is not None:
        out["unread_bytes"] = unread_of(c)
    return out


Runner = Callable[[TESource, list[HistoryCase]], Any]


def _default_runner(source: TESource, cases: list[HistoryCase]) -> Any:
    return run_version(source, cases)[0]


def _unread_runner(source: TESource, cases: list[HistoryCase]) -> Any:
    return run_version(source, cases, unread="observed")[0]


BISECT_ON = ("saved", "unread")


def bisect(
    repo: Path,
    good: str,
    bad: str,
    case: HistoryCase,
    cache: Path,
    *,
    run: Runner | None = None,
    on_probe: Callable[[Probe, int], None] | None = None,
    on: str = "saved",
) -> BisectResult:
    """The first commit on GOOD..BAD's first-parent line whose saved state of ``case`` (``on="unread"``:
    its unread bytes and rows) differs from GOOD's. UsageError where GOOD and BAD have the same state
    (nothing to find), GOOD's case does not run, or (``unread``) a case was not analysed."""
    if on not in BISECT_ON:
        raise UsageError(f"expected one of {', '.join(BISECT_ON)}, got {on!r}", key="--bisect-on")
    run = run or (_unread_runner if on == "unread" else _default_runner)

    def state(c: CaseReport) -> tuple[Any, ...]:
        if on == "saved":
            return saved_state(c)
        try:
            return unread_state(c)
        except ValueError as exc:
            raise UsageError(str(exc), key="--bisect-on") from None

    line = rev_range(repo, f"{good}..{bad}", "--bisect")
    first_commit, commits = line[0], line[1:]
    if not commits:
        raise UsageError(f"{bad!r} has no commit after {good!r} on its first-parent line", key="--bisect")
    cache_states: dict[str, CaseReport] = {}
    probes: list[Probe] = []

    def test(commit: str) -> CaseReport:
        if commit in cache_states:
            return cache_states[commit]
        t0 = time.perf_counter()
        source = git_rev(repo, commit, cache)
        report = run(source, [case])
        c = report.case(case.id)
        assert c is not None, f"the report of {commit[:12]} has no case {case.id}"
        cache_states[commit] = c
        probes.append(
            Probe(
                commit,
                "",
                c.status,
                c.totals.saved_bytes if c.status == "ok" else None,
                len(c.rows) if c.status == "ok" else None,
                c.reason,
                time.perf_counter() - t0,
                unread_of(c),
            )
        )
        return c

    def verdict(c: CaseReport) -> str:
        if state(c) == ref:
            return "old"
        if c.status != "ok" and state(c) != bad_state:
            return "skip"
        return "new"

    def note(commit: str, v: str) -> None:
        p = next(p for p in probes if p.commit == commit)
        if not p.verdict:
            p.verdict = v
            if on_probe is not None:
                on_probe(p, len(probes))

    g = test(first_commit)
    if g.status != "ok":
        raise UsageError(f"the case does not run at {good!r}: {g.reason}", key="--bisect")
    ref = state(g)
    note(first_commit, "old")
    b = test(commits[-1])
    bad_state = state(b)
    if bad_state == ref:
        what = "unread bytes" if on == "unread" else "saved state"
        raise UsageError(f"{good!r} and {bad!r} have the same {what} of {case.id}: nothing to bisect", key="--bisect")
    note(commits[-1], "new")
    lo, hi = -1, len(commits) - 1  # commits[lo] (or GOOD) is old, commits[hi] is new
    skipped: set[int] = set()
    while hi - lo > 1:
        inner = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inner:
            break
        mid = (lo + hi) // 2
        i = min(inner, key=lambda k: (abs(k - mid), k))
        v = verdict(test(commits[i]))
        note(commits[i], v)
        if v == "old":
            lo = i
        elif v == "new":
            hi = i
        else:
            skipped.add(i)
    last_old = first_commit if lo < 0 else commits[lo]
    candidates = commits[lo + 1 : hi + 1]
    found = commits[hi] if len(candidates) == 1 else None
    result = BisectResult(
        case, first_commit, commits[-1], len(commits), found, last_old, candidates, probes=probes, on=on
    )
    before, after = cache_states[last_old], cache_states[commits[hi]]
    result.before, result.after, result.end = before, after, cache_states[commits[-1]]
    if before.status == "ok" and after.status == "ok":
        result.changes = sorted(row_changes(before, after), key=lambda r: (-abs(r.delta), r.key))
    if found is not None:
        result.subject, result.date = commit_info(repo, found)
    return result
