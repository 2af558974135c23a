"""Progress of a ``memaudit run`` matrix: a live bar on a terminal, one line per case in a log.

On a terminal the bar names the case that is *running* (set before it starts), n/N, the time
so far and an estimate of the time left. Anywhere else (CI logs, pipes) each finished case is one
plain line, ``[3/18] te-grouped-mlp/fp8-current/g4/... ok 71,311,456 B 1.2 s``, written as it
finishes, so that a long matrix shows where it is even with ``--quiet``.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from memaudit.report import CaseReport
from memaudit.spec import CaseSpec


def case_line(case: CaseReport, i: int, n: int, seconds: float) -> Text:
    """``[i/n] ID STATUS [SAVED B] SECONDS s[: reason]``: a finished case in a log."""
    line = Text(f"[{i}/{n}] ")
    line.append(case.id, style="bold")
    line.append(f" {case.status}", style={"ok": "green", "skipped": "yellow", "error": "red"}.get(case.status, ""))
    if case.status == "ok":
        line.append(f" {case.totals.saved_bytes:,} B")
        if not case.complete:
            line.append(" incomplete", style="bold red")
    line.append(f" {seconds:.1f} s")
    if case.reason:
        line.append(": " + (case.reason.splitlines() or [""])[0])
    return line


class CaseProgress:
    """``start(spec, i, n)`` before each case and ``finish(case)`` after it (``with`` around the
    matrix). ``live``: the bar (default: where ``console`` is a terminal); else log lines."""

    def __init__(self, console: Console, total: int, *, live: bool | None = None, redirect_stdout: bool = True) -> None:
        self.console = console
        self.total = total
        self.live = console.is_terminal if live is None else live
        self.progress: Progress | None = None
        self.task = None
        self._started = 0.0
        self._index = 0
        if self.live:
            self.progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                redirect_stdout=redirect_stdout,
            )
            self.task = self.progress.add_task("starting", total=total)

    def __enter__(self) -> CaseProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.progress is not None:
            self.progress.stop()

    def start(self, spec: CaseSpec, i: int, n: int) -> None:
        """Case ``i`` of ``n`` (from 1) is about to run."""
        self._index, self._started = i, time.perf_counter()
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=Text(f"running {spec.id}").markup)

    def finish(self, case: CaseReport) -> None:
        """The case that ``start`` announced has finished."""
        seconds = time.perf_counter() - self._started
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1)
        else:
            self.console.print(case_line(case, self._index, self.total, seconds), soft_wrap=True, highlight=False)
