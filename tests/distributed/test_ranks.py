"""Per-rank audits in one process: the routing plan, the rank model, merge, validation, the gate, rendering.

The multi-process runs (torchrun, gloo) are in tests/distributed/test_dist_torchrun.py. Here rank reports are made
in-process by running cases as ranks of data-parallel jobs (no collective runs), or by editing them.
"""

from __future__ import annotations

import copy
import json
import sys
from fractions import Fraction

import pytest
from rich.console import Console

from memaudit.distributed.merge import differing_replicas, merge_reports
from memaudit.errors import UsageError
from memaudit.judge.baseline import compare_reports
from memaudit.judge.integrity import case_problem
from memaudit.ranks import DistRun, RankInfo, coords_key, coords_of, info_problem, rank_of, summarize
from memaudit.render.markdown import render_markdown
from memaudit.render.ranks import rank_views, ranks_tables
from memaudit.report import Report, compute_totals, replace_row, validate_report
from memaudit.runner import run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target
from memaudit.te.targets.routing import RoutingPlan, parse_routing

# ---- the routing plan ---------------------------------------------------------------------------


def test_zipf_counts_by_hand() -> None:
    """4 experts, 256 tokens to 2 experts each in units of 16: 32 units, at most 16 per expert.
    Zipf 1: shares 32 * (1, 1/2, 1/3, 1/4) / (25/12) = 15.36, 7.68, 5.12, 3.84 -> 15, 7, 5, 3 plus
    one each for the largest remainders (0.84, 0.68): 15, 8, 5, 4 units, by popularity."""
    plan = RoutingPlan(2, 2, 256, 2, 16, "zipf", Fraction(1), 0)
    order = plan.popularity()
    counts = plan.counts()
    assert [counts[e] for e in order] == [240, 128, 80, 64]
    assert sum(counts) == 256 * 2
    assert plan.send_splits() == [sum(counts[:2]), sum(counts[2:])]
    assert plan.local_splits(1) == [2 * counts[2], 2 * counts[3]]
    assert plan.recv_splits(1) == [counts[2] + counts[3]] * 2


def test_hot_expert_takes_every_token_and_the_rest_share_evenly() -> None:
    plan = RoutingPlan(2, 2, 256, 2, 16, "hot", Fraction(1), 3)
    counts = plan.counts()
    hot = plan.popularity()[0]
    assert counts[hot] == 256  # a token picks an expert once: at most T
    assert sorted(c for e, c in enumerate(counts) if e != hot) == [80, 80, 96]


def test_caps_spill_over_and_uniform_is_even() -> None:
    assert RoutingPlan(4, 1, 64, 1, 16, "uniform", None, 0).counts() == [16, 16, 16, 16]
    z = RoutingPlan(1, 2, 64, 2, 16, "zipf", Fraction(8), 0).counts()  # top-2 of 2: every token to both
    assert z == [64, 64]
    for seed in range(5):
        for skew, param in (("zipf", Fraction(3, 2)), ("hot", Fraction(1, 3))):
            c = RoutingPlan(2, 4, 512, 3, 32, skew, param, seed).counts()
            assert sum(c) == 512 * 3 and max(c) <= 512 and all(x % 32 == 0 for x in c)


def test_routing_flags_are_checked() -> None:
    assert parse_routing("zipf:1.2") == ("zipf", Fraction(6, 5))
    assert parse_routing("hot") == ("hot", Fraction(1))
    for bad in ("zipf:0", "hot:1.5", "uniform:2", "skewed", "zipf:x"):
        with pytest.raises(UsageError, match="--routing"):
            parse_routing(bad)
    with pytest.raises(UsageError, match="--topk"):
        RoutingPlan(1, 2, 64, 3, 16, "uniform", None, 0).counts()
    with pytest.raises(UsageError, match="--tokens"):
        RoutingPlan(1, 2, 40, 1, 16, "uniform", None, 0).counts()


# ---- coordinates ----------------------------------------------------------------------------------


def test_coordinates_round_trip_megatron_order() -> None:
    layout = {"tp": 2, "ep": 2, "dp": 2}
    assert [coords_key(coords_of(r, layout)) for r in range(4)] == [
        "tp0-ep0-dp0",
        "tp1-ep0-dp0",
        "tp0-ep1-dp0",
        "tp1-ep1-dp0",
    ]
    assert all(rank_of(coords_of(r, layout), layout) == r for r in range(8))
    assert info_problem(RankInfo(2, 4, {"ep": 2, "dp": 2}, {"ep": 0, "dp": 1})) is None
    assert info_problem(RankInfo(1, 4, {"ep": 2, "dp": 2}, {"ep": 0, "dp": 1}))[0] == "rank"
    assert info_problem(RankInfo(0, 4, {"ep": 2, "dp": 1}, {"ep": 0, "dp": 0}))[0] == "layout"
    assert info_problem(RankInfo(0, 2, {"ep": 2}, {"ep": 0}, send_splits=[1, 2, 3]))[0] == "send_splits"


# ---- rank reports made in one process -------------------------------------------------------------

SPEC = dict(tokens=64, hidden=16, ffn=32)


def rank_reports(target: str = "reference", world: int = 2, groups: int = 2, **options) -> list[tuple[str, Report]]:
    """Each rank's own report, as a data-parallel job's ranks make them (no collective runs)."""
    tgt = get_target(target).configure(options)
    spec = CaseSpec.make(
        tgt, "bf16", groups, dtype=tgt.defaults["dtype"], device="cpu", options=dict(tgt.options), **SPEC
    )
    planned = [spec.id if not hasattr(tgt, "place") else tgt.place(spec, 0, world)[0].id]
    out = []
    for r in range(world):
        rep = run_matrix(tgt, [spec], rank=r, world_size=world, backend="gloo")
        rep.created = "2026-01-01T00:00:00Z"
        rep.dist = DistRun(world, planned, r, "run-1", True)
        out.append((f"rank{r}.json", validate_report(json.loads(rep.to_json()), source=f"rank{r}.json")))
    return out


@pytest.fixture(scope="module")
def dp_ranks() -> list[tuple[str, Report]]:
    return rank_reports("reference", world=2)


def test_merged_report_round_trips_and_its_summary_adds_up(dp_ranks) -> None:
    merged = merge_reports(dp_ranks)
    text = merged.to_json()
    again = validate_report(json.loads(text), source="merged.json")
    assert again.to_json() == text
    (s,) = merged.dist.summary
    assert [c.id.rsplit("/", 1)[1] for c in merged.cases] == ["dp0", "dp1"]
    assert s.saved.per_rank == [c.totals.saved_bytes for c in merged.cases]
    assert s.saved.imbalance == 1.0 and s.saved.worst_rank == 0
    for r in range(2):  # the operands of a rank add up to its saved bytes
        assert sum(b.spread.per_rank[r] for b in s.by) == merged.cases[r].totals.saved_bytes
    assert [(rep.group, rep.ranks, rep.identical) for rep in s.replicas] == [("all", [0, 1], True)]
    assert all(case_problem(c) is None for c in merged.cases)


def test_a_summary_that_disagrees_with_its_cases_is_refused(dp_ranks) -> None:
    d = json.loads(merge_reports(dp_ranks).to_json())
    bad = copy.deepcopy(d)
    bad["dist"]["summary"][0]["saved"]["max"] += 1
    with pytest.raises(UsageError, match=r"dist.summary\[0\].saved: says .* but the ranks' cases give"):
        validate_report(bad, source="m.json")
    bad = copy.deepcopy(d)
    del bad["cases"][1]  # a rank left out
    with pytest.raises(UsageError, match="no case for rank"):
        validate_report(bad, source="m.json")
    bad = copy.deepcopy(d)
    bad["dist"]["surprise"] = 1
    with pytest.raises(UsageError, match="unknown key"):
        validate_report(bad, source="m.json")
    bad = copy.deepcopy(d)
    bad["cases"][1]["id"] = bad["cases"][1]["id"].replace("/dp1", "/dp7")
    with pytest.raises(UsageError, match="ends with its coordinates"):
        validate_report(bad, source="m.json")
    bad = copy.deepcopy(d)
    bad["cases"][1]["dist"]["coords"]["dp"] = 0
    with pytest.raises(UsageError, match="rank 1 is at dp1"):
        validate_report(bad, source="m.json")


def test_a_missing_rank_is_an_error_never_a_zero(dp_ranks) -> None:
    with pytest.raises(UsageError, match=r"rank\(s\) 1 of 2 wrote no report"):
        merge_reports(dp_ranks[:1])
    merged = merge_reports(dp_ranks[:1], allow_missing=True)
    gone = merged.cases[1]
    assert gone.status == "error" and "rank 1 has no report" in gone.reason and not gone.rows
    (s,) = merged.dist.summary
    assert s.saved is None and s.not_ok == [1] and s.by == []
    validate_report(json.loads(merged.to_json()), source="m.json")
    lines = Console(width=80, record=True)
    lines.print(ranks_tables(merged, width=80))
    assert "not every rank is ok" in lines.export_text()


def test_files_of_two_runs_or_one_rank_twice_are_refused(dp_ranks) -> None:
    other = copy.deepcopy(dp_ranks[1][1])
    other.dist.run_id = "run-2"
    with pytest.raises(UsageError, match="run id 'run-2' differs"):
        merge_reports([dp_ranks[0], ("rank1.json", other)])
    with pytest.raises(UsageError, match="rank 0 twice"):
        merge_reports([dp_ranks[0], dp_ranks[0]])
    with pytest.raises(UsageError, match="merge takes the ranks' own files"):
        merge_reports([("m.json", merge_reports(dp_ranks))])


def test_replicas_that_differ_are_reported(monkeypatch, tests_on_path) -> None:
    """Rank 1's replica runs twice the tokens: the merge names the row and the ranks."""
    reports = []
    for r in range(2):
        monkeypatch.setenv("RANK", str(r))
        reports += rank_reports("dist_factory:rank1_saves_more", world=2, groups=1)[r : r + 1]
    merged = merge_reports(reports)
    (rep,) = merged.dist.summary[0].replicas
    assert not rep.identical
    assert "shape [128, 16] on rank 1, [64, 16] on rank 0" in rep.difference
    assert differing_replicas(merged)[0].startswith("dist_factory:rank1_saves_more/")


def _grow_worst_rank(base: Report, nbytes: int) -> Report:
    """``base`` with rank 1's first saved storage ``nbytes`` larger (its worst rank now)."""
    cur = copy.deepcopy(base)
    grown = cur.cases[1]
    storage = next(r.storage for r in grown.rows if not r.is_parameter and r.storage is not None)
    rows = [replace_row(r, storage_bytes=r.storage_bytes + nbytes) if r.storage == storage else r for r in grown.rows]
    grown.rows = rows
    grown.totals = compute_totals(rows, grown.freed)
    cur.dist = DistRun(2, base.dist.planned, summary=summarize(cur.cases, base.dist.planned, 2))
    return cur


def test_worst_rank_gate(dp_ranks) -> None:
    base = merge_reports(dp_ranks)
    cmp = compare_reports(base, _grow_worst_rank(base, 2))
    worst = [f for f in cmp.findings if f.metric == "worst_rank"]
    assert len(worst) == 1 and worst[0].failing and worst[0].case == base.cases[1].id
    assert "rank 0 (dp0)" in worst[0].text and "rank 1 (dp1)" in worst[0].text and "+2 B" in worst[0].text


def test_a_worst_rank_grown_by_one_byte_is_worse(dp_ranks) -> None:
    base = merge_reports(dp_ranks)
    worst = [f for f in compare_reports(base, _grow_worst_rank(base, 1)).findings if f.metric == "worst_rank"]
    assert len(worst) == 1 and worst[0].failing and worst[0].direction == "worse" and "+1 B" in worst[0].text


def test_the_worst_rank_gate_is_silent_where_the_worst_rank_is_unchanged_or_new(dp_ranks) -> None:
    """The same worst rank on both sides is no finding; a distributed case the baseline lacks has no
    worst rank to compare with (it is a new case)."""
    base = merge_reports(dp_ranks)
    assert not [f for f in compare_reports(base, copy.deepcopy(base)).findings if f.metric == "worst_rank"]
    before = Report(cases=[], environment=base.environment)
    cmp = compare_reports(before, base)
    assert not [f for f in cmp.findings if f.metric == "worst_rank"]


# ---- rendering -------------------------------------------------------------------------------------


def _render(report: Report, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(ranks_tables(report, width=width))
    return console.export_text()


def fake_world(base: Report, world: int) -> Report:
    """``base``'s rank-0 case as ``world`` data-parallel ranks (what 8 ranks look like)."""
    case = base.cases[0]
    cases = []
    for r in range(world):
        c = copy.deepcopy(case)
        c.dist = RankInfo(r, world, {"dp": world}, {"dp": r})
        c.id = case.id.rsplit("/", 1)[0] + f"/dp{r}"
        cases.append(c)
    planned = base.dist.planned
    return Report(
        cases=cases,
        environment=base.environment,
        dist=DistRun(world, planned, summary=summarize(cases, planned, world)),
    )


def test_two_ranks_side_by_side_in_80_columns(dp_ranks) -> None:
    text = _render(merge_reports(dp_ranks), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if "max/mean" in line)
    assert " r0 " in header and " r1 " in header  # a column per rank


def test_eight_ranks_stay_readable(dp_ranks) -> None:
    eight = fake_world(merge_reports(dp_ranks), 8)
    narrow = _render(eight, 80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    header = next(line for line in narrow.splitlines() if "max/mean" in line)
    assert "worst" in header and " r7 " not in header  # the spread where 8 columns do not fit
    wide = _render(eight, 200)
    assert " r7 " in next(line for line in wide.splitlines() if "max/mean" in line)
    md = render_markdown(eight)
    assert "| what | r0 | r1 | r2 | r3 | r4 | r5 | r6 | r7 | max/mean |" in md
    assert len(rank_views(eight)) == 1


# ---- the command line without processes ------------------------------------------------------------


def test_one_process_expert_parallel_and_usage_errors(cli_runner, tmp_path) -> None:
    """In one process the layer runs with one expert-parallel rank; an expert-parallel size the world
    cannot hold, distributed-only flags and TE experts on CPU say so before anything runs."""
    from memaudit.cli import app

    out = tmp_path / "one.json"
    ok = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "ep-grouped-mlp",
            "--groups",
            "2",
            "--tokens",
            "64",
            "--hidden",
            "16",
            "--ffn",
            "32",
            "--routing",
            "zipf",
            "--json",
            str(out),
            "--quiet",
        ],
    )
    assert ok.exit_code == 0, ok.output
    (case,) = validate_report(json.loads(out.read_text()), source="one.json").cases
    assert case.dist is None and case.options == {"ep": 1, "routing": "zipf:1", "topk": 2} and sum(case.splits) == 128
    assert {r.operand for r in case.rows} >= {
        "dispatch.sorted_indices",
        "dispatch.routing_map",
        "dispatch.probs",
        "fc1.input",
    }
    for args, flag in (
        (["--ep", "2"], "--ep"),
        (["--rank-dir", str(tmp_path / "r")], "--rank-dir"),
        (["--dist-backend", "gloo"], "--dist-backend"),
        (["--routing", "hot:2"], "--routing"),
    ):
        bad = cli_runner.invoke(
            app, ["run", "--target", "ep-grouped-mlp", "--tokens", "64", *args, "--json", str(tmp_path / "x.json")]
        )
        assert bad.exit_code == 2 and flag in bad.output, (args, bad.output)
        assert not (tmp_path / "x.json").exists()
    te = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "ep-grouped-mlp",
            "--experts",
            "te",
            "--device",
            "cpu",
            "--tokens",
            "64",
            "--groups",
            "2",
            "--hidden",
            "16",
            "--ffn",
            "32",
            "--quiet",
        ],
    )
    assert te.exit_code == 4 and "TransformerEngine runs on CUDA only" in te.output  # TE's own reason: a skipped cell


def test_nproc_starts_the_same_command_through_torch_distributed_run(cli_runner, tmp_path, monkeypatch) -> None:
    """``run --nproc N`` checks everything first, then gives torch.distributed.run the command as
    given (options left at their defaults left out) with the rank folder; nothing is started here."""
    import memaudit.distributed.launch as launch
    from memaudit.cli import app

    seen = {}

    def fake_run(args):
        seen["args"] = args
        return None

    monkeypatch.setattr("torch.distributed.run.run", fake_run)
    res = cli_runner.invoke(
        app,
        [
            "run",
            "--nproc",
            "4",
            "--target",
            "ep-grouped-mlp",
            "--ep",
            "2",
            "--groups",
            "2",
            "--tokens",
            "64",
            "--no-backward",
            "--routing",
            "hot",
            "--json",
            str(tmp_path / "m.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    args = seen["args"]
    # this interpreter with -P (the current folder cannot shadow memaudit), run as given (--no-python)
    assert args.nproc_per_node == "4" and args.standalone and args.no_python and not args.module
    assert args.training_script == sys.executable
    assert args.training_script_args == [
        "-P",
        "-u",
        "-m",
        "memaudit",
        "run",
        "--target",
        "ep-grouped-mlp",
        "--groups",
        "2",
        "--tokens",
        "64",
        "--no-backward",
        "--json",
        str(tmp_path / "m.json"),
        "--ep",
        "2",
        "--routing",
        "hot",
        "--rank-dir",
        str(tmp_path / "m.ranks"),
    ]
    assert launch.torchrun_args(2, ["run"])[:4] == ["--standalone", "--nproc-per-node", "2", "--max-restarts"]
    for argv, flag in ((["--nproc", "3", "--ep", "2"], "--ep"), (["--nproc", "0"], "--nproc")):
        bad = cli_runner.invoke(app, ["run", "--target", "ep-grouped-mlp", "--tokens", "64", *argv])
        assert bad.exit_code == 2 and flag in bad.output, bad.output
    monkeypatch.setenv("RANK", "0")
    for k, v in (("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "localhost"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(k, v)
    nested = cli_runner.invoke(app, ["run", "--nproc", "2", "--target", "reference", "--groups", "1"])
    assert nested.exit_code == 2 and "already is rank 0 of 2" in nested.output


def test_merge_command_reads_rank_files_and_refuses_bad_input(cli_runner, tmp_path, dp_ranks) -> None:
    from memaudit.cli import app

    folder = tmp_path / "ranks"
    folder.mkdir()
    for name, rep in dp_ranks:
        (folder / name).write_text(rep.to_json())
    good = cli_runner.invoke(
        app, ["merge", str(folder), "--json", str(tmp_path / "m.json"), "--markdown", str(tmp_path / "m.md")]
    )
    assert good.exit_code == 0, good.output
    assert validate_report(json.loads((tmp_path / "m.json").read_text()), source="m.json").dist.summary
    assert "| what | r0 | r1 | max/mean |" in (tmp_path / "m.md").read_text()
    before = (folder / "rank0.json").read_text()
    for argv, needle in (
        ([str(folder), "--json", str(folder / "rank0.json")], "never overwrites what memaudit reads"),
        ([str(tmp_path / "empty")], "no rank files"),
        ([str(folder / "rank0.json"), str(tmp_path / "m.json")], "merge takes the ranks' own files"),
        ([str(tmp_path / "nothere.json")], "no such file"),
    ):
        (tmp_path / "empty").mkdir(exist_ok=True)
        bad = cli_runner.invoke(app, ["merge", *argv])
        assert bad.exit_code == 2 and needle in bad.output, (argv, bad.output)
    assert (folder / "rank0.json").read_text() == before


PLUGIN_TEST = """
import pytest
import torch


@pytest.mark.saved_budget(max_bytes="1 KiB")
def test_over_budget(saved_tensors):
    (torch.randn(64, 64, requires_grad=True) * 2).tanh()


@pytest.mark.saved_budget(max_bytes="1 KiB", ranks=[0])
def test_judged_on_rank_0_only(saved_tensors):
    (torch.randn(64, 64, requires_grad=True) * 2).tanh()


@pytest.mark.saved_budget(max_bytes="1 KiB", ranks=[5])
def test_a_rank_the_world_lacks(saved_tensors):
    (torch.randn(4, 4, requires_grad=True) * 2).tanh()
"""


def test_plugin_names_the_rank_and_judges_where_asked(pytester, monkeypatch) -> None:
    """As torchrun's rank 1 of 2 (its environment): the failure names the rank, a budget for rank 0
    only is not judged here, and a rank the world does not have is a failure of the marker."""
    import importlib.metadata

    for k, v in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(k, v)
    pytester.makepyfile(test_inner=PLUGIN_TEST)
    installed = any(ep.value == "memaudit.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    result = pytester.runpytest(*(() if installed else ("-p", "memaudit.pytest_plugin")), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    assert "saved-tensor budget failed on rank 1 of 2" in text
    assert "ranks=[5] names rank(s) [5] in a world of 2" in text
