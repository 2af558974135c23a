"""Per-rank audits across real processes: torchrun / ``memaudit run --nproc``, gloo on CPU.

Five multi-process runs (2 and 4 ranks of the expert-parallel target, a killed rank, the pytest
plugin under torchrun): about 45 s on 2 cores (15, 12, 8 and 7 s). The ground truth is independent of the
distributed machinery: a single-process run of the reference target at each rank's split sizes,
and the dispatch's saved tensors computed from the routing's shapes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch.distributed

from memaudit.judge.integrity import read_report
from memaudit.runner import run_case
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target
from memaudit.te.targets.reference import ReferenceTarget
from memaudit.te.targets.routing import RoutingPlan

pytestmark = pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="torch.distributed without gloo")

TESTS = Path(__file__).resolve().parents[1]
SHAPE = ["--groups", "2", "--tokens", "128", "--hidden", "32", "--ffn", "64"]


def _pythonpath() -> str:
    """tests/ (the factories) and this checkout, before whatever the environment has: the ranks
    import the memaudit under test even where it is not installed."""
    return os.pathsep.join(p for p in (str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")) if p)


def memaudit(*args: str, cwd: Path, timeout: int = 240, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "COLUMNS": "120", **extra}
    return subprocess.run(
        [sys.executable, "-m", "memaudit", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def torchrun(nproc: int, *args: str, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "COLUMNS": "120", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _signature(rows: list) -> list[tuple]:
    """What a row saves, storages named by first appearance among these rows (ids and indices shift
    when other rows come first)."""
    names: dict[str, int] = {}
    out = []
    for r in rows:
        storage = names.setdefault(r.storage, len(names)) if r.storage is not None else None
        out.append(
            (
                r.operand,
                r.group,
                r.kind,
                r.format,
                r.orientation,
                tuple(r.shape),
                r.dtype,
                r.bytes,
                r.storage_bytes,
                r.is_parameter,
                r.duplicate_of is not None,
                r.op,
                r.saved_as,
                storage,
            )
        )
    return out


def dispatch_bytes(tokens: int, experts: int, topk: int) -> int:
    """What Megatron's permute saves: the transposed probabilities (E x T fp32) and the mask (E x T bool)
    for masked_select, and the token indices (T x k int64) for index_select (scatter_add_ saves a view of them)."""
    return experts * tokens * 4 + experts * tokens + tokens * topk * 8


def check_ranks_against_one_process(merged) -> list[int]:
    """Each rank's rows equal a single-process reference run at its split sizes, plus the dispatch's;
    returns each rank's saved bytes."""
    saved = []
    for case in merged.cases:
        splits = tuple(case.splits)
        single = run_case(
            ReferenceTarget(),
            CaseSpec.make(
                get_target("reference"),
                "bf16",
                case.groups,
                splits=splits,
                tokens=sum(splits),
                hidden=case.hidden,
                ffn=case.ffn,
            ),
        )
        assert single.status == "ok"
        experts = [r for r in case.rows if not (r.operand or "").startswith("dispatch.")]
        assert _signature(experts) == _signature(single.rows), case.id
        ep = case.dist.layout["ep"]
        extra = dispatch_bytes(case.tokens, ep * case.groups, case.options["topk"])
        assert case.totals.saved_bytes == single.totals.saved_bytes + extra, case.id
        assert sum(case.dist.recv_splits) == sum(splits)
        saved.append(case.totals.saved_bytes)
    return saved


def predicted_saved(
    counts: list[int], *, ep: int, local: int, tokens: int = 128, hidden: int = 32, ffn: int = 64, topk: int = 2
) -> list[int]:
    """Saved bytes per expert-parallel rank from the routing's counts alone: affine in the tokens R a
    rank received, R x (H + 2F + F) bf16 activations + R fp32 scales, plus its split sizes (int64)
    and the dispatch's routing state."""
    out = []
    for r in range(ep):
        received = ep * sum(counts[r * local : (r + 1) * local])
        out.append(received * (2 * (hidden + 2 * ffn + ffn) + 4) + 8 * local + dispatch_bytes(tokens, ep * local, topk))
    return out


def _without_created(path: Path) -> dict:
    d = json.loads(path.read_text())
    d.pop("created")
    return d


def test_two_ranks_hot_expert(tmp_path: Path) -> None:
    """``memaudit run --nproc 2``: per-rank bytes equal one process at each rank's splits; the hot
    expert's rank is the worst, by the predicted imbalance; two runs give the same merged bytes."""
    args = ["run", "--nproc", "2", "--target", "ep-grouped-mlp", *SHAPE, "--routing", "hot", "--quiet"]
    first = memaudit(*args, "--json", "a.json", "--markdown", "a.md", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    merged = read_report(tmp_path / "a.json")
    assert [c.id.rsplit("/", 1)[1] for c in merged.cases] == ["ep0-dp0", "ep1-dp0"]
    saved = check_ranks_against_one_process(merged)
    # 128 tokens to top-2 of 4 experts in units of 16 (T = 8 units each at most): the hot expert takes
    # all 8 units, the others share 8 units as 3, 3, 2
    plan = RoutingPlan(2, 2, 128, 2, 16, "hot", Fraction(1), 0)
    counts = plan.counts()
    assert sorted(counts) == [32, 48, 48, 128]
    hot_rank = plan.popularity()[0] // 2
    predicted = predicted_saved(counts, ep=2, local=2)
    assert saved == predicted
    (summary,) = merged.dist.summary
    assert summary.saved.worst_rank == hot_rank
    assert summary.saved.imbalance == max(predicted) / (sum(predicted) / 2)
    assert "imbalance" in first.stdout and f"worst rank {hot_rank}" in first.stdout
    assert "| what | r0 | r1 | max/mean |" in (tmp_path / "a.md").read_text()
    assert sorted(p.name for p in (tmp_path / "a.ranks").iterdir()) == ["rank0.json", "rank1.json"]

    second = memaudit(*args, "--json", "b.json", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert _without_created(tmp_path / "a.json") == _without_created(tmp_path / "b.json")
    a, b = (tmp_path / "a.json").read_text(), (tmp_path / "b.json").read_text()
    assert a.replace(json.loads(a)["created"], "") == b.replace(json.loads(b)["created"], "")


def test_four_ranks_under_torchrun(tmp_path: Path) -> None:
    """``torchrun --nproc-per-node 4 -m memaudit run --ep 2``: two expert-parallel groups of two,
    data-parallel replicas of each other: identical per replica pair, and each rank equal to one
    process at its splits; Zipf routing's imbalance is what the bytes give."""
    run = torchrun(
        4,
        "-m",
        "memaudit",
        "run",
        "--target",
        "ep-grouped-mlp",
        *SHAPE,
        "--ep",
        "2",
        "--routing",
        "zipf:1.5",
        "--json",
        "z.json",
        "--quiet",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    merged = read_report(tmp_path / "z.json")
    assert [c.dist.key for c in merged.cases] == ["ep0-dp0", "ep1-dp0", "ep0-dp1", "ep1-dp1"]
    saved = check_ranks_against_one_process(merged)
    (summary,) = merged.dist.summary
    assert [(r.group, r.ranks, r.identical) for r in summary.replicas] == [("ep0", [0, 2], True), ("ep1", [1, 3], True)]
    # Zipf 1.5 over 4 experts, 16 units of 16 tokens, at most 8 each: weights 1, 0.354, 0.192, 0.125
    # give the first 9.6 units, so 8; the other 8 units go 4.2, 2.3, 1.5 -> 4, 2, 1 + 1 (largest remainder)
    plan = RoutingPlan(2, 2, 128, 2, 16, "zipf", Fraction(3, 2), 0)
    counts = plan.counts()
    assert [counts[e] for e in plan.popularity()] == [128, 64, 32, 32]
    predicted = predicted_saved(counts, ep=2, local=2)
    assert saved == predicted * 2  # ranks 2 and 3 are replicas of 0 and 1
    assert summary.saved.imbalance == max(predicted) / (sum(predicted) / 2)
    assert "dp replicas ep0 (ranks 0, 2): identical" in run.stdout


def test_a_killed_rank_is_a_clear_error_and_leaves_the_others_files(tmp_path: Path) -> None:
    """Rank 1 is killed (SIGKILL) in its forward once rank 0 has written its case."""
    run = memaudit(
        "run",
        "--nproc",
        "2",
        "--target",
        "dist_factory:killed_on_rank1",
        "--groups",
        "1",
        "--tokens",
        "16",
        "--hidden",
        "8",
        "--ffn",
        "16",
        "--json",
        "k.json",
        "--quiet",
        cwd=tmp_path,
        DIST_FACTORY_WAIT_FOR=str(tmp_path / "k.ranks" / "rank0.json"),
    )
    assert run.returncode == 3, run.stderr
    assert (
        "rank 1" in run.stderr
        and "was killed by SIGKILL" in run.stderr
        and "no merged report was written" in run.stderr
    )
    assert not (tmp_path / "k.json").exists()
    assert "k.ranks/rank0.json: 1 of 1 case(s)" in run.stderr and "k.ranks/rank1.json: missing" in run.stderr
    own = read_report(tmp_path / "k.ranks" / "rank0.json")
    assert [c.status for c in own.cases] == ["ok"] and own.dist.rank == 0
    refused = memaudit("merge", "k.ranks", "--json", "m.json", cwd=tmp_path)
    assert refused.returncode == 2 and "rank(s) 1 of 2 wrote no report" in refused.stderr
    assert not (tmp_path / "m.json").exists()
    partial = memaudit("merge", "k.ranks", "--allow-missing-ranks", "--json", "m.json", cwd=tmp_path)
    assert partial.returncode == 3, partial.stderr
    merged = read_report(tmp_path / "m.json")
    assert [c.status for c in merged.cases] == ["ok", "error"]
    assert "rank 1 has no report for this case" in merged.cases[1].reason


PLUGIN_TEST = """
import os

import pytest
import torch


@pytest.mark.saved_budget(max_bytes="6 KiB")
def test_rank_dependent(saved_tensors):
    rank = int(os.environ["RANK"])
    x = torch.randn(16 * (1 + 2 * rank), 64, requires_grad=True)  # rank 0: 4 KiB saved, rank 1: 12 KiB
    (x * 2).tanh().sum()
"""


def test_pytest_plugin_under_torchrun_judges_each_rank(tmp_path: Path) -> None:
    (tmp_path / "test_ranked.py").write_text(PLUGIN_TEST)
    run = torchrun(2, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_ranked.py", cwd=tmp_path)
    assert run.returncode != 0
    assert "saved-tensor budget failed on rank 1 of 2" in run.stdout
    assert "on rank 0 of 2" not in run.stdout
    assert run.stdout.count("1 passed") == 1 and run.stdout.count("1 failed") == 1
