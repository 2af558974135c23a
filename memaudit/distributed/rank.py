"""One rank's run: capture locally, leave a file after every case, gather to rank 0, merge there.

Each case runs on its own (:func:`memaudit.runner.run_matrix`, placed for this rank): the capture
is local, and no collective ever runs inside a saved-tensor hook (a rank that saves fewer tensors
would leave the others waiting). After each case the rank rewrites its own file (``rank<N>.json``,
atomically, ``finished: false`` until the last case), so that a rank that crashes or is killed
leaves what it measured. Then the ranks say how the case ended, over the CPU gloo group: where a
rank does not answer within the timeout (a rank that died, or one that an error took out of a
collective its peers are still in) the run ends with :class:`RankAborted`. After the last case the
reports travel to rank 0 over the same group and are merged there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import memaudit
from memaudit.distributed.merge import merge_reports, rank_file
from memaudit.distributed.world import World
from memaudit.environment import environment
from memaudit.ranks import DistRun
from memaudit.report import CaseReport, Report, validate_report, write_report
from memaudit.spec import CaseSpec
from memaudit.targets.base import Target, place


class RankAborted(RuntimeError):  # noqa: N818 - what happened, said as such
    """The run cannot go on: a rank did not answer after a case (``rank_file`` holds what this rank measured)."""

    def __init__(self, message: str, rank_file: os.PathLike[str] | str) -> None:
        super().__init__(message)
        self.rank_file = rank_file


@dataclass
class RankRun:
    """What one rank's run gives: its own report, the merged report on rank 0 (None elsewhere)."""

    own: Report
    merged: Report | None


def planned_ids(target: Target, specs: Sequence[CaseSpec], world_size: int) -> list[str]:
    """The ids (without coordinates) of the cases every rank runs, in order."""
    return [place(target, s, 0, world_size)[0].id for s in specs]


def run_rank(
    target: Target,
    specs: Sequence[CaseSpec],
    world: World,
    folder: os.PathLike[str] | str,
    *,
    backward: bool = True,
    verify_allocator: bool = False,
    stack: bool = False,
    on_start: Callable[[CaseSpec, int, int], None] | None = None,
    on_case: Callable[[CaseReport], None] | None = None,
) -> RankRun:
    """Run ``specs`` as rank ``world.rank``; rank 0 returns the merged report too."""
    from memaudit.runner import run_matrix

    planned = planned_ids(target, specs, world.world_size)
    path = rank_file(folder, world.rank)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = environment(specs[0].device if specs else "cpu")
    done: list[CaseReport] = []

    def own(finished: bool) -> Report:
        return Report(
            cases=list(done),
            environment=env,
            memaudit=memaudit.__version__,
            created=created,
            dist=DistRun(world.world_size, planned, world.rank, world.run_id, finished),
        )

    def after(case: CaseReport) -> None:
        done.append(case)
        write_report(own(False), path)
        if on_case is not None:
            on_case(case)
        try:  # every rank answers: none is dead, and none is still inside a collective of this case
            world.all_gather((case.id, case.status))
        except RuntimeError as exc:
            raise RankAborted(
                f"after {case.id}: not every rank answered (within {world.timeout} s: {_first_line(exc)}); "
                f"this rank's file has its {len(done)} case(s)",
                path,
            ) from None

    for i, spec in enumerate(specs, 1):
        if on_start is not None:
            on_start(spec, i, len(specs))
        run_matrix(
            target,
            [spec],
            backward=backward,
            verify_allocator=verify_allocator,
            stack=stack,
            on_case=after,
            rank=world.rank,
            world_size=world.world_size,
            backend=world.backend,
        )
    mine = own(True)
    write_report(mine, path)
    try:
        gathered = world.gather(mine.to_dict())
    except RuntimeError as exc:
        raise RankAborted(
            f"gathering the reports failed ({_first_line(exc)}); this rank's file is finished", path
        ) from None
    if gathered is None:
        return RankRun(mine, None)
    reports = [(f"rank {r}", validate_report(d, source=f"rank {r}")) for r, d in enumerate(gathered)]
    return RankRun(mine, merge_reports(reports))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
