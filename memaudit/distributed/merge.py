"""Rank reports -> one merged report: per-rank cases, in planned order, and the summary over ranks.

Used by rank 0 after the gather and by ``memaudit merge`` on the ranks' own files. Every rank must
be there, with every planned case: a missing rank or case is a UsageError naming it (``allow_missing``
makes each an ``error`` case saying so instead, never a zero). Pure: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from memaudit.environment import libraries
from memaudit.errors import UsageError
from memaudit.ranks import REPLICA_AXIS, DistRun, RankInfo, base_id, coords_of, summarize
from memaudit.report import CaseReport, Report

RANK_FILE = "rank{rank}.json"
"""A rank's own file in the rank folder."""

ENV_SAME = ("memaudit", "python", "torch", "cuda", "device", "device_class")
"""Environment keys every rank should share (a difference is a warning of the merged report),
besides each probed library's (:func:`env_same`)."""


def env_same() -> tuple[str, ...]:
    """:data:`ENV_SAME`, then each probed library's key (``memaudit.environment.libraries``), then cuDNN's."""
    return (*ENV_SAME, *(lib.key for lib in libraries()), "cudnn")


def rank_file(folder: str | os.PathLike[str], rank: int) -> Path:
    return Path(folder) / RANK_FILE.format(rank=rank)


def rank_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The rank files in ``folder`` (``rank<N>.json``), by rank."""
    found = []
    for p in Path(folder).iterdir():
        stem = p.name.removeprefix("rank").removesuffix(".json")
        if p.name.startswith("rank") and p.name.endswith(".json") and stem.isdigit():
            found.append((int(stem), p))
    return [p for _, p in sorted(found)]


def merge_reports(reports: Sequence[tuple[str, Report]], *, allow_missing: bool = False) -> Report:
    """One report from rank reports (``(source, report)``, each a rank's own file).

    They must come from one run (one run id, world size and plan), one file per rank. A rank with
    no file, or a planned case a rank did not finish, is a UsageError naming it, unless
    ``allow_missing``: then it is an ``error`` case that says so. The environment, memaudit version
    and time are the lowest rank's; environment keys that differ between ranks become warnings.
    """
    if not reports:
        raise UsageError("no rank reports to merge", key="reports")
    runs: list[tuple[str, Report, DistRun]] = []
    for source, rep in reports:
        run = rep.dist
        if run is None or run.merged:
            what = "a merged report" if run is not None else "not from a distributed run (no dist)"
            raise UsageError(f"is {what}: merge takes the ranks' own files (rank<N>.json)", source=source)
        runs.append((source, rep, run))
    first_source, _, first = runs[0]
    by_rank: dict[int, tuple[str, Report, DistRun]] = {}
    for source, rep, run in runs:
        for what, mine, theirs in (
            ("run id", run.run_id, first.run_id),
            ("world size", run.world_size, first.world_size),
            ("planned cases", run.planned, first.planned),
        ):
            if mine != theirs:
                raise UsageError(
                    f"{what} {_short(mine)} differs from {first_source}'s {_short(theirs)}: the files come "
                    "from different runs",
                    source=source,
                    key="dist",
                )
        if run.rank in by_rank:
            raise UsageError(f"rank {run.rank} twice (also {by_rank[run.rank][0]})", source=source, key="dist.rank")
        by_rank[run.rank or 0] = (source, rep, run)
    world, planned = first.world_size, list(first.planned)
    problems: list[str] = []
    absent = absent_ranges(sorted(by_rank), world)
    if absent:
        problems.append(f"rank(s) {ranges_text(absent)} of {world} wrote no report")
    cases: dict[tuple[str, int], CaseReport] = {}
    for r, (_source, rep, run) in sorted(by_rank.items()):
        for c in rep.cases:
            assert c.dist is not None  # a rank file's cases carry dist (memaudit.ranks.run_problem)
            cases[(base_id(c.id, c.dist) or c.id, r)] = c
        done = sum(1 for p in planned if (p, r) in cases)
        if not run.finished and done < len(planned):
            problems.append(f"rank {r} stopped after {done} of {len(planned)} case(s) (its file says finished: false)")
    read = ", ".join(source for source, _, _ in runs[:4]) + (", ..." if len(runs) > 4 else "")
    if problems and not allow_missing:
        raise UsageError(
            "; ".join(problems) + f" (read: {read}): a merged report needs every rank's every case "
            "(--allow-missing-ranks merges what is there, the rest as error cases)",
            key="ranks",
        )
    missing = world - len(by_rank)
    if missing > MAX_MISSING_RANKS:  # bounded by the files given, not by the world size they claim
        raise UsageError(
            f"world size {world} with {len(by_rank)} rank file(s) (read: {read}): {missing:,} ranks are "
            f"missing, more than {MAX_MISSING_RANKS:,} to fill in as error cases; a world size this far "
            "from the files given is not a run to merge",
            key="dist.world_size",
        )
    warnings: list[str] = []
    ran = [p for p in planned if any((p, r) in cases for r in range(world))]
    if len(ran) != len(planned):
        warnings.append(f"no rank ran {', '.join(p for p in planned if p not in ran)}: left out of the merged report")
    out: list[CaseReport] = []
    for p in ran:
        template = next(cases[(p, r)] for r in range(world) if (p, r) in cases)
        for r in range(world):
            out.append(cases.get((p, r)) or _missing_case(template, p, r, r in by_rank))
    low = min(by_rank)
    _, head, _ = by_rank[low]
    warnings += _env_warnings(low, head.environment, {r: rep.environment for r, (_, rep, _) in by_rank.items()})
    summary = summarize(out, ran, world)
    return Report(
        cases=out,
        environment=dict(head.environment),
        memaudit=head.memaudit,
        created=head.created,
        dist=DistRun(world, ran, summary=summary, warnings=warnings),
    )


MAX_MISSING_RANKS = 1024
"""The most missing ranks ``--allow-missing-ranks`` fills in with error cases (``run --nproc``'s own
limit): files that claim a world far larger than themselves are refused, not expanded."""


def absent_ranges(present: Sequence[int], world: int) -> list[tuple[int, int]]:
    """The ranks of ``range(world)`` not in ``present`` (sorted), as inclusive ``(first, last)``
    ranges: as long as ``present``, whatever ``world`` is."""
    out, nxt = [], 0
    for r in present:
        if r > nxt:
            out.append((nxt, r - 1))
        nxt = max(nxt, r + 1)
    if nxt < world:
        out.append((nxt, world - 1))
    return out


def ranges_text(ranges: Sequence[tuple[int, int]], most: int = 20) -> str:
    """``0-3, 5, 7-1048575``: at most ``most`` ranges, then how many more."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:most]]
    if len(ranges) > most:
        parts.append(f"... ({len(ranges) - most} more ranges)")
    return ", ".join(parts)


def _missing_case(template: CaseReport, base: str, rank: int, wrote: bool) -> CaseReport:
    """An error case for rank ``rank``'s missing case ``base`` (its place from ``template``'s layout)."""
    info = template.dist
    assert info is not None
    coords = coords_of(rank, info.layout)
    where = RankInfo(rank, info.world_size, dict(info.layout), coords, info.backend)
    why = (
        "its file stops before this case (the rank ended early: crashed, killed or aborted)"
        if wrote
        else "it wrote no file (crashed or killed before its first case ended)"
    )
    spec = dataclasses.replace(template.spec, splits=None, options=dict(template.spec.options))
    return CaseReport(
        spec,
        id=f"{base}/{where.key}",
        status="error",
        reason=f"rank {rank} has no report for this case: {why}",
        dist=where,
    )


def _env_warnings(low: int, head: dict[str, object], envs: dict[int, dict[str, object]]) -> list[str]:
    out = []
    for key in env_same():
        differ = sorted(r for r, env in envs.items() if env.get(key) != head.get(key))
        if differ:
            out.append(
                f"environment {key} differs between ranks: rank {low} {head.get(key)!r}, "
                + ", ".join(f"rank {r} {envs[r].get(key)!r}" for r in differ)
            )
    return out


def differing_replicas(report: Report) -> list[str]:
    """``CASE: replicas GROUP (ranks ...) differ: WHERE`` for each group of data-parallel replicas
    whose saved rows differ (they should be identical)."""
    run = report.dist
    out = []
    for s in (run.summary or ()) if run is not None else ():
        for rep in s.replicas:
            if not rep.identical:
                axis = f"{REPLICA_AXIS} replicas {rep.group}" if rep.group != "all" else f"{REPLICA_AXIS} replicas"
                out.append(f"{s.case}: {axis} (ranks {', '.join(map(str, rep.ranks))}) differ: {rep.difference}")
    return out


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."
