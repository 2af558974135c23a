"""The ``memaudit`` command line (typer). Thin: every decision lives in the library."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import typing
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.text import Text

from memaudit.cli import exitcodes
from memaudit.cli.common import (
    INT_LIST,
    OUTCOME_CODES,
    Command,
    Group,
    Ints,
    exits,
    parse_int_list,
    parse_recipes,
    read_inputs,
    usage_exit,
)
from memaudit.errors import UsageError
from memaudit.render.console import consoles, make_console
from memaudit.spec import DTYPES, CaseSpec, validate_splits

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

DEVICE = re.compile(r"cpu|meta|cuda(:\d{1,3})?")


def version_line() -> str:
    """``memaudit X (torch Y, transformer-engine Z)``, from the installed packages (nothing imported)."""
    import memaudit
    from memaudit.te.environment import package_version, te_version

    return (f"memaudit {memaudit.__version__} (torch {package_version('torch') or 'not installed'}, "
            f"transformer-engine {te_version() or 'not installed'})")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(exitcodes.OK)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print memaudit's, torch's and TransformerEngine's versions and exit.")] = False,
) -> None:
    """Saved-tensor memory auditor and regression gate for PyTorch and TransformerEngine."""


def _check_device(value: str | None) -> str | None:
    if value is not None and not DEVICE.fullmatch(value):
        raise typer.BadParameter(f"unknown device {value!r}; use cpu, cuda, cuda:N or meta")
    return value


def _complete_device(incomplete: str) -> list[str]:
    return [d for d in ("cpu", "cuda", "cuda:0", "cuda:1", "meta") if d.startswith(incomplete)]


def _complete_target(incomplete: str) -> list[tuple[str, str]]:
    from memaudit.targets.registry import BUILTIN

    return [(name, "built-in target") for name in BUILTIN if name.startswith(incomplete)]


def _complete_recipe(ctx: typer.Context, incomplete: str) -> list[str]:
    """The recipes of --target (given before --recipe) or of every built-in target, and ``all``;
    after a comma, the ones not listed yet."""
    from memaudit.targets import registry

    target = ctx.params.get("target")
    names = registry.recipes(target) if target in registry.BUILTIN else registry.all_recipes()
    head, comma, last = incomplete.rpartition(",")
    listed = set(head.split(",")) if comma else set()
    options = [n for n in names if n not in listed] + ([] if comma else ["all"])
    return [head + comma + n for n in options if n.startswith(last)]


MAX_DIM = 2**40
"""The largest shape dimension a run accepts (larger ones overflow the libraries below)."""


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"must be >= 1, got {value}", key=flag)


def build_specs(
    target: Any,
    *,
    recipe: str | None,
    groups: str | list[int] | None,
    dims: dict[str, int | None],
    dtype: str | None,
    device: str,
    options: dict[str, Any],
    splits: str | None = None,
    all_recipes: tuple[str, ...] | None = None,
) -> list[CaseSpec]:
    """The matrix of CaseSpecs a ``run`` asks for, validated (UsageError on bad flags).

    ``dims`` are the shape options given (``--tokens`` ...; None where not given); the target's
    declared dimensions take their defaults, and an option it does not declare is refused.
    ``all_recipes`` is what ``--recipe all`` means (default: the target's supported recipes).
    """
    d = target.defaults
    names = [p.name for p in target.shape]
    for name, value in dims.items():
        flag = "--" + name.replace("_", "-")
        if value is not None and name not in names:
            has = f"it has {', '.join(names)}" if names else "it declares none: its factory takes no required case spec"
            raise UsageError(f"target {target.name!r} has no dimension {name!r} ({has})", key=flag)
        _positive(value, flag)
        if value is not None and value > MAX_DIM:
            raise UsageError(f"must be at most 2**40, got an integer of {value.bit_length()} bits", key=flag)
    supported = all_recipes if all_recipes is not None else target.supported_recipes
    recipes = parse_recipes(recipe, supported, target.recipes) if recipe is not None else list(target.default_recipes)
    group_list = (parse_int_list(groups, "--groups") if isinstance(groups, str) else list(groups)) if groups is not None \
        else list(d["groups"])  # the CLI gives a list (IntList); the Python API may give "1,4,8"
    dtype = dtype if dtype is not None else d["dtype"]
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}", key="--dtype")
    if not DEVICE.fullmatch(device):
        raise UsageError(f"unknown device {device!r}; use cpu, cuda, cuda:N or meta", key="--device")
    shape = {n: dims.get(n) or d[n] for n in names}
    split = next((p.name for p in target.shape if p.split), None)
    specs = []
    for r in recipes:
        for g in group_list:
            split_tuple = None
            if splits:
                if split is None:
                    raise UsageError(f"target {target.name!r} has no dimension that groups split", key="--splits")
                try:
                    values = [int(s) for s in splits.split(",")]
                except ValueError:
                    raise UsageError(f"expected integers separated by commas, got {splits!r}", key="--splits") from None
                validate_splits(values, shape[split], g, target.alignment(r), key="--splits")
                split_tuple = tuple(values)
            spec = CaseSpec(target.name, r, g, tuple(shape.items()), dtype, device, dict(options), split_tuple)
            spec.split_sizes()  # validates the split dimension vs groups vs alignment
            specs.append(spec)
    ids = [s.id for s in specs]
    twice = next((i for k, i in enumerate(ids) if i in ids[:k]), None)
    if twice is not None:
        raise UsageError(f"these options make case {twice!r} more than once: target {target.name!r} does not tell "
                         "the cases apart (a factory that takes no case spec runs one case)", key="--groups")
    return specs


def run(
    target: Annotated[str | None, typer.Option(autocompletion=_complete_target, help="reference | te-grouped-mlp | PKG.MOD:FACTORY. Default: te-grouped-mlp wherever TE is installed and its forward runs (a GPU, or emulated kernels on fake CUDA with torch's CUDA build), else reference.")] = None,
    recipe: Annotated[str | None, typer.Option(autocompletion=_complete_recipe, help="A recipe the target knows (te-grouped-mlp: bf16, fp8-delayed, fp8-current, fp8-block, mxfp8, nvfp4; reference: bf16) | all; comma-separated for several.")] = None,
    groups: Annotated[Ints | None, typer.Option(parser=INT_LIST, metavar=INT_LIST.metavar, help="Group (expert) counts, e.g. 1,4,8.")] = None,
    dtype: Annotated[Dtype | None, typer.Option(help="The activations' dtype. Default: the target's (bf16).")] = None,
    device: Annotated[str | None, typer.Option(callback=_check_device, autocompletion=_complete_device, help="cpu | cuda | cuda:N | meta (shapes only: no values, nothing allocated; the reference and custom targets). Default: cuda for the TE target, else cpu.")] = None,
    splits: Annotated[str | None, typer.Option(help="Explicit token splits, e.g. 256,0,512,256 (one group count only).")] = None,
    scenario: Annotated[Path | None, typer.Option(help="Scenario TOML file, or a shipped scenario by name (grouped_mlp, reference): its cases and budgets replace the matrix flags.")] = None,
    allow_target: Annotated[list[str] | None, typer.Option("--allow-target", help="A PKG.MOD:FACTORY target the scenario may name (repeatable; also [tool.memaudit] allow-targets in pyproject.toml).")] = None,
    fallback: Annotated[FallbackMode | None, typer.Option(help="What answers a case that cannot run on real kernels here (the grouped-MLP targets): auto = TE's real forward with emulated sm100 kernels wherever TE is installed (on a GPU, or with no GPU on fake CUDA), else the estimate; emulate; estimate; none = a skipped cell. Default: auto; none with --scenario.")] = None,
    expected: Annotated[bool, typer.Option(help="Add the estimator's expected bytes per row and flag mismatches.")] = False,
    backward: Annotated[bool, typer.Option(help="Run backward after each captured forward.")] = True,
    verify_allocator: Annotated[bool, typer.Option("--verify-allocator", help="CUDA: check the rows against the caching allocator's growth over the captured forward (hidden_bytes per case).")] = False,
    allow_incomplete: Annotated[bool, typer.Option("--allow-incomplete", help="Judge budgets on cases memaudit marked incomplete instead of failing them.")] = False,
    allow_na: Annotated[bool, typer.Option("--allow-na", help="With --scenario: pass when no budget judged anything or a budget applies to no case (by default that fails).")] = False,
    stack: Annotated[bool, typer.Option("--stack", help="Record the source line (file:line) of the user code behind each saved tensor (rows' source; slower capture, see docs/bench.md).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here (atomically).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (PR comment) here.")] = None,
    memory_snapshot: Annotated[Path | None, typer.Option("--memory-snapshot", help="CUDA, one case: write the caching allocator's history of the captured forward here (a pickle for PyTorch's memory_viz), each saved tensor's block named after its row (fc1.input data columnwise nvfp4).")] = None,
    quiet: Annotated[bool, typer.Option(help="Only the summary table (and, where stderr is not a terminal, the one line per finished case).")] = False,
    nproc: Annotated[int | None, typer.Option(help="Run on N local processes through torch.distributed.run (as torchrun --nproc-per-node N -m memaudit run ... does): per-rank cases, one merged report.")] = None,
    dist_backend: Annotated[str | None, typer.Option(help="Distributed runs: the process-group backend. Default: gloo on CPU, cpu:gloo,cuda:nccl with --device cuda (the reports always travel over gloo).")] = None,
    rank_dir: Annotated[Path | None, typer.Option(help="Distributed runs: the folder each rank writes its own file to (rank<N>.json) after every case. Default: beside --json (report.ranks/), else memaudit-ranks/.")] = None,
    dist_timeout: Annotated[int, typer.Option(help="Distributed runs: seconds a rank waits for the others after a case before the run ends (a rank that died, or one an error took out of a collective).")] = 120,
    **target_flags: Any,
) -> int:
    """Run the target for each (recipe, group count) and report every saved tensor.

    \f
    The targets' shape dimensions (``Target.shape``: ``--tokens`` ...) and own options
    (``Target.flags``) are added to this signature below.
    """
    from memaudit.targets.registry import all_shape_params

    dims = {p.name: target_flags.pop(p.name, None) for p in all_shape_params()}
    from memaudit.report import check_outputs, write_report
    from memaudit.runner import run_matrix
    from memaudit.targets.registry import default_target_name, get_target

    check_outputs({"--json": json_path, "--markdown": markdown, "--memory-snapshot": memory_snapshot},
                  inputs=read_inputs(scenario=scenario))
    if memory_snapshot is not None:
        from memaudit.capture.snapshot import unavailable_reason

        if nproc is not None:
            raise UsageError("records one process's allocator: not with --nproc", key="--memory-snapshot")
        if (why := unavailable_reason()) is not None:
            raise UsageError(why, key="--memory-snapshot")
    loaded = None
    if scenario is not None:
        from memaudit.judge.scenario import allowed_targets, load_scenario

        loaded = load_scenario(scenario, allowed_targets(tuple(allow_target or ())))
        target = loaded.target
    target = target or default_target_name()
    tgt = get_target(target)
    if loaded is not None:  # the scenario's [flags], where the command line left the default
        from memaudit.targets.registry import run_flags

        defaults = {f.name: f.default for f in run_flags()}
        for name, value in loaded.flags.items():
            if target_flags.get(name, defaults[name]) == defaults[name]:
                target_flags[name] = value
    options: dict[str, Any] = tgt.configure(target_flags)
    dev = device if device is not None else tgt.default_device
    if verify_allocator:
        import torch

        if dev != "cuda" or not torch.cuda.is_available():
            raise UsageError(
                f"needs --device cuda and a CUDA GPU (device {dev!r}, CUDA available: {torch.cuda.is_available()})",
                key="--verify-allocator",
            )
    mode = fallback.value if fallback is not None else ("none" if loaded is not None else "auto")
    if loaded is not None:
        specs = loaded.specs(device=dev, options=options)  # the target's options from the [flags] too
    else:
        specs = build_specs(
            tgt,
            recipe=recipe,
            groups=groups,
            dims=dims,
            dtype=dtype,
            device=dev,
            options=options,
            splits=splits,
            all_recipes=getattr(tgt, "fallback_recipes", None) if mode != "none" else None,
        )
    if memory_snapshot is not None and len(specs) != 1:
        raise UsageError(f"records one case; these options make {len(specs)} (choose one recipe and one group count)",
                         key="--memory-snapshot")
    from memaudit.cli.dist import DistOptions, run_distributed

    code = run_distributed(
        DistOptions(nproc, dist_backend, rank_dir, dist_timeout), target=tgt, target_name=target, specs=specs,
        scenario=loaded, device=dev, backward=backward, verify_allocator=verify_allocator, stack=stack, expected=expected,
        allow_incomplete=allow_incomplete, allow_na=allow_na, json_path=json_path, markdown=markdown, quiet=quiet,
        inputs=read_inputs(scenario=scenario))
    if code is not None:  # --nproc, or a rank under torchrun
        return code
    from memaudit.render.progress import CaseProgress
    from memaudit.runner import plan_fallbacks

    fallbacks = plan_fallbacks(tgt, specs, mode, backward=backward)
    if memory_snapshot is not None and fallbacks[0] is not None:
        raise UsageError(f"case {specs[0].id!r} cannot run on real kernels here and would be answered by the "
                         f"{fallbacks[0].execution} fallback, which records no allocator (use --kernels emulated)",
                         key="--memory-snapshot")
    from memaudit.render.modules import module_table
    from memaudit.render.tables import case_table, summary_table

    console, err_console = consoles()
    for line in fallback_notes(tgt, specs, fallbacks, mode):  # said before anything runs
        err_console.print(line, soft_wrap=True)

    def show(case: Any) -> None:
        if not quiet and case.status == "ok":
            console.print(case_table(case, show_expected=expected, width=console.width))
            if (groups := module_table(case)) is not None:
                console.print(groups)
        elif not quiet:
            line = Text(case.id, style="bold")
            line.append(f": {case.status}: {case.reason}", style="")
            console.print(line, soft_wrap=True)

    # on a terminal a bar (for a matrix); else one line per finished case. On stderr, so that
    # stdout holds only the tables.
    tty = err_console.is_terminal
    progress = CaseProgress(err_console, len(specs), live=tty, redirect_stdout=console.is_terminal) \
        if len(specs) > 1 or not tty else None

    def on_case(case: Any) -> None:
        if progress is not None:
            progress.finish(case)
        show(case)

    with progress if progress is not None else contextlib.nullcontext():
        report = run_matrix(tgt, specs, backward=backward, verify_allocator=verify_allocator, on_case=on_case,
                            on_start=progress.start if progress is not None else None, fallbacks=fallbacks,
                            stack=stack, snapshot=None if memory_snapshot is None else str(memory_snapshot))
    if expected:
        from memaudit.te.expected import attach_expected

        for case in report.cases:
            attach_expected(case)
    code = exitcodes.CASE_ERROR if any(c.status == "error" for c in report.cases) else exitcodes.OK
    verdicts = None
    if loaded is not None:
        from memaudit.judge.scenario import evaluate, outcome

        verdicts = evaluate(report, loaded, source=loaded.path, allow_incomplete=allow_incomplete)
        code = OUTCOME_CODES[outcome(report, verdicts, loaded)]
    for case in report.cases:  # an emulated answer that failed, and was replaced by the estimate, says why
        for warning in case.warnings:
            if warning.startswith("TE's real forward with emulated kernels failed"):
                line = Text("note: ", style="bold yellow")
                line.append(f"{case.id}: {warning}")
                err_console.print(line, soft_wrap=True)
    console.print(summary_table(report.cases, width=console.width))
    if memory_snapshot is not None:
        line = Text("memory snapshot: ", style="bold")
        if report.cases[0].status == "ok":
            line.append(f"{memory_snapshot} (open it in PyTorch's memory_viz; saved tensors' blocks carry their row names)")
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
    answered = [c for c in report.cases if c.status == "ok" and c.execution in ("measured", "emulated")]
    if not answered and code == exitcodes.OK:
        counts = {s: sum(1 for c in report.cases if (c.execution if c.status == "ok" else c.status) == s)
                  for s in ("estimated", "skipped", "error")}
        err_console.print(Text("nothing was measured or emulated: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                               + f" (exit {exitcodes.NOTHING_MEASURED})"), soft_wrap=True)
        code = exitcodes.NOTHING_MEASURED
    if verdicts is not None and loaded is not None and loaded.rules:
        from memaudit.cli.common import judge_vacuity

        if judge_vacuity(err_console, report, verdicts, loaded, allow_na=allow_na, strict=False) and code == exitcodes.OK:
            code = exitcodes.FAIL
    return code


def _all_groups(command: str, groups: str) -> str:
    """``command`` (made for one case) with ``--groups`` naming every group count of the recipe."""
    return re.sub(r"--groups \d+", f"--groups {groups}", command, count=1)


class FallbackMode(StrEnum):
    """``run --fallback`` (memaudit.targets.base.FALLBACKS)."""

    auto = "auto"
    emulate = "emulate"
    estimate = "estimate"
    none = "none"


def _toy_shape(target: Any, spec: CaseSpec) -> bool:
    """The grouped MLP at its default shape (no ``--tokens/--hidden/--ffn`` given): a toy size."""
    shape = dict(spec.shape)
    return set(shape) == {"tokens", "hidden", "ffn"} and all(shape[n] == target.defaults.get(n) for n in shape)


def fallback_notes(target: Any, specs: list[CaseSpec], fallbacks: list[Any], mode: str) -> list[Text]:
    """Said before anything runs: each recipe that cannot run on real kernels here, why (the
    target's or TE's own words), and what answers it instead, with the command that gives it."""
    notes: list[Text] = []
    seen: dict[tuple[str, str, str], list[CaseSpec]] = {}
    for spec, fb in zip(specs, fallbacks, strict=True):
        if fb is not None:
            seen.setdefault((spec.recipe, fb.execution, fb.reason), []).append(spec)
        else:  # no fallback (none asked, none for this target, or none valid): a skipped cell
            reason = target.skip_reason(spec)
            if reason:
                seen.setdefault((spec.recipe, "skipped", reason), []).append(spec)
    for (recipe, execution, reason), group in seen.items():
        groups = ",".join(dict.fromkeys(str(s.groups) for s in group))
        line = Text("note: ", style="bold yellow")
        line.append(f"{recipe} cannot run on real kernels here: {reason}\n")
        if execution == "skipped":
            offer = getattr(target, "fallback", None)
            best = offer(group[0], reason, "auto", backward=False) if offer is not None else None
            line.append("  it will be a skipped cell")
            line.append(f"; the best available answer: {_all_groups(best.command, groups)}" if best is not None else "")
        else:
            fb = next(f for s, f in zip(specs, fallbacks, strict=True) if s is group[0])
            what = ("TE's real forward with emulated kernels (stand-ins that allocate what TE's C++ allocates)"
                    if execution == "emulated" else "TE 2.20.2's layout rules (no kernel and no TE code runs)")
            line.append(f"  answering {len(group)} case(s) with {what}, labelled {execution}; on its own: "
                        f"{_all_groups(fb.command, groups)}")
            if fb.better:
                line.append(f"\n  {_all_groups(fb.better, groups)}")
            if _toy_shape(target, group[0]):
                from memaudit.te.fallback import at_pr3545_shape

                why = "; where NVFP4 keeps about 136 MiB per expert layer that no backward reads" if recipe == "nvfp4" else ""
                line.append(f"\n  at TE PR #3545's shape (T=82,944, H=3,072, F=1,536{why}), not this toy one: "
                            f"{at_pr3545_shape(_all_groups(fb.command, groups))}")
        notes.append(line)
    return notes


def _with_target_flags(fn: Any) -> Any:
    """``fn`` with every built-in target's shape dimensions and run options in its signature
    (typer reads it): dimensions right after ``--groups``, options at the end."""
    from memaudit.targets.registry import all_shape_params, run_flags

    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)  # this module's annotations are strings
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in sig.parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    at = next(i for i, p in enumerate(params) if p.name == "groups") + 1
    params[at:at] = [
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                          annotation=Annotated[int | None, typer.Option(help=p.help)])
        for p in all_shape_params()
    ]
    for flag in run_flags():
        option = typer.Option(*flag.decls, help=flag.help)
        params.append(inspect.Parameter(flag.name, inspect.Parameter.KEYWORD_ONLY, default=flag.default,
                                        annotation=Annotated[flag.annotation, option]))
    fn.__signature__ = sig.replace(parameters=params, return_annotation=hints.get("return", sig.return_annotation))
    return fn


app.command(cls=Command, epilog=RUN_EXIT_CODES_HELP)(exits(_with_target_flags(run)))


@app.command(cls=Command)
def schema() -> None:
    """Print the JSON Schema every report's rows and totals are validated against on read."""
    import json

    from memaudit.report import schema as report_schema

    sys.stdout.write(json.dumps(report_schema(), indent=1, sort_keys=True) + "\n")


@app.command(cls=Command)
def doctor() -> None:
    """GPU, versions, recipe availability, and which grouped-MLP path TE would take here."""
    from memaudit.te.doctor import doctor_report, render_doctor

    make_console().print(render_doctor(doctor_report()))


def _register_commands() -> None:
    """Subcommands that live in memaudit/cli/: each module has ``register(app)``."""
    from memaudit.cli import baseline, check, compare, dist, estimate, plot

    compare.register(app)
    dist.register(app)
    baseline.register(app)
    check.register(app)
    estimate.register(app)
    plot.register(app)


_register_commands()


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as SystemExit, so that a write in progress removes its temp file."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal

    from memaudit.render.console import guard

    signal.signal(signal.SIGTERM, _terminate)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.stdout, sys.stderr = guard(sys.stdout, "output"), guard(sys.stderr, "error")  # > /dev/full, | head -c1
    try:
        app()
    except UsageError as exc:  # raised outside a command body
        sys.exit(usage_exit(make_console(stderr=True), exc).exit_code)


if __name__ == "__main__":
    main()
