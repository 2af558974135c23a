"""The ``memaudit`` command line (typer). Thin: every decision lives in the library."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import typing
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.text import Text

from memaudit.cli.common import (
    INT_LIST,
    SHIPPED_NAMES,
    Command,
    Group,
    Ints,
    exits,
    read_inputs,
    show_notes,
    usage_exit,
)
from memaudit.errors import Terminated, UsageError, clip
from memaudit.judge import exitcodes
from memaudit.render.console import consoles, make_console
from memaudit.spec import DTYPES, CaseSpec
from memaudit.targets.matrix import DEVICE

EXIT_CODES_HELP = (
    "Exit codes: 0 ok (every budget passes or is xfail); 1 a budget failed or XPASSed; "
    "2 bad usage or input (nothing written); 3 a case ended in error and no budget failed; "
    "4 (run) nothing was measured or emulated (only estimates or skipped cells)."
)

RUN_EXIT_CODES_HELP = """\b
Exit codes:
  0  ok: some case was measured or emulated, no case errored, every budget
     passes or is xfail (other cases may be skipped or estimated)
  1  a budget failed or XPASSed; or nothing was judged, or a budget applies
     to no case (--allow-na passes both); or a case errored under the
     scenario's on_error = "fail"
  2  bad usage or input: the flag, file, key and value are named; nothing
     is written
  3  a case ended in error and no budget failed
  4  nothing was measured or emulated: every case is skipped or estimated
     (a gate on a runner without the GPU it expects goes red, not green)"""
"""``run --help``'s exit-code section (``\\b``: click keeps its lines as they are)."""

app = typer.Typer(
    name="memaudit",
    help="Saved-tensor memory auditor and regression gate for PyTorch and TransformerEngine.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=False,
    rich_markup_mode=None,  # click's own help: whole flag names, no <bool> metavar on a flag
    context_settings={"max_content_width": 120},
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=Group,
)

Dtype = Literal[DTYPES]  # type: ignore[valid-type]
"""``--dtype``: typer lists the choices in --help and completion, and refuses others."""


def version_line() -> str:
    """``memaudit X (torch Y, transformer-engine Z)``, from the installed packages (nothing imported):
    torch's and each probed library's (:func:`memaudit.environment.library_versions`)."""
    from importlib import metadata

    import memaudit
    from memaudit.environment import library_versions

    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    libraries = "".join(f", {lib.package or lib.key} {v or 'not installed'}" for lib, v in library_versions().items())
    return f"memaudit {memaudit.__version__} (torch {torch_version or 'not installed'}{libraries})"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(exitcodes.OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print memaudit's, torch's and TransformerEngine's versions and exit.",
        ),
    ] = False,
) -> None:
    """Saved-tensor memory auditor and regression gate for PyTorch and TransformerEngine."""
    if _extension_problem is not None:
        raise _extension_problem


def _check_device(value: str | None) -> str | None:
    if value is not None and not DEVICE.fullmatch(value):
        raise typer.BadParameter(f"unknown device {value!r}; use cpu, cuda, cuda:N or meta")
    return value


def _complete_device(incomplete: str) -> list[str]:
    return [d for d in ("cpu", "cuda", "cuda:0", "cuda:1", "meta") if d.startswith(incomplete)]


def _complete_target(incomplete: str) -> list[tuple[str, str]]:
    from memaudit.targets import registry

    own = registry.builtin_names()
    return [
        (name, "built-in target" if name in own else "target")
        for name in registry.target_names()
        if name.startswith(incomplete)
    ]


def _complete_recipe(ctx: typer.Context, incomplete: str) -> list[str]:
    """The recipes of --target (given before --recipe) or of every built-in target, and ``all``;
    after a comma, the ones not listed yet."""
    from memaudit.targets import registry

    name = ctx.params.get("target")
    target = registry.find_target(name) if name else None
    names = target.recipes if target is not None else registry.union_recipes(registry.builtin_targets())
    head, comma, last = incomplete.rpartition(",")
    listed = set(head.split(",")) if comma else set()
    options = [n for n in names if n not in listed] + ([] if comma else ["all"])
    return [head + comma + n for n in options if n.startswith(last)]


def run(
    target: Annotated[
        str | None,
        typer.Option(
            autocompletion=_complete_target, help="A registered target | PKG.MOD:FACTORY (the names are added below)."
        ),
    ] = None,
    recipe: Annotated[
        str | None,
        typer.Option(
            autocompletion=_complete_recipe, help="A recipe the target knows | all; comma-separated for several."
        ),
    ] = None,
    groups: Annotated[
        Ints | None, typer.Option(parser=INT_LIST, metavar=INT_LIST.metavar, help="Group (expert) counts, e.g. 1,4,8.")
    ] = None,
    dtype: Annotated[Dtype | None, typer.Option(help="The activations' dtype. Default: the target's (bf16).")] = None,
    device: Annotated[
        str | None,
        typer.Option(
            callback=_check_device,
            autocompletion=_complete_device,
            help="cpu | cuda | cuda:N | meta (shapes only: no values, nothing allocated; where the target runs "
            "there). Default: the target's.",
        ),
    ] = None,
    splits: Annotated[
        str | None, typer.Option(help="Explicit token splits, e.g. 256,0,512,256 (one group count only).")
    ] = None,
    scenario: Annotated[
        Path | None,
        typer.Option(
            help=f"Scenario TOML file, or a shipped scenario by name ({SHIPPED_NAMES}): its cases and budgets replace "
            "the matrix flags."
        ),
    ] = None,
    allow_target: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-target",
            help="A PKG.MOD:FACTORY target the scenario may name (repeatable; also [tool.memaudit] allow-targets in "
            "pyproject.toml).",
        ),
    ] = None,
    fallback: Annotated[
        FallbackMode | None,
        typer.Option(
            help="What answers a case that cannot run on real kernels here, where the target offers it: auto = the "
            "best there is (its real code with emulated kernels, else a model's estimate); emulate; estimate; none = "
            "a skipped cell. Default: auto; none with --scenario."
        ),
    ] = None,
    expected: Annotated[
        bool,
        typer.Option(
            help="Add the target's model of each row's bytes (expected_bytes) and flag mismatches, where it has one."
        ),
    ] = False,
    backward: Annotated[bool, typer.Option(help="Run backward after each captured forward.")] = True,
    verify_allocator: Annotated[
        bool,
        typer.Option(
            "--verify-allocator",
            help="CUDA: check the rows against the caching allocator's growth over the captured forward (hidden_bytes "
            "per case).",
        ),
    ] = False,
    allow_incomplete: Annotated[
        bool,
        typer.Option(
            "--allow-incomplete", help="Judge budgets on cases memaudit marked incomplete instead of failing them."
        ),
    ] = False,
    allow_na: Annotated[
        bool,
        typer.Option(
            "--allow-na",
            help="With --scenario: pass when no budget judged anything or a budget applies to no case (by default "
            "that fails).",
        ),
    ] = False,
    unread: Annotated[
        bool,
        typer.Option(
            "--unread",
            help="Give every saved buffer a verdict: read by backward (and by what), never read, or unknown (and "
            "why); unread_bytes per case. See docs/guides/budgets.md.",
        ),
    ] = False,
    unread_method: Annotated[
        UnreadMethod | None,
        typer.Option(
            "--unread-method",
            help="With --unread: observed (reads seen during backward; the default), poisoned (gradients compared "
            "with the buffers' contents poisoned: real kernels only) or both (they must agree).",
        ),
    ] = None,
    stack: Annotated[
        bool,
        typer.Option(
            "--stack",
            help="Record the source line (file:line) of the user code behind each saved tensor (rows' source; slower "
            "capture, see docs/investigations/bench.md).",
        ),
    ] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here (atomically).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (PR comment) here.")] = None,
    memory_snapshot: Annotated[
        Path | None,
        typer.Option(
            "--memory-snapshot",
            help="CUDA, one case: write the caching allocator's history of the captured forward here (a pickle for "
            "PyTorch's memory_viz), each saved tensor's block named after its row (operand, kind, orientation, "
            "format).",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            help="Only the summary table (and, where stderr is not a terminal, the one line per finished case)."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also each case's table of saved tensors (and module groups) as it finishes, and the full notes with "
            "the commands that answer a recipe on its own; by default the notes are one line each and the cases are "
            "in the summary (--json / --markdown have everything).",
        ),
    ] = False,
    nproc: Annotated[
        int | None,
        typer.Option(
            help="Run on N local processes through torch.distributed.run (as torchrun --nproc-per-node N -m memaudit "
            "run ... does): per-rank cases, one merged report."
        ),
    ] = None,
    dist_backend: Annotated[
        str | None,
        typer.Option(
            help="Distributed runs: the process-group backend. Default: gloo on CPU, cpu:gloo,cuda:nccl with --device "
            "cuda (the reports always travel over gloo)."
        ),
    ] = None,
    rank_dir: Annotated[
        Path | None,
        typer.Option(
            help="Distributed runs: the folder each rank writes its own file to (rank<N>.json) after every case. "
            "Default: beside --json (report.ranks/), else memaudit-ranks/."
        ),
    ] = None,
    dist_timeout: Annotated[
        int,
        typer.Option(
            help="Distributed runs: seconds a rank waits for the others after a case before the run ends (a rank that "
            "died, or one an error took out of a collective)."
        ),
    ] = 120,
    **target_flags: Any,
) -> int:
    """Run the target for each (recipe, group count) and report every saved tensor.

    \f
    The target's shape dimensions (``Target.shape``: ``--tokens`` ...) and own options
    (``Target.flags``) are added to this signature (:class:`RunCommand`: the ``--target`` given,
    else every built-in target's).
    """
    from memaudit.report import check_outputs

    check_outputs(
        {"--json": json_path, "--markdown": markdown, "--memory-snapshot": memory_snapshot},
        inputs=read_inputs(scenario=scenario),
    )
    if memory_snapshot is not None:
        from memaudit.capture.snapshot import unavailable_reason

        if nproc is not None:
            raise UsageError("records one process's allocator: not with --nproc", key="--memory-snapshot")
        if (why := unavailable_reason()) is not None:
            raise UsageError(why, key="--memory-snapshot")
    if unread_method is not None and not unread:
        raise UsageError("chooses the method of --unread: add --unread", key="--unread-method")
    p = _plan(
        target,
        recipe,
        groups,
        dtype,
        device,
        splits,
        scenario,
        allow_target,
        fallback,
        verify_allocator,
        memory_snapshot,
        target_flags,
        unread=(unread_method or UnreadMethod.observed).value if unread else None,
        backward=backward,
        distributed=nproc is not None,
    )
    from memaudit.cli.dist import DistOptions, run_distributed

    code = run_distributed(
        DistOptions(nproc, dist_backend, rank_dir, dist_timeout),
        target=p.target,
        target_name=p.target_name,
        specs=list(p.specs),
        scenario=p.scenario,
        device=p.device,
        backward=backward,
        verify_allocator=verify_allocator,
        stack=stack,
        expected=expected,
        allow_incomplete=allow_incomplete,
        allow_na=allow_na,
        json_path=json_path,
        markdown=markdown,
        quiet=quiet,
        inputs=read_inputs(scenario=scenario),
        device_given=device is not None,
    )
    if code is not None:  # --nproc, or a rank under torchrun
        return code
    report = _run_here(
        p,
        verify_allocator=verify_allocator,
        stack=stack,
        expected=expected,
        quiet=quiet,
        verbose=verbose,
        memory_snapshot=memory_snapshot,
    )
    return _conclude(
        report,
        p.scenario,
        p.target_name,
        expected=expected,
        allow_incomplete=allow_incomplete,
        allow_na=allow_na,
        json_path=json_path,
        markdown=markdown,
        memory_snapshot=memory_snapshot,
        quiet=quiet,
        verbose=verbose,
    )


def _plan(
    target: str | None,
    recipe: str | None,
    groups: Ints | None,
    dtype: Dtype | None,
    device: str | None,
    splits: str | None,
    scenario: Path | None,
    allow_target: list[str] | None,
    fallback: FallbackMode | None,
    verify_allocator: bool,
    memory_snapshot: Path | None,
    target_flags: dict[str, Any],
    *,
    unread: str | None,
    backward: bool,
    distributed: bool,
) -> Any:
    """What ``run`` will run (:func:`memaudit.audit.plan`), validated before anything runs: the
    command line's dimension options split from the target's own flags, and the checks of
    ``--verify-allocator`` and ``--memory-snapshot``."""
    from memaudit import audit

    p = audit.plan(
        target=target,
        recipe=recipe,
        groups=groups,
        flags=target_flags,
        dtype=dtype,
        device=device,
        splits=splits,
        scenario=scenario,
        allow_targets=tuple(allow_target or ()),
        fallback=fallback.value if fallback is not None else None,
        backward=backward,
        unread=unread,
        distributed=distributed,
    )
    if verify_allocator:
        import torch

        if p.device != "cuda" or not torch.cuda.is_available():
            raise UsageError(
                f"needs --device cuda and a CUDA GPU (device {p.device!r}, "
                f"CUDA available: {torch.cuda.is_available()})",
                key="--verify-allocator",
            )
    if memory_snapshot is not None and len(p.specs) != 1:
        raise UsageError(
            f"records one case; these options make {len(p.specs)} (choose one recipe and one group count)",
            key="--memory-snapshot",
        )
    return p


def _run_here(
    p: Any,
    *,
    verify_allocator: bool,
    stack: bool,
    expected: bool,
    quiet: bool,
    memory_snapshot: Path | None,
    verbose: bool = True,
) -> Any:
    """Run the plan in this process (:func:`memaudit.audit.run`), showing each case as it finishes; the report."""
    from memaudit import audit
    from memaudit.render.modules import module_table
    from memaudit.render.progress import CaseProgress
    from memaudit.render.tables import case_table
    from memaudit.render.unread import unread_block

    fallbacks = p.fallbacks()
    if memory_snapshot is not None and fallbacks[0] is not None:
        raise UsageError(
            f"case {p.specs[0].id!r} cannot run on real kernels here and would be answered by the "
            f"{fallbacks[0].execution} fallback, which records no allocator (use --kernels emulated)",
            key="--memory-snapshot",
        )
    console, err_console = consoles()
    for line in fallback_notes(
        p.target, list(p.specs), fallbacks, p.fallback, brief=not verbose
    ):  # said before anything runs
        if verbose:
            err_console.print(line, soft_wrap=True)
        else:
            err_console.print(line, no_wrap=True, overflow="ellipsis", crop=True)

    def show(case: Any) -> None:
        if not quiet and case.status == "ok" and (never := unread_block([case])) is not None:
            console.print(never)  # first, before its table (and without -v too)
        if verbose and not quiet and case.status == "ok":
            console.print(case_table(case, show_expected=expected, width=console.width))
            if (groups := module_table(case)) is not None:
                console.print(groups)
        elif verbose and not quiet:
            line = Text(case.id, style="bold")
            line.append(f": {case.status}: {case.reason}", style="")
            console.print(line, soft_wrap=True)

    # on a terminal a bar (for a matrix); else one line per finished case. On stderr, so that
    # stdout holds only the tables.
    tty = err_console.is_terminal
    n = len(p.specs)
    progress = CaseProgress(err_console, n, live=tty, redirect_stdout=console.is_terminal) if n > 1 or not tty else None

    def on_case(case: Any) -> None:
        if progress is not None:
            progress.finish(case)
        show(case)

    def on_start(spec: Any, i: int, total: int) -> None:
        if progress is not None:
            progress.start(spec, i, total)

    with progress if progress is not None else contextlib.nullcontext():
        return audit.run(
            p,
            on_case=on_case,
            on_start=on_start,
            fallbacks=fallbacks,
            verify_allocator=verify_allocator,
            stack=stack,
            snapshot=None if memory_snapshot is None else str(memory_snapshot),
        )


def _conclude(
    report: Any,
    loaded: Any,
    target: str,
    *,
    expected: bool,
    allow_incomplete: bool,
    allow_na: bool,
    json_path: Path | None,
    markdown: Path | None,
    memory_snapshot: Path | None,
    quiet: bool = False,
    verbose: bool = True,
) -> int:
    """Judge, show and write a finished run's report; the exit code."""
    from memaudit.judge.outcome import conclude
    from memaudit.render.tables import summary_table
    from memaudit.render.unread import unread_block
    from memaudit.report import write_report
    from memaudit.targets import registry

    console, err_console = consoles()
    result = conclude(report, loaded, allow_incomplete=allow_incomplete, allow_na=allow_na, expected=expected)
    verdicts = result.verdicts
    for case in report.cases:  # what the case's target says besides its table (a replaced answer)
        owner = registry.owner_of(case.spec)
        for note in owner.notes(case) if owner is not None else ():
            line = Text("note: ", style="bold yellow")
            line.append(f"{case.id}: {note}")
            if verbose:
                err_console.print(line, soft_wrap=True)
            else:  # at most three lines of the console; -v (and the JSON) has it all
                err_console.print(
                    Text(clip(line.plain, 3 * err_console.width - 60, "-v shows it whole"), style=""), soft_wrap=False
                )
    if (never := unread_block(report.cases)) is not None and (quiet or len(report.cases) > 1):  # before the summary
        console.print(never)
    console.print(summary_table(report.cases, width=console.width))
    if memory_snapshot is not None:
        line = Text("memory snapshot: ", style="bold")
        if report.cases[0].status == "ok":
            line.append(
                f"{memory_snapshot} (open it in PyTorch's memory_viz; saved tensors' blocks carry their row names)"
            )
        else:
            line.append(f"not written: case {report.cases[0].id} is {report.cases[0].status}")
        err_console.print(line, soft_wrap=True)
    if verdicts is not None:
        from memaudit.render.verdicts import render_failures, render_verdicts

        console.print(render_failures(verdicts))
        console.print(render_verdicts(verdicts, width=console.width))
    if json_path is not None:
        write_report(report, json_path)
        console.print(Text(f"wrote {json_path}"), soft_wrap=True)
    if markdown is not None:
        from memaudit.render.markdown import marker_name, render_markdown
        from memaudit.report import atomic_write_text

        atomic_write_text(markdown, render_markdown(report, None, name=marker_name(target)))
        console.print(Text(f"wrote {markdown}"), soft_wrap=True)
    show_notes(err_console, result.notes)
    return result.code


def _all_groups(command: str, groups: str) -> str:
    """``command`` (made for one case) with ``--groups`` naming every group count of the recipe."""
    return re.sub(r"--groups \d+", f"--groups {groups}", command, count=1)


class UnreadMethod(StrEnum):
    """``run --unread-method`` (memaudit.report.UNREAD_CHOICES)."""

    observed = "observed"
    poisoned = "poisoned"
    both = "both"


class FallbackMode(StrEnum):
    """``run --fallback`` (memaudit.targets.base.FALLBACKS)."""

    auto = "auto"
    emulate = "emulate"
    estimate = "estimate"
    none = "none"


def fallback_notes(
    target: Any, specs: list[CaseSpec], fallbacks: list[Any], mode: str, *, brief: bool = False
) -> list[Text]:
    """Said before anything runs: each recipe that cannot run on real kernels here, why (the
    target's or TE's own words), and what answers it instead, with the command that gives it.
    ``brief``: one line per recipe (what answers it, then why; cropped to the console's width),
    and one line that says ``-v`` shows the rest."""
    notes: list[Text] = []
    seen: dict[tuple[str, str, str], list[CaseSpec]] = {}
    for spec, fb in zip(specs, fallbacks, strict=True):
        if fb is not None:
            seen.setdefault((spec.recipe, fb.execution, fb.reason), []).append(spec)
        else:  # no fallback (none asked, none for this target, or none valid): a skipped cell
            reason = target.skip_reason(spec)
            if reason:
                seen.setdefault((spec.recipe, "skipped", reason), []).append(spec)
    if brief and seen:
        for (recipe, execution, reason), group in seen.items():
            line = Text("note: ", style="bold yellow", no_wrap=True, overflow="ellipsis")
            what = "skipped" if execution == "skipped" else f"answered {execution}"
            line.append(
                f"{recipe} cannot run on real kernels here ({len(group)} case(s) {what}): {' '.join(reason.split())}"
            )
            notes.append(line)
        notes.append(
            Text(
                "  (-v: why in full, what answers each recipe and the command that gives it on its own)",
                style="dim",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
        return notes
    for (recipe, execution, reason), group in seen.items():
        groups = ",".join(dict.fromkeys(str(s.groups) for s in group))
        line = Text("note: ", style="bold yellow")
        line.append(f"{recipe} cannot run on real kernels here: {reason}\n")
        if execution == "skipped":
            best = target.fallback(group[0], reason, "auto", backward=False)
            line.append("  it will be a skipped cell")
            line.append(f"; the best available answer: {_all_groups(best.command, groups)}" if best is not None else "")
        else:
            fb = next(f for s, f in zip(specs, fallbacks, strict=True) if s is group[0])
            what = fb.what or f"the target's {execution} answer"
            line.append(
                f"  answering {len(group)} case(s) with {what}, labelled {execution}; on its own: "
                f"{_all_groups(fb.command, groups)}"
            )
            if fb.better:
                line.append(f"\n  {_all_groups(fb.better, groups)}")
            if fb.at_scale:
                line.append(f"\n  {_all_groups(fb.at_scale, groups)}")
        notes.append(line)
    return notes


def _with_target_flags(fn: Any, targets: tuple[Any, ...]) -> Any:
    """A copy of ``fn`` with ``targets``' shape dimensions and run options in its signature
    (typer reads it): dimensions right after ``--groups``, options at the end."""
    from memaudit.targets.registry import union_flags, union_shape

    fn = functools.wraps(fn)(functools.partial(fn))
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)  # this module's annotations are strings
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in sig.parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    recipe_help = (
        f"A recipe of {targets[0].name}: {', '.join(targets[0].recipes)} | all; comma-separated for several."
        if len(targets) == 1
        else "A recipe the target knows ("
        + "; ".join(f"{t.name}: {', '.join(t.recipes)}" for t in targets)
        + ") | all; comma-separated for several."
    )
    from memaudit.targets.registry import target_names

    try:
        names = target_names()
    except UsageError:  # a broken extension: said before any command runs (main)
        names = ()
    target_help = (
        f"{' | '.join(names)} | PKG.MOD:FACTORY. Default: the first built-in target whose real code "
        "runs here, else reference. Named first, it decides the other options."
    )
    for i, p in enumerate(params):
        if p.name == "target":
            params[i] = p.replace(
                annotation=Annotated[str | None, typer.Option(autocompletion=_complete_target, help=target_help)]
            )
        if p.name == "recipe":
            params[i] = p.replace(
                annotation=Annotated[str | None, typer.Option(autocompletion=_complete_recipe, help=recipe_help)]
            )
    at = next(i for i, p in enumerate(params) if p.name == "groups") + 1
    params[at:at] = [
        inspect.Parameter(
            p.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[int | None, typer.Option(help=p.help)],
        )
        for p in union_shape(targets)
    ]
    for flag in union_flags(targets):
        option = typer.Option(*flag.decls, help=flag.help)
        params.append(
            inspect.Parameter(
                flag.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=flag.default,
                annotation=Annotated[flag.annotation, option],
            )
        )
    fn.__signature__ = sig.replace(parameters=params, return_annotation=hints.get("return", sig.return_annotation))
    return fn


def _target_named(args: list[str]) -> str | None:
    """The value of ``--target`` in a ``run`` command line, or None."""
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        if arg == "--target" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--target="):
            return arg.removeprefix("--target=")
    return None


@functools.cache
def _run_command_for(name: str | None) -> typer.core.TyperCommand:
    """``run`` as a click command whose dimension and target options are the target ``name``'s
    (every built-in target's where None, or where ``name`` names no registered target)."""
    from memaudit.targets import registry

    target = None
    if name is not None:
        try:
            target = registry.find_target(name)
        except UsageError:
            target = None  # the run itself says what is wrong with it
    targets = (target,) if target is not None else registry.builtin_targets()
    sub = typer.Typer()
    sub.command(cls=Command)(exits(_with_target_flags(run, targets)))
    return typer.main.get_command(sub)  # type: ignore[return-value]


class RunCommand(Command):
    """``run``: the target it is given (``--target X``) is resolved first, so that its options,
    help and completion are that target's dimensions and flags, not the union of the built-ins'."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        chosen = _run_command_for(_target_named(list(args)))
        self.params, self.callback = chosen.params, chosen.callback
        return super().make_context(info_name, args, parent, **extra)


app.command(cls=RunCommand, epilog=RUN_EXIT_CODES_HELP)(exits(_with_target_flags(run, ())))


@app.command(cls=Command)
def schema() -> None:
    """Print the JSON Schema every report's rows and totals are validated against on read."""
    import json

    from memaudit.report import schema as report_schema

    sys.stdout.write(json.dumps(report_schema(), indent=1, sort_keys=True) + "\n")


@app.command(cls=Command)
def doctor() -> None:
    """What each extension says about this machine (its ``doctor`` section): for TransformerEngine,
    GPU, versions, recipe availability, and which grouped-MLP path TE would take here."""
    from memaudit.extension import extensions

    console = make_console()
    for ext in extensions():
        if ext.doctor is not None and (section := ext.load(ext.doctor)()) is not None:
            console.print(section)


def _register_commands() -> None:
    """Subcommands: memaudit's own (each module in memaudit/cli/ has ``register(app)``), then each
    extension's (``Extension.commands``)."""
    from memaudit.cli import baseline, check, compare, dist, plot
    from memaudit.extension import extensions

    compare.register(app)
    dist.register(app)
    baseline.register(app)
    check.register(app)
    plot.register(app)
    global _extension_problem
    try:
        for ext in extensions():
            if ext.commands is not None:
                ext.load(ext.commands)(app)
    except UsageError as exc:  # a broken extension: every command says so (exit 2), none runs
        _extension_problem = exc


_extension_problem: UsageError | None = None
"""Why an extension's commands could not be added (said, exit 2, before any command runs)."""
_register_commands()


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as SystemExit, so that a write in progress removes its temp file."""
    raise Terminated(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal

    from memaudit.render.console import guard

    signal.signal(signal.SIGTERM, _terminate)
    # torch warns on import where NumPy is not installed (a fresh venv): memaudit does not need it
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.stdout, sys.stderr = guard(sys.stdout, "output"), guard(sys.stderr, "error")  # > /dev/full, | head -c1
    try:
        if _extension_problem is not None:
            raise _extension_problem
        app()
    except UsageError as exc:  # raised outside a command body
        sys.exit(usage_exit(make_console(stderr=True), exc).exit_code)


if __name__ == "__main__":
    main()
