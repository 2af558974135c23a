"""``memaudit run --nproc N``: the same command under ``torch.distributed.run``, and what a failed rank means.

Nothing here launches or talks to a process itself: the arguments are ``torchrun``'s
(``--standalone --nproc-per-node N --no-python PYTHON -P -u -m memaudit run ...``), given to
``torch.distributed.run``'s own ``run``. The workers start with ``-P`` (``PYTHONSAFEPATH``): the
current folder is not put on ``sys.path``, so a ``memaudit/`` folder there (the parent folder of a
clone, say) cannot shadow the installed package. When a worker fails, torch raises ``ChildFailedError`` naming every
failed rank
with its exit code; :func:`explain` turns that into memaudit's words: which rank, how it ended
(an exit code, or the signal that killed it), and which rank files are there.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memaudit.distributed.merge import rank_file


def worker_python() -> list[str]:
    """This interpreter, started so that the current folder cannot shadow an installed package:
    ``-P`` (``PYTHONSAFEPATH``) keeps it off ``sys.path``; ``-u`` as torchrun's own ``-m`` does."""
    return [sys.executable, "-P", "-u"]


def torchrun_args(nproc: int, command: Sequence[str]) -> list[str]:
    """The ``torchrun`` arguments that start ``memaudit COMMAND...`` on ``nproc`` local processes
    (``--no-python``: torchrun runs :func:`worker_python`'s command line as given)."""
    return [
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--no-python",
        *worker_python(),
        "-m",
        "memaudit",
        *command,
    ]


@dataclass(frozen=True)
class Failure:
    """A rank that ended badly: its exit code (negative: killed by that signal)."""

    rank: int
    exitcode: int
    pid: int | None = None

    @property
    def stopped_by_torchrun(self) -> bool:
        """Ended by SIGTERM: what the agent sends the others once one rank failed (a consequence)."""
        return self.exitcode == -signal.SIGTERM

    def how(self) -> str:
        if self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"was killed by {name}"
        return f"exited with status {self.exitcode}"


def launch(nproc: int, command: Sequence[str]) -> list[Failure]:
    """Run ``memaudit COMMAND...`` on ``nproc`` local processes through ``torch.distributed.run``;
    the ranks that failed (empty when every rank exited 0), those that ended on their own first."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets, without its warning banner
    try:
        run(parse_args(torchrun_args(nproc, command)))
    except ChildFailedError as exc:
        failures = [Failure(rank, f.exitcode, f.pid) for rank, f in exc.failures.items()]
        return sorted(failures, key=lambda f: (f.stopped_by_torchrun, f.rank))
    return []


def rank_files_state(folder: str | os.PathLike[str], world_size: int) -> list[str]:
    """One line per rank file: written (with its case count and whether it finished) or missing."""
    import json

    out = []
    for r in range(world_size):
        path = rank_file(folder, r)
        if not Path(path).is_file():
            out.append(f"{path}: missing")
            continue
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            run = d.get("dist") or {}
            state = "finished" if run.get("finished") else "not finished"
            out.append(f"{path}: {len(d.get('cases', []))} of {len(run.get('planned', []))} case(s), {state}")
        except (OSError, ValueError, AttributeError) as exc:
            out.append(f"{path}: unreadable ({exc})")
    return out
