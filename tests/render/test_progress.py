"""Progress of a ``memaudit run`` matrix: the running case, n/N and an ETA on a terminal; one
plain line per finished case in a log (CI), with ``--quiet`` too."""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.progress import TimeRemainingColumn
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.render.progress import CaseProgress, case_line
from memaudit.runner import run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

SMALL = ["--target", "reference", "--groups", "1,4", "--tokens", "64", "--hidden", "16", "--ffn", "32"]
LINE = re.compile(r"^\[(\d)/2\] (reference/bf16/g[14]/t64-h16-f32/bf16) ok [\d,]+ B \d+\.\d s$")


def specs(*groups: int) -> list[CaseSpec]:
    return [CaseSpec.make(get_target("reference"), "bf16", g, tokens=64, hidden=16, ffn=32) for g in groups]


def test_run_matrix_announces_each_case_before_it_runs() -> None:
    events: list[tuple] = []
    run_matrix(
        get_target("reference"),
        specs(1, 4),
        on_start=lambda s, i, n: events.append(("start", s.id, i, n)),
        on_case=lambda c: events.append(("done", c.id)),
    )
    a, b = (s.id for s in specs(1, 4))
    assert events == [("start", a, 1, 2), ("done", a), ("start", b, 2, 2), ("done", b)]


def test_a_log_gets_one_line_per_finished_case_even_with_quiet() -> None:
    result = CliRunner().invoke(app, ["run", *SMALL, "--quiet"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert [LINE.match(ln).group(1) for ln in lines] == ["1", "2"], lines  # type: ignore[union-attr]
    assert "rows 8" not in result.stdout and "summary" in result.stdout  # quiet: no case tables, the summary
    assert not any(LINE.match(ln) for ln in result.stdout.splitlines())  # progress is on stderr


def test_the_log_line_of_a_skipped_or_errored_case_says_why() -> None:
    (case,) = run_matrix(
        get_target("reference"), [CaseSpec.make(get_target("reference"), "nvfp4", 1, tokens=128, hidden=16, ffn=32)]
    ).cases
    line = case_line(case, 3, 18, 0.04).plain
    assert line.startswith(f"[3/18] {case.id} skipped 0.0 s: ") and case.reason and case.reason.splitlines()[0] in line


def test_a_terminal_gets_a_bar_with_the_running_case_and_an_eta() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    todo = specs(1, 4, 8)
    with CaseProgress(console, len(todo)) as progress:
        assert progress.live and progress.progress is not None
        assert any(isinstance(c, TimeRemainingColumn) for c in progress.progress.columns)
        progress.start(todo[0], 1, 3)
        task = progress.progress.tasks[0]
        assert (
            task.description == f"running {todo[0].id}" and task.completed == 0
        )  # the case that runs, not the last one done
        record = Console(record=True, width=160, file=io.StringIO())
        record.print(progress.progress.make_tasks_table(progress.progress.tasks))
        shown = record.export_text()
        assert f"running {todo[0].id}" in shown and "0/3" in shown and "eta" in shown
        (case,) = run_matrix(get_target("reference"), todo[:1]).cases
        progress.finish(case)
        assert task.completed == 1
        progress.start(todo[1], 2, 3)
        assert task.description == f"running {todo[1].id}"
    assert "[1/3]" not in out.getvalue()  # no log lines on a terminal


def test_an_id_with_brackets_is_not_markup_in_the_bar() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    spec = specs(1)[0]
    weird = CaseSpec.make(get_target("reference"), "bf16", 1, tokens=64, hidden=16, ffn=32, options={"x": "[/bold]"})
    with CaseProgress(console, 2) as progress:
        progress.start(weird, 1, 2)
        record = Console(record=True, width=200, file=io.StringIO())
        record.print(progress.progress.make_tasks_table(progress.progress.tasks))  # type: ignore[union-attr]
        assert "[/bold]" in record.export_text()
    assert spec.id != weird.id
