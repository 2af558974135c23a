"""Distributed runs on the command line: ``run`` under ``torchrun``, ``run --nproc N``, ``merge``.

* Under ``torchrun --nproc-per-node N -m memaudit run ...`` every rank runs the cases (placed for
  its rank), writes its own file into the rank folder after each case, and sends its report to
  rank 0, which merges them, prints the ranks side by side, judges the scenario's budgets on every
  rank and writes ``--json`` / ``--markdown``. Every rank exits with rank 0's status.
* ``memaudit run --nproc N ...`` checks the arguments, then starts the same command (without
  ``--nproc``) through ``torch.distributed.run`` and says which rank failed, if one did.
* ``memaudit merge FILES|FOLDER`` merges rank files afterwards (after a crash, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from memaudit.cli.common import Command, error_line, exits, get_current_context
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.render.console import consoles
from memaudit.report import Report, check_outputs

MAX_NPROC = 1024
DEFAULT_RANK_DIR = "memaudit-ranks"


def default_rank_dir(json_path: Path | None) -> Path:
    """Where the ranks' own files go without ``--rank-dir``: beside ``--json`` (``report.ranks/``
    for ``report.json``), else ``memaudit-ranks/``."""
    if json_path is None:
        return Path(DEFAULT_RANK_DIR)
    return json_path.with_name(json_path.stem + ".ranks")


def check_rank_dir(folder: Path, world_size: int, outputs: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Every rank file can be written, and none is an output or input of the command."""
    files = {f"--rank-dir ({f'rank{r}.json'})": folder / f"rank{r}.json" for r in range(world_size)}
    check_outputs({**outputs, **files}, inputs=inputs)


def check_rank_device(device: str, target_name: str, *, given: bool) -> None:
    """Every rank of a distributed run needs the device it runs on: a CUDA device when the cases
    run on CUDA (emulated kernels on fake CUDA are for a single process). Checked once, before
    anything starts, in words that say where the device came from."""
    if not device.startswith("cuda"):
        return
    import torch

    if torch.cuda.is_available():
        return
    if given:
        raise UsageError(f"--device {device} in a distributed run, but CUDA is not available here", key="--device")
    raise UsageError(
        f"the target {target_name} runs on {device} by default, and CUDA is not available here; a "
        "distributed run needs the device in every rank (TE's emulated kernels run in a single process): "
        "give --target reference (CPU), or run without --nproc",
        key="--nproc",
    )


@dataclass
class DistOptions:
    """``run``'s distributed options."""

    nproc: int | None
    backend: str | None
    rank_dir: Path | None
    timeout: int


def child_command(exclude: Sequence[str] = ("nproc", "rank_dir")) -> list[str]:
    """``run``'s arguments as given on this command line (click's context), without ``exclude``:
    what each rank of ``--nproc`` runs. Options left at their defaults are left out."""
    import importlib

    # click's, as the installed typer uses it (the click package, or the copy newer typers carry)
    source = importlib.import_module(typer.BadParameter.__module__.rsplit(".", 1)[0] + ".core").ParameterSource
    ctx = get_current_context()
    out = [ctx.info_name or "run"]
    for param in ctx.command.params:
        name = param.name
        if name in exclude or name is None:
            continue
        if ctx.get_parameter_source(name) not in (source.COMMANDLINE, source.ENVIRONMENT):
            continue
        value = ctx.params.get(name)
        opts = list(getattr(param, "opts", ()))
        if getattr(param, "is_flag", False) and isinstance(value, bool):
            secondary = list(getattr(param, "secondary_opts", ()))
            if value:
                out.append(opts[0])
            elif secondary:
                out.append(secondary[0])
            continue
        if value is None:
            continue
        values = value if getattr(param, "multiple", False) else [value]
        for v in values:
            text = ",".join(map(str, v)) if isinstance(v, list) else str(getattr(v, "value", v))  # IntList: 1,4,8
            out += [opts[0], text]
    return out


def run_distributed(
    opts: DistOptions,
    *,
    target: Any,
    target_name: str,
    specs: list[Any],
    scenario: Any,
    device: str,
    backward: bool,
    verify_allocator: bool,
    stack: bool,
    expected: bool,
    allow_incomplete: bool,
    allow_na: bool,
    json_path: Path | None,
    markdown: Path | None,
    quiet: bool,
    inputs: dict[str, Any],
    device_given: bool = True,
) -> int | None:
    """The distributed part of ``run``: launch (``--nproc``), or this rank's run under torchrun;
    None when neither applies (a plain run)."""
    from memaudit.distributed.world import torchrun_env
    from memaudit.targets.base import place

    env = torchrun_env()
    if opts.nproc is None and env is None:
        for flag, given in (("--rank-dir", opts.rank_dir is not None), ("--dist-backend", opts.backend is not None)):
            if given:
                raise UsageError("applies to a distributed run only: add --nproc N, or run under torchrun", key=flag)
        for spec in specs:  # every case can be placed before anything runs
            place(target, spec, 0, 1)
        return None
    if opts.nproc is not None and env is not None:
        raise UsageError(
            f"this process already is rank {env.rank} of {env.world_size} under torchrun; "
            "give --nproc or torchrun, not both",
            key="--nproc",
        )
    world_size = opts.nproc if opts.nproc is not None else env.world_size  # type: ignore[union-attr]
    if not 1 <= world_size <= MAX_NPROC:
        raise UsageError(f"must be from 1 to {MAX_NPROC}, got {world_size}", key="--nproc")
    if opts.timeout < 1:
        raise UsageError(f"must be >= 1 second, got {opts.timeout}", key="--dist-timeout")
    check_rank_device(device, target_name, given=device_given)
    folder = opts.rank_dir if opts.rank_dir is not None else default_rank_dir(json_path)
    check_rank_dir(folder, world_size, {"--json": json_path, "--markdown": markdown}, inputs)
    for spec in specs:  # every rank's placement is valid before anything starts
        for rank in range(world_size):
            place(target, spec, rank, world_size)
    if opts.nproc is not None:
        return _launch(opts.nproc, folder)
    assert env is not None
    return _as_rank(
        env,
        opts,
        folder,
        target=target,
        target_name=target_name,
        specs=specs,
        scenario=scenario,
        device=device,
        backward=backward,
        verify_allocator=verify_allocator,
        stack=stack,
        expected=expected,
        allow_incomplete=allow_incomplete,
        allow_na=allow_na,
        json_path=json_path,
        markdown=markdown,
        quiet=quiet,
    )


def _launch(nproc: int, folder: Path) -> int:
    """Start ``run`` (as given, without ``--nproc``) on ``nproc`` processes; explain a failed rank."""
    from memaudit.distributed.launch import launch, rank_files_state

    command = [*child_command(), "--rank-dir", str(folder)]
    _, err = consoles()
    failures = launch(nproc, command)
    if not failures:
        return exitcodes.OK
    codes = {f.exitcode for f in failures}
    if (
        len(failures) == nproc
        and len(codes) == 1
        and codes <= {exitcodes.FAIL, exitcodes.CASE_ERROR, exitcodes.NOTHING_MEASURED}
    ):
        return codes.pop()  # every rank exited with rank 0's verdict, which rank 0 has printed
    lines = [
        f"rank {f.rank}{f' (pid {f.pid})' if f.pid else ''} {f.how()}"
        + (" (torchrun stops the others once one fails)" if f.stopped_by_torchrun else "")
        for f in failures
    ]
    err.print(
        error_line(
            f"the distributed run failed: {'; '.join(lines)}; no merged report was written",
            "the ranks' own files:\n  "
            + "\n  ".join(rank_files_state(folder, nproc))
            + f"\n  merge what is there: memaudit merge {folder} --allow-missing-ranks",
        ),
        soft_wrap=True,
    )
    return exitcodes.CASE_ERROR


def _as_rank(
    env: Any,
    opts: DistOptions,
    folder: Path,
    *,
    target: Any,
    target_name: str,
    specs: list[Any],
    scenario: Any,
    device: str,
    backward: bool,
    verify_allocator: bool,
    stack: bool,
    expected: bool,
    allow_incomplete: bool,
    allow_na: bool,
    json_path: Path | None,
    markdown: Path | None,
    quiet: bool,
) -> int:
    from memaudit.distributed.rank import RankAborted, run_rank
    from memaudit.distributed.world import default_backend, join, leave
    from memaudit.render.progress import CaseProgress

    out, err = consoles()
    backend = opts.backend or default_backend(device)
    world = join(env, backend, device, timeout=opts.timeout)
    try:
        progress = CaseProgress(err, len(specs), live=False)
        try:
            result = run_rank(
                target,
                specs,
                world,
                folder,
                backward=backward,
                verify_allocator=verify_allocator,
                stack=stack,
                on_start=progress.start,
                on_case=progress.finish,
            )
        except RankAborted as exc:
            err.print(error_line(f"rank {world.rank}: {exc}", f"its file: {exc.rank_file}"), soft_wrap=True)
            return exitcodes.CASE_ERROR
        code = exitcodes.OK
        if result.merged is not None:
            code = finish_merged(
                result.merged,
                scenario=scenario,
                target_name=target_name,
                expected=expected,
                allow_incomplete=allow_incomplete,
                allow_na=allow_na,
                json_path=json_path,
                markdown=markdown,
                quiet=quiet,
                rank_dir=folder,
            )
        return world.broadcast_long(code)
    finally:
        leave()


def finish_merged(
    report: Report,
    *,
    scenario: Any = None,
    target_name: str,
    expected: bool = False,
    allow_incomplete: bool = False,
    allow_na: bool = False,
    json_path: Path | None = None,
    markdown: Path | None = None,
    quiet: bool = False,
    rank_dir: Path | None = None,
) -> int:
    """Show, judge and write a merged report; its exit status (as ``run`` would give it)."""
    from memaudit.cli.common import show_notes
    from memaudit.distributed.merge import differing_replicas
    from memaudit.judge.outcome import conclude
    from memaudit.render.ranks import ranks_tables, worst_cases
    from memaudit.render.tables import case_table, summary_table
    from memaudit.report import atomic_write_text, write_report

    out, err = consoles()
    result = conclude(
        report,
        scenario,
        allow_incomplete=allow_incomplete,
        allow_na=allow_na,
        expected=expected,
        replica_problems=differing_replicas(report),
    )
    verdicts = result.verdicts
    if not quiet:
        for case in worst_cases(report):
            out.print(case_table(case, show_expected=expected, width=out.width))
    out.print(summary_table(report.cases, width=out.width))
    out.print(ranks_tables(report, width=out.width))
    if verdicts is not None:
        from memaudit.render.verdicts import render_failures, render_verdicts

        out.print(render_failures(verdicts))
        out.print(render_verdicts(verdicts, width=out.width))
    for w in report.dist.warnings if report.dist is not None else ():
        err.print(Text(f"warning: {w}", style="yellow"), soft_wrap=True)
    if json_path is not None:
        write_report(report, json_path)
        out.print(
            Text(f"wrote {json_path}" + (f" (the ranks' own files are in {rank_dir})" if rank_dir else "")),
            soft_wrap=True,
        )
    if markdown is not None:
        from memaudit.render.markdown import marker_name, render_markdown

        atomic_write_text(markdown, render_markdown(report, None, name=marker_name(target_name)))
        out.print(Text(f"wrote {markdown}"), soft_wrap=True)
    show_notes(err, result.notes)
    return result.code


# ---- memaudit merge -------------------------------------------------------------------------------

MERGE_HELP = (
    "Merge the ranks' own files of a distributed run (rank<N>.json, or the folder holding them) into one report.\n\n"
    "Every rank must be there with every planned case: a missing rank or case is bad input (exit 2) unless "
    "--allow-missing-ranks, which merges what is there and makes each missing case an error case (exit 3). "
    "Exit codes: 0 merged, every case ok or skipped; 1 data-parallel replicas that should save the same do not; "
    "2 bad input (nothing written); 3 a case ended in error (or is missing)."
)


def merge(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Rank files (rank<N>.json), or folders of them.", show_default=False, metavar="RANK_FILES_OR_FOLDER"
        ),
    ],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the merged report here (atomically).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (PR comment) here.")] = None,
    allow_missing_ranks: Annotated[
        bool,
        typer.Option(
            "--allow-missing-ranks",
            help="Merge what is there: a missing rank or case becomes an error case saying so (exit 3), never a zero.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option(help="Only the summary and the ranks table.")] = False,
) -> int:
    """Merge rank files into one report: per-rank cases and the summary over ranks."""
    from memaudit.distributed.merge import merge_reports, rank_files
    from memaudit.judge.integrity import read_report

    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = rank_files(p)
            if not found:
                raise UsageError("no rank files (rank<N>.json) in this folder", source=str(p))
            files += found
        else:
            files.append(p)
    check_outputs({"--json": json_path, "--markdown": markdown}, inputs={str(f): f for f in files})
    reports = [(str(f), read_report(f)) for f in files]
    merged = merge_reports(reports, allow_missing=allow_missing_ranks)
    name = merged.cases[0].target if merged.cases else "merged"
    return finish_merged(merged, target_name=name, json_path=json_path, markdown=markdown, quiet=quiet)


def register(app: typer.Typer) -> None:
    """Add ``merge`` to the CLI."""
    app.command("merge", help=MERGE_HELP, cls=Command)(exits(merge))
