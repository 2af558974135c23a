"""The plots of ``memaudit estimate --plot`` and ``memaudit plot``: the figures' data, not pixels.

Each figure is checked through what it draws (line x/y data, line styles, bar heights, tick
labels, legend and footnote text) against the estimator's or the report's saved bytes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import matplotlib
import pytest
import typer
from typer.testing import CliRunner

from memaudit.cli import plot as plot_cmd
from memaudit.render.plots import (
    Bar,
    KindsFigure,
    Missing,
    Segment,
    draw_kinds,
    draw_tokens,
    fmt_axis_bytes,
    fmt_tokens,
    kinds_from_report,
    kinds_path,
    linear_byte_locator,
    log_byte_locator,
    render,
    saved_segments,
    short_reason,
    tokens_from_report,
)
from memaudit.report import CaseReport, Report, Row, compute_totals, load_report, write_report
from memaudit.te.commands import estimate as estimate_cmd
from memaudit.te.estimate import (
    estimate_config,
    estimate_report,
    estimate_totals,
    resolve,
    skipped_case,
    sweep_point,
)
from memaudit.te.estimate.figures import kinds_from_estimate, tokens_from_sweep
from memaudit.te.machine.recipes import RECIPES

matplotlib.use("Agg")  # the figures are matplotlib.figure.Figure objects (no pyplot); Agg renders PNG

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "h200" / "te-grouped-mlp.json"
TOKENS = [1024, 2048, 4096, 8192, 16384]
H, F = 3072, 1536
BYTES_LABEL = re.compile(r"^(0|\d+(\.\d+)? (B|KiB|MiB|GiB|TiB))$")
PNG = b"\x89PNG\r\n\x1a\n"


def sweep(groups: int, tokens: list[int] = TOKENS, variant: str = "te-2.20"):
    return [sweep_point(r, t, H, F, groups, variant) for r in RECIPES for t in tokens]


def lines_by_gid(fig) -> dict[str, object]:
    (ax,) = fig.axes
    return {ln.get_gid(): ln for ln in ax.get_lines() if ln.get_gid()}


def footnote(fig) -> str:
    return "\n".join(t.get_text() for t in fig.texts if t.get_gid() == "footnote")


def legend_texts(fig) -> list[str]:
    (ax,) = fig.axes
    return [t.get_text() for t in ax.get_legend().get_texts()]


# ---- figure 1: saved bytes vs tokens ---------------------------------------------------------------


def test_lines_are_the_estimators_saved_bytes_on_one_shared_axes() -> None:
    data = tokens_from_sweep(sweep(8), 8, "te-2.20", "pr3545")
    assert data is not None
    fig = draw_tokens(data)
    assert len(fig.axes) == 1  # one axes: every recipe on the same x and y scale
    lines = lines_by_gid(fig)
    for r in RECIPES:
        ln = lines[f"{r}:te-2.20"]
        assert list(ln.get_xdata()) == TOKENS
        cases = [estimate_config(resolve(r, t, H, F, 8)) for t in TOKENS]
        assert list(ln.get_ydata()) == [c.totals.saved_bytes for c in cases]
        assert [c.totals.saved_bytes for c in cases] == [compute_totals(c.rows).saved_bytes for c in cases]
        assert ln.get_linestyle() == "-"
    (ax,) = fig.axes
    lo, hi = ax.get_ylim()
    ys = [y for ln in ax.get_lines() if ln.get_gid() and ln.get_gid() != "missing" for y in ln.get_ydata()]
    assert lo < min(ys) and max(ys) < hi
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_pr3545_is_a_dashed_line_of_the_recipes_colour_only_where_it_differs() -> None:
    fig = draw_tokens(tokens_from_sweep(sweep(8), 8, "te-2.20", "pr3545"))
    lines = lines_by_gid(fig)
    dashed = [g for g in lines if g.endswith(":dashed")]
    assert dashed == ["nvfp4:pr3545:dashed"]  # PR #3545 changes the NVFP4 fused path only
    ln, base = lines["nvfp4:pr3545:dashed"], lines["nvfp4:te-2.20"]
    assert ln.get_linestyle() == "--" and ln.get_color() == base.get_color()
    want = [estimate_totals(resolve("nvfp4", t, H, F, 8), "pr3545").saved_bytes for t in TOKENS]
    assert list(ln.get_ydata()) == want and all(w < b for w, b in zip(want, base.get_ydata(), strict=True))
    assert any(t.startswith("nvfp4 · pr3545 (dashed)") and "-" in t for t in legend_texts(fig))


def test_no_dashed_line_when_the_variant_is_its_own_comparison() -> None:
    data = tokens_from_sweep(sweep(8), 8, "te-2.20", "te-2.20")
    assert not any(ln.dashed for ln in data.lines)


def test_tick_labels_are_tokens_and_human_bytes_not_powers_of_two() -> None:
    fig = draw_tokens(tokens_from_sweep(sweep(8), 8, "te-2.20", "pr3545"))
    (ax,) = fig.axes
    fig.canvas.draw()  # matplotlib's formatters label the ticks when the figure is drawn
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1K", "2K", "4K", "8K", "16K"]
    ylabels = [t.get_text() for t in ax.get_yticklabels()]
    assert ylabels and all(BYTES_LABEL.match(s) for s in ylabels), ylabels
    assert any(s.endswith("MiB") for s in ylabels)
    assert not any("^" in s or "$" in s for s in ylabels)
    assert not ax.get_xminorticklabels() and not ax.get_yminorticklabels()


def test_legend_has_one_entry_per_recipe_and_says_which_lines_coincide() -> None:
    fig = draw_tokens(tokens_from_sweep(sweep(8), 8, "te-2.20", "pr3545"))
    texts = legend_texts(fig)
    solid = [t for t in texts if "(dashed)" not in t]
    assert [t.split(" ·")[0] for t in solid] == list(RECIPES)
    current = next(t for t in solid if t.startswith("fp8-current"))
    assert "the same bytes as fp8-delayed" in current  # equal lines are told apart, not hidden
    lines = lines_by_gid(fig)
    assert lines["fp8-current:te-2.20"].get_markerfacecolor() == "none"


def test_skipped_points_are_crossed_and_listed_never_dropped() -> None:
    points = sweep(64)
    skipped = [p for p in points if p.config is None]
    assert {p.recipe for p in skipped} == {"mxfp8", "nvfp4"} and len(skipped) >= 4
    data = tokens_from_sweep(points, 64, "te-2.20", "pr3545")
    assert {(m.recipe, m.tokens) for m in data.missing} == {(p.recipe, p.tokens) for p in skipped}
    fig = draw_tokens(data)
    (ax,) = fig.axes
    crosses = [ln for ln in ax.get_lines() if ln.get_gid() == "missing"]
    assert len(crosses) == len(skipped)
    assert sorted(ln.get_xdata()[0] for ln in crosses) == sorted(p.tokens for p in skipped)
    foot = footnote(fig)
    for p in skipped:
        assert f"{p.recipe} skipped at T = {fmt_tokens(p.tokens)}" in foot
    assert "too few for 64 groups" in foot
    assert "skipped or failed (listed below)" in legend_texts(fig)


def test_a_recipe_with_no_point_keeps_its_legend_entry() -> None:
    points = [sweep_point(r, t, H, F, 64) for r in ("bf16", "nvfp4") for t in (1024, 2048)]
    assert all(p.config is None for p in points if p.recipe == "nvfp4")
    fig = draw_tokens(tokens_from_sweep(points, 64, "te-2.20", "pr3545"))
    assert "nvfp4: no data (see below)" in legend_texts(fig)
    assert "nvfp4 skipped at T = 1K, 2K" not in footnote(fig)  # one line per reason (the T is in it)
    assert "nvfp4 skipped at T = 1K" in footnote(fig) and "nvfp4 skipped at T = 2K" in footnote(fig)


def test_one_token_count_is_no_figure_1() -> None:
    assert tokens_from_sweep(sweep(8, [4096]), 8, "te-2.20", "pr3545") is None


def test_other_shapes_of_a_sweep_are_named_not_mixed_in() -> None:
    points = sweep(8) + [sweep_point("bf16", t, 1024, 1024, 8) for t in TOKENS]
    data = tokens_from_sweep(points, 8, "te-2.20", None)
    assert all(len(ln.tokens) == len(TOKENS) for ln in data.lines)
    assert any("H = 1024, F = 1024" in n for n in data.notes)


# ---- saved bytes by storage ------------------------------------------------------------------------


PATH_CASES = [
    (r, p)
    for r in RECIPES
    for p in ("fused", "unfused-grouped", "unfused-split")
    if (p != "fused" or r in ("mxfp8", "nvfp4")) and (r, p) != ("fp8-delayed", "unfused-grouped")
]


@pytest.mark.parametrize("recipe,path", PATH_CASES)
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_segments_sum_to_saved_bytes_exactly(recipe, groups, path) -> None:
    """Every path TE takes (fp8-delayed has no grouped-tensor path, only MXFP8/NVFP4 fuse)."""
    case = estimate_config(resolve(recipe, 4096, 1024, 2048, groups, path=path))
    segs, total = saved_segments(case.rows)
    assert total == sum(s.bytes for s in segs) == case.totals.saved_bytes
    assert all(s.bytes > 0 for s in segs)


def test_bf16_views_of_one_storage_count_once_and_parameters_not_at_all() -> None:
    case = estimate_config(resolve("bf16", 4096, 1024, 2048, 8))
    assert any(r.is_parameter for r in case.rows)
    views = [r for r in case.rows if r.operand == "fc1.input"]
    assert len(views) == 8 and len({r.storage for r in views}) == 1
    segs, total = saved_segments(case.rows)
    assert total == case.totals.saved_bytes < case.totals.physical_bytes
    assert sum(s.bytes for s in segs if s.kind == "tensor") == sum(
        r.storage_bytes for r in {r.storage: r for r in case.rows if r.kind == "tensor" and not r.is_parameter}.values()
    )


def test_a_shared_storage_goes_to_its_first_row() -> None:
    rows = [
        Row(0, "data", "fp8", [64], "uint8", 64, storage="s0", storage_bytes=128, orientation="rowwise"),
        Row(1, "scale_inv", "fp8", [64], "uint8", 64, storage="s0", storage_bytes=128, storage_offset=64),
        Row(2, "tensor", "bf16", [8], "bfloat16", 16, storage="s1", storage_bytes=16, is_parameter=True),
        Row(3, "tensor", "bf16", [8], "bfloat16", 16, storage="s2", storage_bytes=16, resides="host"),
        Row(4, "container", "grouped", [], "none", 0),
        Row(5, "unknown", "?", [4], "float32", 16, storage="s3", storage_bytes=16),
        Row(6, "amax", "fp8", [1], "float32", 4, storage="s4", storage_bytes=4, orientation="columnwise"),
    ]
    segs, total = saved_segments(rows)
    assert total == compute_totals(rows).saved_bytes == 128 + 16 + 4
    assert segs == [Segment("data", "rowwise", 128), Segment("amax", "columnwise", 4), Segment("other", "none", 16)]


def committed_reports() -> list[Path]:
    out = []
    for p in sorted((ROOT / "reports").rglob("*.json")):
        try:
            load_report(p)
        except Exception:  # bench output, probe records: not reports
            continue
        out.append(p)
    return out


@pytest.mark.parametrize("path", committed_reports(), ids=lambda p: str(p.relative_to(ROOT)))
def test_segments_of_every_committed_case_sum_to_its_saved_bytes(path) -> None:
    for case in load_report(path).cases:
        if case.status == "ok":
            assert saved_segments(case.rows)[1] == case.totals.saved_bytes, case.id


# ---- figure 2: what is saved -----------------------------------------------------------------------


def bar_heights(fig) -> dict[str, int]:
    (ax,) = fig.axes
    out: dict[str, int] = {}
    for p in ax.patches:
        gid = p.get_gid() or ""
        if gid.startswith("bar:"):
            label = gid.split(":")[1]
            out[label] = out.get(label, 0) + int(p.get_height())
    return out


def test_kinds_bars_sum_to_saved_bytes_and_pr3545_sits_beside_nvfp4() -> None:
    data = kinds_from_estimate(RECIPES, 82944, 8, H, F, "te-2.20", "pr3545")
    labels = [b.label for b in data.bars]
    assert labels == [
        "bf16\nunfused-split",
        "fp8-delayed\nunfused-split",
        "fp8-current\nunfused-split",
        "fp8-block\nunfused-split",
        "mxfp8\nfused",
        "nvfp4\nfused",
        "nvfp4\npr3545",
    ]
    fig = draw_kinds(data)
    heights = bar_heights(fig)
    for b in data.bars:
        c = resolve(b.recipe, 82944, H, F, 8)
        want = estimate_config(c, b.variant).totals.saved_bytes
        assert b.saved_bytes == want == sum(s.bytes for s in b.segments)
        assert heights[b.label] == want  # the drawn stack is the saved bytes, to the byte
    (ax,) = fig.axes
    fig.canvas.draw()  # matplotlib's formatters label the ticks when the figure is drawn
    lo, hi = ax.get_ylim()
    shown = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi]
    assert shown and all(BYTES_LABEL.match(t) for t in shown), shown
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"data", "scale_inv / scale", "amax", "metadata", "rowwise", "columnwise"} <= set(legend)
    hatches = {p.get_hatch() for p in ax.patches if (p.get_gid() or "").startswith("bar:")}
    assert {"///", "\\\\\\"} <= hatches  # rowwise and columnwise told apart
    assert "too thin to see" in footnote(fig) and "metadata" in footnote(fig)


def test_a_skipped_recipe_is_an_empty_bar_with_its_reason() -> None:
    data = kinds_from_estimate(["bf16", "nvfp4"], 4096, 64, H, F, "te-2.20", "pr3545")
    nv = next(b for b in data.bars if b.recipe == "nvfp4")
    assert nv.missing is not None and nv.missing.status == "skipped" and not nv.segments
    fig = draw_kinds(data)
    (ax,) = fig.axes
    assert any(p.get_gid() == "empty:nvfp4" for p in ax.patches)
    reason = next(t.get_text() for t in ax.texts if t.get_gid() == "reason:nvfp4")
    assert reason.startswith("skipped:") and "too few" in reason.replace("\n", " ")
    assert "nvfp4 skipped: --tokens: 4096 tokens are too few" in footnote(fig)
    assert "nvfp4" in [t.get_text() for t in ax.get_xticklabels()]


def test_kinds_of_the_h200_report_show_failed_and_skipped_recipes() -> None:
    report = load_report(H200)
    assert tokens_from_report(report, 8) is None  # every case ran at 4096 tokens
    data = kinds_from_report(report, 8)
    assert data.tokens == 4096 and [b.recipe for b in data.bars] == list(RECIPES)
    by = {b.recipe: b for b in data.bars}
    for case in report.cases:
        if case.groups != 8:
            continue
        b = by[case.recipe]
        if case.status == "ok":
            assert b.saved_bytes == sum(s.bytes for s in b.segments) == case.totals.saved_bytes
        else:
            assert b.missing is not None and b.missing.status == case.status and b.missing.reason == case.reason
    assert by["fp8-block"].missing.status == "error" and by["nvfp4"].missing.status == "skipped"
    fig = draw_kinds(data)
    heights = bar_heights(fig)
    assert heights == {b.label: b.saved_bytes for b in data.bars if b.missing is None}
    foot = footnote(fig)
    assert "fp8-block error: RuntimeError: cublaslt_gemm.cu:778" in foot  # the build path cut
    assert "mxfp8 skipped: Device compute capability 10.0" in foot
    assert by["bf16"].label == "bf16\nsplit-quantize"


def estimate_sweep_report(groups=(8,), tokens=TOKENS) -> Report:
    cases = []
    for r in RECIPES:
        for g in groups:
            for t in tokens:
                p = sweep_point(r, t, H, F, g)
                cases.append(estimate_config(p.config) if p.config else skipped_case(p, "te-2.20", None))
    return estimate_report(cases)


def test_figure_1_of_a_report_draws_its_cases_saved_bytes() -> None:
    report = estimate_sweep_report(groups=(8, 64))
    data = tokens_from_report(report, 64)
    fig = draw_tokens(data)
    lines = lines_by_gid(fig)
    for r in RECIPES:
        mine = sorted(
            (c for c in report.cases if c.recipe == r and c.groups == 64 and c.status == "ok"), key=lambda c: c.tokens
        )
        if not mine:
            continue
        ln = lines[f"{r}:measured"]
        assert list(ln.get_xdata()) == [c.tokens for c in mine]
        assert list(ln.get_ydata()) == [c.totals.saved_bytes for c in mine]
    skipped = [c for c in report.cases if c.groups == 64 and c.status == "skipped"]
    assert skipped and len([m for m in data.missing]) == len(skipped)
    assert all(f"{c.recipe} skipped at T = {fmt_tokens(c.tokens)}" in footnote(fig) for c in skipped)
    assert "G = 64" in data.title


def test_report_cases_of_another_shape_or_with_other_options_are_noted() -> None:
    report = estimate_sweep_report()
    extra = estimate_config(resolve("bf16", 4096, 1024, 1024, 8))
    other = dataclasses.replace(report.cases[0].spec, options={**report.cases[0].options, "x": 1})
    dup = CaseReport(other, id=report.cases[0].id + "/x=1", rows=report.cases[0].rows, totals=report.cases[0].totals)
    report.cases += [extra, dup]
    data = tokens_from_report(report, 8)
    assert any("hidden = 1024, ffn = 1024" in n for n in data.notes)
    assert any(n.startswith(f"not drawn: {dup.id}") for n in data.notes)
    assert all(len(ln.tokens) == len(TOKENS) for ln in data.lines)


def test_rows_that_disagree_with_totals_are_footnoted() -> None:
    report = load_report(H200)
    case = next(c for c in report.cases if c.groups == 8 and c.recipe == "bf16")
    case.totals = dataclasses.replace(case.totals, saved_bytes=case.totals.saved_bytes + 1)
    data = kinds_from_report(report, 8)
    assert any("its rows count" in n and case.id in n for n in data.notes)


def test_bad_group_or_token_choice_is_a_usage_error() -> None:
    from memaudit.errors import UsageError

    report = load_report(H200)
    with pytest.raises(UsageError, match="--groups"):
        kinds_from_report(report, 5)
    with pytest.raises(UsageError, match="--tokens"):
        kinds_from_report(report, 8, 1234)


# ---- formatting and rendering ----------------------------------------------------------------------


def test_formatters() -> None:
    assert [fmt_tokens(t) for t in (1000, 1024, 82944, 131072, 2**20)] == ["1000", "1K", "81K", "128K", "1M"]
    assert [fmt_axis_bytes(v) for v in (0, 512, 2**24, 1.25 * 2**30)] == ["0", "512 B", "16 MiB", "1.25 GiB"]

    def inside(locator, lo: float, hi: float) -> list[int]:
        return [int(v) for v in locator.tick_values(lo, hi) if lo <= v <= hi]

    assert inside(log_byte_locator(), 10 * 2**20, 3 * 2**30) == [2**k for k in range(24, 32)]
    assert 2 <= len(inside(log_byte_locator(), 1, 2**40)) <= 9
    ticks = inside(linear_byte_locator(1.3 * 2**30), 0, 1.3 * 2**30)
    assert ticks[0] == 0 and len(ticks) <= 9 and ticks[1] == 256 * 2**20
    assert short_reason("E: /a/b/c/x.cu:7 in  f (a/b)\n") == "E: x.cu:7 in f (a/b)"
    assert kinds_path(Path("out/saved.png")) == Path("out/saved.kinds.png")


def test_render_is_png_or_svg_and_the_same_twice() -> None:
    data = KindsFigure(
        "t",
        "s",
        1024,
        1,
        (
            Bar("bf16", "bf16", (Segment("tensor", "none", 2**20),), 2**20),
            Bar("x", "x", missing=Missing("x", "error", "boom")),
        ),
    )
    a, b = render(draw_kinds(data), "png"), render(draw_kinds(data), "png")
    assert a.startswith(PNG) and a == b
    svg = render(draw_kinds(data), "svg").decode()
    assert svg.lstrip().startswith("<?xml") and "boom" in svg and render(draw_kinds(data), "svg").decode() == svg


# ---- CLI ---------------------------------------------------------------------------------------------


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:
        """test app"""

    estimate_cmd.register(app)
    plot_cmd.register(app)
    return app


def run(app, *args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


SWEEP = [
    "estimate",
    "--recipe",
    "all",
    "--tokens",
    "1024:8192:x2",
    "--groups",
    "1,8",
    "--hidden",
    str(H),
    "--ffn",
    str(F),
    "--quiet",
]


def test_estimate_plot_writes_both_figures(app, tmp_path) -> None:
    res = run(app, *SWEEP, "--plot", tmp_path / "p" / "saved.png")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "p" / "saved.png").read_bytes().startswith(PNG)
    assert (tmp_path / "p" / "saved.kinds.png").read_bytes().startswith(PNG)
    assert f"wrote {tmp_path / 'p' / 'saved.kinds.png'}" in res.stdout.replace("\n", "")
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["saved.kinds.png", "saved.png"]  # no temp files


def test_estimate_plot_kinds_tokens_and_groups(app, tmp_path) -> None:
    res = run(
        app,
        *SWEEP,
        "--plot",
        tmp_path / "a.svg",
        "--plot-kinds",
        tmp_path / "k.png",
        "--plot-groups",
        "1",
        "--plot-tokens",
        "82944",
    )
    assert res.exit_code == 0, res.stderr
    svg = (tmp_path / "a.svg").read_text()
    assert "G = 1" in svg and "128K" not in svg and "8K" in svg
    assert (tmp_path / "k.png").read_bytes().startswith(PNG) and not (tmp_path / "a.kinds.svg").exists()


def test_estimate_plot_kinds_alone_on_one_configuration(app, tmp_path) -> None:
    res = run(
        app,
        "estimate",
        "--recipe",
        "nvfp4",
        "--tokens",
        "82944",
        "--hidden",
        str(H),
        "--ffn",
        str(F),
        "--quiet",
        "--plot-kinds",
        tmp_path / "k.svg",
    )
    assert res.exit_code == 0, res.stderr
    svg = (tmp_path / "k.svg").read_text()
    assert "pr3545" in svg and "82,944" in svg


def test_estimate_plot_with_one_token_count_says_so(app, tmp_path) -> None:
    res = run(
        app,
        "estimate",
        "--recipe",
        "all",
        "--tokens",
        "4096",
        "--groups",
        "8",
        "--hidden",
        "1024",
        "--quiet",
        "--plot",
        tmp_path / "s.png",
    )
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "s.png").exists() and (tmp_path / "s.kinds.png").exists()
    assert "not drawn: one --tokens value" in res.stdout.replace("\n", " ")


@pytest.mark.parametrize(
    "extra,flag,value",
    [
        (["--plot", "{d}/saved.pdf"], "--plot", "saved.pdf"),
        (["--plot", "{d}/saved"], "--plot", "saved"),
        (["--plot", "{d}/s.png", "--plot-kinds", "{d}/k.jpeg"], "--plot-kinds", "k.jpeg"),
        (["--plot", "{d}/s.png", "--plot-groups", "4"], "--plot-groups", "4"),
        (["--plot", "{d}/s.png", "--plot-tokens", "0"], "--plot-tokens", "0"),
        (["--plot", "{d}/s.png", "--plot-kinds", "{d}/s.png"], "--plot-kinds", "s.png"),
    ],
)
def test_estimate_bad_plot_flags_exit_2_and_write_nothing(app, tmp_path, extra, flag, value) -> None:
    args = [a.format(d=tmp_path) for a in extra]
    res = run(app, *SWEEP, "--json", tmp_path / "e.json", *args)
    assert res.exit_code == 2, res.stdout
    assert flag in res.stderr and value in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def sweep_report(tmp_path) -> Path:
    path = tmp_path / "sweep.json"
    write_report(estimate_sweep_report(groups=(1, 8)), path)
    return path


def test_plot_a_report_with_a_token_sweep(app, tmp_path, sweep_report) -> None:
    res = run(app, "plot", sweep_report, "--out", tmp_path / "o" / "r.png", "--groups", "1", "--tokens", "2048")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "o" / "r.png").read_bytes().startswith(PNG)
    assert (tmp_path / "o" / "r.kinds.png").read_bytes().startswith(PNG)


def test_plot_defaults_to_the_reports_name_in_the_current_folder(app, tmp_path, sweep_report, monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = run(app, "plot", sweep_report)
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in work.iterdir()) == ["sweep.kinds.png", "sweep.png"]


def test_plot_a_one_token_report_draws_the_kinds_figure_and_says_so(app, tmp_path) -> None:
    res = run(app, "plot", H200, "--out", tmp_path / "h200.svg", "--groups", "4")
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "h200.svg").exists()
    svg = (tmp_path / "h200.kinds.svg").read_text()
    assert "G = 4" in svg and "Device compute capability" in svg
    assert "not drawn" in res.stdout and "fewer than two token counts" in res.stdout.replace("\n", " ")


def test_plot_kinds_only(app, tmp_path) -> None:
    res = run(app, "plot", H200, "--kinds", tmp_path / "k.png")
    assert res.exit_code == 0, res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["k.png"]


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"schema": "other/1", "cases": []}), "unsupported schema"),
        (json.dumps({"schema": "memaudit.report/2", "cases": [{"id": "x"}]}), "missing key"),
        (json.dumps({"schema": "memaudit.report/2", "cases": []}), "no cases"),
    ],
)
def test_plot_a_bad_report_exits_2_and_writes_nothing(app, tmp_path, content, needle) -> None:
    bad = tmp_path / "in" / "bad.json"
    bad.parent.mkdir()
    bad.write_text(content)
    res = run(app, "plot", bad, "--out", tmp_path / "out.png")
    assert res.exit_code == 2, res.stdout
    assert needle in res.stderr and str(bad) in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--out", "{d}/x.gif"], "--out"),
        (["--out", "{d}/x.png", "--kinds", "{d}/k.txt"], "--kinds"),
        (["--out", "{d}/x.png", "--groups", "5"], "--groups"),
        (["--out", "{d}/x.png", "--tokens", "1234"], "--tokens"),
        (["--out", "{d}/x.png", "--groups", "0"], "--groups"),
        (["--out", "{d}"], "--out"),
    ],
)
def test_plot_bad_flags_exit_2_and_write_nothing(app, tmp_path, args, flag) -> None:
    res = run(app, "plot", H200, *[a.format(d=tmp_path) for a in args])
    assert res.exit_code == 2, res.stdout
    assert flag in res.stderr and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_plot_missing_report_exits_2(app, tmp_path) -> None:
    res = run(app, "plot", tmp_path / "nope.json", "--out", tmp_path / "x.png")
    assert res.exit_code == 2 and "no such file" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_plot_is_a_memaudit_command() -> None:
    from memaudit.cli.root import app as root

    res = CliRunner().invoke(root, ["plot", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--kinds" in res.stdout and "--groups" in res.stdout


def test_committed_plots_exist_with_their_commands() -> None:
    plots = ROOT / "reports" / "plots"
    readme = (plots / "README.md").read_text()
    pngs = sorted(plots.glob("*.png"))
    assert len(pngs) >= 3
    for p in pngs:
        assert p.read_bytes().startswith(PNG)
        assert p.name in readme, p.name


def test_plot_without_matplotlib_is_a_clear_usage_error(app, tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = run(app, "plot", H200, "--out", tmp_path / "x.png")
    assert res.exit_code == 2 and "--out" in res.stderr and "torch-memaudit[plot]" in res.stderr
    assert list(tmp_path.iterdir()) == []
