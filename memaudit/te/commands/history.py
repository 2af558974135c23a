"""``memaudit te-history``: TE's saved state across TE's own history (docs/investigations/te-history.md).

Audits the grouped-MLP case list across TE versions: releases (``--te 2.15,2.17.1``), git
revisions of a TE checkout (``--te-repo PATH --rev A..B``), local trees (``--te-tree PATH``) and
the installed TE (``--installed``), each version's Python in a process of its own with emulated
kernels. Writes one ``memaudit.report/3`` report per version and the history (JSON, markdown, a
figure) into ``--out``. ``--bisect GOOD..BAD`` with one case finds the first commit that changed the
case's saved state instead.

Exit codes: 0 ok (bisect: the commit was found); 2 bad usage or input (nothing written); 3 some cell
did not run (its reason is in the reports; bisect: skipped commits hide which one of several made
the change).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from memaudit.cli.common import exits, parse_int_list
from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.render.console import consoles
from memaudit.te.history.cases import RECIPES_HELP, TREE_HELP

HISTORY_HELP = (
    "Audit TE's grouped MLP across TE versions: releases (--te), git revisions of a TE checkout "
    "(--te-repo with --rev), local trees (--te-tree), the installed TE (--installed). Each version's "
    "Python runs in its own process with emulated kernels. Writes a report per version and the history "
    "(history.json, history.md, history.png) into --out; --bisect GOOD..BAD finds the first commit that "
    "changed one case's saved state.\n\nExit codes: 0 ok (bisect: found); 2 bad usage or input (nothing "
    "written); 3 a cell did not run (bisect: skipped commits hide the one)."
)


def select_cases(shapes: str, groups: str, recipes: str | None, paths: str, case_ids: list[str]) -> list:
    """The case list: the named shapes x paths (fused, unfused) x recipes x group counts, or the
    cases named by id."""
    from memaudit.te.history.cases import FUSED_RECIPES, SHAPES, UNFUSED_RECIPES, default_cases

    names = tuple(s.strip() for s in shapes.split(",") if s.strip())
    for s in names:
        if s not in SHAPES:
            raise UsageError(f"unknown shape {s!r}; use one of {', '.join(SHAPES)}", key="--shape")
    gs = tuple(parse_int_list(groups, "--groups"))
    want_paths = {p.strip() for p in paths.split(",") if p.strip()}
    if not want_paths or want_paths - {"fused", "unfused"}:
        raise UsageError(f"expected fused, unfused or both, got {paths!r}", key="--path")
    known = set(FUSED_RECIPES) | set(UNFUSED_RECIPES)
    want = None if recipes is None else {r.strip() for r in recipes.split(",") if r.strip()}
    if want is not None and (not want or want - known):
        raise UsageError(f"unknown recipe in {recipes!r}; use {', '.join(sorted(known))}", key="--recipes")
    every = default_cases(tuple(SHAPES), (1, 2, 4, 8, 16))
    if case_ids:
        by_id = {c.id: c for c in default_cases(tuple(SHAPES), tuple(sorted({*gs, 1, 2, 4, 8, 16})))}
        missing = [i for i in case_ids if i not in by_id]
        if missing:
            raise UsageError(f"unknown case {missing[0]!r}; e.g. {every[0].id}", key="--case")
        return [by_id[i] for i in case_ids]
    out = [
        c
        for c in default_cases(names, gs)
        if ("fused" if c.fused else "unfused") in want_paths and (want is None or c.recipe in want)
    ]
    if not out:
        raise UsageError("the selection has no case", key="--recipes")
    return out


@exits
def te_history(
    te: Annotated[
        str | None,
        typer.Option(
            "--te",
            help="Released TE versions, comma-separated (2.15,2.17.1): each version's pure-Python wheel from the "
            "package index.",
        ),
    ] = None,
    te_repo: Annotated[
        Path | None, typer.Option("--te-repo", help="A TE git checkout (or bare repository) whose history to read.")
    ] = None,
    rev: Annotated[
        list[str] | None,
        typer.Option(
            "--rev",
            help="A revision of --te-repo, or a range A..B (A, then B's first-parent line after A). Repeatable.",
        ),
    ] = None,
    te_tree: Annotated[list[str] | None, typer.Option("--te-tree", help=TREE_HELP)] = None,
    installed: Annotated[bool, typer.Option("--installed", help="Also the installed TE's own Python.")] = False,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for the reports and the history (created; files in it are replaced atomically)."
        ),
    ] = None,
    shape: Annotated[
        str,
        typer.Option(
            help="Named shapes, comma-separated: small (T=4096 H=1024 F=2048), pr3545 (T=82944 H=3072 F=1536)."
        ),
    ] = "small",
    groups: Annotated[str, typer.Option(help="Group counts G, comma-separated.")] = "1,8",
    recipes: Annotated[str | None, typer.Option(help=RECIPES_HELP)] = None,
    path: Annotated[str, typer.Option("--path", help="fused, unfused or both (comma-separated).")] = "fused,unfused",
    case: Annotated[
        list[str] | None,
        typer.Option("--case", help="A case id (as the reports name it) instead of the selection above. Repeatable."),
    ] = None,
    bisect: Annotated[
        str | None,
        typer.Option(
            "--bisect",
            help="GOOD..BAD of --te-repo: find the first commit that changed the one selected case's saved state.",
        ),
    ] = None,
    unread: Annotated[
        bool,
        typer.Option(
            "--unread",
            help="Run each version with the read analysis (observed reads): unread bytes per version in the history.",
        ),
    ] = False,
    bisect_on: Annotated[
        str,
        typer.Option(
            "--bisect-on",
            help="With --bisect: saved (the saved state) or unread (the bytes backward never read; runs the read "
            "analysis).",
        ),
    ] = "saved",
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Cache for wheels and trees. Default: $MEMAUDIT_CACHE, else $XDG_CACHE_HOME/memaudit or "
            "~/.cache/memaudit."
        ),
    ] = None,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Draw history.png (needs matplotlib).")] = True,
) -> int:
    """Audit TE's saved state across TE versions, or bisect one change."""
    from memaudit.report import atomic_write_bytes, atomic_write_text, check_output
    from memaudit.te.history import sources

    out, err = consoles()
    if out_dir is None:
        raise UsageError("give --out DIR for the reports", key="--out")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"not a folder: {out_dir}", key="--out")
    if bisect_on not in ("saved", "unread"):
        raise UsageError(f"expected saved or unread, got {bisect_on!r}", key="--bisect-on")
    if bisect_on != "saved" and bisect is None:
        raise UsageError("chooses what --bisect compares: add --bisect GOOD..BAD", key="--bisect-on")
    cases = select_cases(shape, groups, recipes, path, list(case or []))
    cache_path = sources.cache_dir(cache)
    repo = sources.check_repo(te_repo) if te_repo is not None else None
    if bisect is not None:
        return _bisect(out, repo, bisect, cases, cache_path, out_dir, [te, rev, te_tree, installed], on=bisect_on)
    from memaudit.te.history.history import history_of, parse_versions, run_versions

    specs = parse_versions(te, repo, list(rev or []), list(te_tree or []), installed)
    if plot:
        from memaudit.cli.plot import check_matplotlib

        check_matplotlib("--plot")

    def progress(run, i: int, n: int) -> None:  # noqa: ANN001 - a VersionRun
        ok = sum(c.status == "ok" for c in run.report.cases)
        line = f"[{i}/{n}] TE {run.info.label}: {ok}/{len(run.report.cases)} cases ran ({run.seconds:.1f} s)"
        if run.info.error:
            line += f"; {run.info.error}"
        err.print(Text(line), soft_wrap=True)

    runs = run_versions(specs, cases, cache_path, on_version=progress, unread="observed" if unread else None)
    history = history_of(runs, cases)
    from memaudit.te.history.render import history_figure, history_markdown, history_table

    files: list[tuple[Path, str | bytes]] = [
        (out_dir / r.info.report, r.report.to_json()) for r in runs if r.info.report
    ]
    files += [(out_dir / "history.json", history.to_json()), (out_dir / "history.md", history_markdown(history))]
    if plot:
        from memaudit.render.plots import render

        files.append((out_dir / "history.png", render(history_figure(history), "png")))
    out_dir.mkdir(parents=True, exist_ok=True)
    for p, _ in files:
        check_output(p, "--out")
    for p, data in files:
        if isinstance(data, bytes):
            atomic_write_bytes(p, data)
        else:
            atomic_write_text(p, data)
    out.print(history_table(history))
    for c, ch in history.changed():
        out.print(Text(f"{c.id}: {ch.before} -> {ch.after}: {ch.text}"), soft_wrap=True)
    out.print(Text(f"wrote {len(files)} files into {out_dir}"), soft_wrap=True)
    from memaudit.te.machine.suspected import known_failure

    for c in history.cases:  # a known TE bug is an expected failure: said, labelled, not a red run
        for cell in c.cells:
            if (s := known_failure(cell.status, cell.reason)) is not None:
                err.print(Text(f"expected failure: {c.id} on TE {cell.version}: {s.note}"), soft_wrap=True)
    unexpected = [
        cell
        for c in history.cases
        for cell in c.cells
        if cell.status != "ok" and known_failure(cell.status, cell.reason) is None
    ]
    return exitcodes.CASE_ERROR if unexpected else exitcodes.OK


def _bisect(out, repo, spec: str, cases: list, cache: Path, out_dir: Path, others: list, on: str = "saved") -> int:  # noqa: ANN001
    from memaudit.report import atomic_write_text, check_output
    from memaudit.te.history.bisect import bisect
    from memaudit.te.history.render import bisect_markdown

    if repo is None:
        raise UsageError("--bisect needs --te-repo", key="--bisect")
    if ".." not in spec:
        raise UsageError(f"expected GOOD..BAD, got {spec!r}", key="--bisect")
    if any(others):
        raise UsageError(
            "--bisect takes one range of --te-repo, not --te, --rev, --te-tree or --installed", key="--bisect"
        )
    if len(cases) != 1:
        raise UsageError(
            f"--bisect needs exactly one case (--case ID, or a selection of one); the selection has {len(cases)}",
            key="--case",
        )
    good, bad = spec.split("..", 1)

    def show(p, n: int) -> None:  # noqa: ANN001 - a Probe
        saved = "" if p.saved_bytes is None else f" {p.saved_bytes:,} B, {p.rows} rows"
        saved += "" if p.unread_bytes is None else f", {p.unread_bytes:,} B never read"
        out.print(Text(f"[{n}] {p.commit[:12]} {p.verdict}: {p.status}{saved} ({p.seconds:.1f} s)"), soft_wrap=True)

    result = bisect(repo, good, bad, cases[0], cache, on_probe=show, on=on)
    out_dir.mkdir(parents=True, exist_ok=True)
    import json

    targets = [
        (out_dir / "bisect.json", json.dumps(result.to_dict(), sort_keys=True, indent=1) + "\n"),
        (out_dir / "bisect.md", bisect_markdown(result)),
    ]
    for p, _ in targets:
        check_output(p, "--out")
    for p, text in targets:
        atomic_write_text(p, text)
    out.print(Text(f"first commit that changed {cases[0].id}: {result.summary()}"), soft_wrap=True)
    if result.pr is not None:
        out.print(Text(f"PR #{result.pr}"), soft_wrap=True)
    for r in result.changes:
        out.print(Text(f"  {r.key}: {r.delta:+,} B"), soft_wrap=True)
    return exitcodes.OK if result.first is not None else exitcodes.CASE_ERROR


def register(app: typer.Typer) -> None:
    """Add ``memaudit te-history`` to ``app``."""
    app.command("te-history", help=HISTORY_HELP)(te_history)
