"""Emulated kernels on either host: TE's real forward on an emulated sm100 (``--kernels emulated``),
on a GPU or, with no GPU, on fake CUDA (``memaudit.te.emulate.host``): memaudit's own CI runs these on CPU.

* PR #3545 end to end: its pruning applied to TE 2.20.2's fused save path at run time; compare
  lists the pruned buffers as improvements, the shipped known_failure rule is xfail unpatched
  and XPASS patched.
* Mutations: injected saved-state regressions in TE's forward, each caught by compare, which
  names operand, kind and orientation (``bench/_emulated.py``; the score is in
  ``reports/emulated/mutation.md`` for the H200 and ``reports/cpu/fake-cuda/mutation.md`` with no GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memaudit.te.emulate.host import unavailable

pytestmark = [pytest.mark.te]

if unavailable() is not None:
    pytest.skip(f"emulated kernels cannot run here: {unavailable()}", allow_module_level=True)
try:
    import transformer_engine.pytorch  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from bench._emulated import MUTATIONS, PRODUCTION, Mutation, caught, emulated_case, pr3545, report_of, saving  # noqa: E402
from memaudit.judge.baseline import compare_reports  # noqa: E402
from memaudit.judge.budgets import evaluate_rule  # noqa: E402
from memaudit.judge.checks import Context  # noqa: E402
from memaudit.judge.scenario import load_scenario  # noqa: E402
from memaudit.te.estimate import estimate  # noqa: E402

SCENARIOS = [
    Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.toml"
    for name in ("grouped_mlp", "grouped_mlp_emulated")
]


def _rows(case, operand: str, kind: str, orientation: str) -> int:
    return sum(r.bytes for r in case.rows if r.operand == operand and r.kind == kind and r.orientation == orientation)


@pytest.mark.parametrize("groups,frontend", [(1, "1.26.0"), (8, "1.28.0")])
def test_pr3545_end_to_end(groups: int, frontend: str) -> None:
    """T=82,944, H=3,072, F=1,536: FC1's 127,401,984 B of FP4 data and 15,925,248 B of scales go.

    G=1 runs with cuDNN-frontend 1.26 (the grouped single-group path): with 1.27+ TE 2.20.2 takes
    the dense single-group path, which fails inside TE's Python for NVFP4 discrete weights here
    (reports/emulated/equivalence.md)."""
    before = emulated_case("nvfp4", groups, cudnn_frontend=frontend, **PRODUCTION)
    with saving(pr3545):
        after = emulated_case("nvfp4", groups, cudnn_frontend=frontend, **PRODUCTION)
    assert before.status == after.status == "ok", (before.reason, after.reason)
    assert before.fused and after.fused and before.emulation is not None
    t, h = PRODUCTION["tokens"], PRODUCTION["hidden"]
    assert _rows(before, "fc1.input", "data", "rowwise") == t * h // 2 == 127_401_984
    assert _rows(before, "fc1.input", "scale_inv", "rowwise") == t * h // 16 == 15_925_248
    assert _rows(after, "fc1.input", "data", "rowwise") == _rows(after, "fc1.input", "scale_inv", "rowwise") == 0
    # FC2 figures: as the estimator's pr3545 variant says
    spec = before.spec
    est = {v: estimate(spec, path="fused", variant=v, dense_single_group=groups != 1) for v in ("te-2.20", "pr3545")}
    for kind in ("data", "scale_inv"):
        gone = _rows(before, "fc2.input", kind, "rowwise") - _rows(after, "fc2.input", kind, "rowwise")
        assert (
            gone
            == _rows(est["te-2.20"], "fc2.input", kind, "rowwise") - _rows(est["pr3545"], "fc2.input", kind, "rowwise")
            > 0
        )
    assert (
        before.totals.saved_bytes - after.totals.saved_bytes
        == est["te-2.20"].totals.saved_bytes - est["pr3545"].totals.saved_bytes
    )
    # compare lists them as improvements, and names the buffers that went
    cmp = compare_reports(report_of(before), report_of(after))
    better = {f.label for d in cmp.cases for f in d.findings if f.verdict == "improvement"}
    assert {"operand fc1.input", "operand fc2.input", "kind data", "kind scale_inv", "orientation rowwise"} <= better
    assert not cmp.regressed
    gone = {rd.key: rd.baseline.bytes for d in cmp.cases for rd in d.row_diffs if rd.current is None and rd.baseline}
    assert (
        gone["fc1.input data rowwise nvfp4"] == 127_401_984 and gone["fc1.input scale_inv rowwise nvfp4"] == 15_925_248
    )
    # the shipped known_failure rules: xfail on 2.20.2, XPASS under the patch
    ctx = Context(te_version="2.20.2")
    for scenario in SCENARIOS:
        rule = next(r for r in load_scenario(scenario).rules if r.name == "nvfp4-no-rowwise-input")
        assert evaluate_rule(rule, before, ctx).verdict == "xfail", scenario
        assert evaluate_rule(rule, after, ctx).verdict == "XPASS", scenario


@pytest.fixture(scope="module")
def baselines() -> dict[tuple[str, int, bool], object]:
    out = {}
    for m in MUTATIONS:
        key = (m.recipe, m.groups, m.fused)
        if key not in out:
            out[key] = emulated_case(m.recipe, m.groups, fused=m.fused, tokens=2048, hidden=512, ffn=512)
    return out


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_compare_catches_every_injected_regression(mutation: Mutation, baselines) -> None:
    base = baselines[(mutation.recipe, mutation.groups, mutation.fused)]
    with saving(mutation.mutate):
        mutated = emulated_case(
            mutation.recipe, mutation.groups, fused=mutation.fused, tokens=2048, hidden=512, ffn=512
        )
    assert base.status == mutated.status == "ok", (base.reason, mutated.reason)
    hit, labels = caught(mutation, base, mutated)
    assert hit, f"{mutation.name}: not caught ({labels})"


def test_the_mutations_include_a_decrease_and_a_move_at_an_equal_total() -> None:
    assert len(MUTATIONS) >= 12
    assert any(not m.grows for m in MUTATIONS) and any(m.equal_total for m in MUTATIONS)
