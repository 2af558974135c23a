"""The ``memaudit`` command line (typer). Thin: every decision lives in the library."""

from __future__ import annotations

import inspect
import os
import re
import sys
import typing
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from memaudit.cli import exitcodes
from memaudit.cli.common import OUTCOME_CODES, exits, parse_int_list, parse_recipes, usage_exit
from memaudit.errors import UsageError
from memaudit.render.console import make_console
from memaudit.spec import DTYPES, CaseSpec, validate_splits

EXIT_CODES_HELP = (
    "Exit codes: 0 ok (every budget passes or is xfail); 1 a budget failed or XPASSed; "
    "2 bad usage or input (nothing written); 3 a case ended in error and no budget failed."
)

app = typer.Typer(
    name="memaudit",
    help="Saved-tensor memory auditor and regression gate for PyTorch and TransformerEngine.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = make_console()
err_console = make_console(stderr=True)


MAX_DIM = 2**40
"""The largest shape dimension a run accepts (larger ones overflow the libraries below)."""


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"must be >= 1, got {value}", key=flag)


def build_specs(
    target: Any,
    *,
    recipe: str | None,
    groups: str | None,
    dims: dict[str, int | None],
    dtype: str | None,
    device: str,
    options: dict[str, Any],
    splits: str | None = None,
) -> list[CaseSpec]:
    """The matrix of CaseSpecs a ``run`` asks for, validated (UsageError on bad flags).

    ``dims`` are the shape options given (``--tokens`` ...; None where not given); the target's
    declared dimensions take their defaults, and an option it does not declare is refused.
    """
    d = target.defaults
    names = [p.name for p in target.shape]
    for name, value in dims.items():
        flag = "--" + name.replace("_", "-")
        if value is not None and name not in names:
            has = f"it has {', '.join(names)}" if names else "it declares none: its factory takes no case spec"
            raise UsageError(f"target {target.name!r} has no dimension {name!r} ({has})", key=flag)
        _positive(value, flag)
        if value is not None and value > MAX_DIM:
            raise UsageError(f"must be at most 2**40, got an integer of {value.bit_length()} bits", key=flag)
    recipes = parse_recipes(recipe, target.supported_recipes, target.recipes) if recipe is not None else list(target.default_recipes)
    group_list = parse_int_list(groups, "--groups") if groups is not None else list(d["groups"])
    dtype = dtype if dtype is not None else d["dtype"]
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}", key="--dtype")
    if not re.fullmatch(r"cpu|cuda(:\d{1,3})?", device):
        raise UsageError(f"unknown device {device!r}; use cpu or cuda", key="--device")
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
    target: Annotated[str | None, typer.Option(help="reference | te-grouped-mlp | PKG.MOD:FACTORY. Default: te-grouped-mlp where TE and a GPU are present, else reference.")] = None,
    recipe: Annotated[str | None, typer.Option(help="A recipe the target knows (te-grouped-mlp: bf16, fp8-delayed, fp8-current, fp8-block, mxfp8, nvfp4) | all; comma-separated for several.")] = None,
    groups: Annotated[str | None, typer.Option(help="Group (expert) counts, e.g. 1,4,8.")] = None,
    dtype: Annotated[str | None, typer.Option(help="bf16 | fp32")] = None,
    device: Annotated[str | None, typer.Option(help="cpu | cuda. Default: cuda for the TE target, else cpu.")] = None,
    splits: Annotated[str | None, typer.Option(help="Explicit token splits, e.g. 256,0,512,256 (one group count only).")] = None,
    scenario: Annotated[Path | None, typer.Option(help="Scenario TOML: its cases and budgets replace the matrix flags.")] = None,
    allow_target: Annotated[list[str] | None, typer.Option("--allow-target", help="A PKG.MOD:FACTORY target the scenario may name (repeatable; also [tool.memaudit] allow-targets in pyproject.toml).")] = None,
    expected: Annotated[bool, typer.Option(help="Add the estimator's expected bytes per row and flag mismatches.")] = False,
    backward: Annotated[bool, typer.Option(help="Run backward after each captured forward.")] = True,
    verify_allocator: Annotated[bool, typer.Option("--verify-allocator", help="CUDA: check the rows against the caching allocator's growth over the captured forward (hidden_bytes per case).")] = False,
    allow_incomplete: Annotated[bool, typer.Option("--allow-incomplete", help="Judge budgets on cases memaudit marked incomplete instead of failing them.")] = False,
    stack: Annotated[bool, typer.Option("--stack", help="Record the source line (file:line) of the user code behind each saved tensor (rows' source; slower capture, see docs/bench.md).")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here (atomically).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (PR comment) here.")] = None,
    quiet: Annotated[bool, typer.Option(help="Only the summary table.")] = False,
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

    check_outputs({"--json": json_path, "--markdown": markdown})
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
    if loaded is not None:
        specs = loaded.specs(device=dev)
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
        )
    from memaudit.render.tables import case_table, summary_table

    def show(case: Any) -> None:
        if not quiet and case.status == "ok":
            console.print(case_table(case, show_expected=expected))
        elif not quiet:
            line = Text(case.id, style="bold")
            line.append(f": {case.status}: {case.reason}", style="")
            console.print(line, soft_wrap=True)

    if len(specs) > 1:
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("cases", total=len(specs))

            def on_case(case: Any) -> None:
                progress.update(task, advance=1, description=case.id)
                show(case)

            report = run_matrix(tgt, specs, backward=backward, verify_allocator=verify_allocator, on_case=on_case, stack=stack)
    else:
        report = run_matrix(tgt, specs, backward=backward, verify_allocator=verify_allocator, on_case=show, stack=stack)
    if expected:
        from memaudit.te.expected import attach_expected

        for case in report.cases:
            attach_expected(case)
    code = exitcodes.CASE_ERROR if any(c.status == "error" for c in report.cases) else exitcodes.OK
    verdicts = None
    if loaded is not None:
        from memaudit.judge.scenario import evaluate, outcome

        verdicts = evaluate(report, loaded, source=str(scenario), allow_incomplete=allow_incomplete)
        code = OUTCOME_CODES[outcome(report, verdicts, loaded)]
    console.print(summary_table(report.cases))
    if verdicts is not None:
        from memaudit.render.verdicts import render_failures, render_verdicts

        console.print(render_failures(verdicts))
        console.print(render_verdicts(verdicts))
    if json_path is not None:
        write_report(report, json_path)
        console.print(Text(f"wrote {json_path}"), soft_wrap=True)
    if markdown is not None:
        from memaudit.render.markdown import render_markdown
        from memaudit.report import atomic_write_text

        atomic_write_text(markdown, render_markdown(report, None, name=target))
        console.print(Text(f"wrote {markdown}"), soft_wrap=True)
    return code


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


app.command()(exits(_with_target_flags(run)))


@app.command()
def schema() -> None:
    """Print the JSON Schema every report's rows and totals are validated against on read."""
    import json

    from memaudit.report import schema as report_schema

    sys.stdout.write(json.dumps(report_schema(), indent=1, sort_keys=True) + "\n")


@app.command()
def doctor() -> None:
    """GPU, versions, recipe availability, and which grouped-MLP path TE would take here."""
    from memaudit.te.doctor import doctor_report, render_doctor

    console.print(render_doctor(doctor_report()))


def _register_commands() -> None:
    """Subcommands that live in memaudit/cli/: each module has ``register(app)``."""
    from memaudit.cli import baseline, check, compare, estimate

    compare.register(app)
    baseline.register(app)
    check.register(app)
    estimate.register(app)


_register_commands()


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as SystemExit, so that a write in progress removes its temp file."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        app()
    except UsageError as exc:  # raised outside a command body
        sys.exit(usage_exit(err_console, exc).exit_code)


if __name__ == "__main__":
    main()
