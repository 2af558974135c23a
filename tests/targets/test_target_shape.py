"""A target owns its shape: dimensions, case-id letters, run options, scenario keys, byte variables.

``tests/shape_target.py`` declares ``seq`` / ``heads`` / ``head_dim`` (no tokens, hidden or ffn);
shipping it by entry point, from a package that is not memaudit (``tests/_third_party.py``), must
be all it takes for the core to speak its dimensions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memaudit.errors import UsageError
from memaudit.judge.rules import ByteExpr
from memaudit.judge.scenario import evaluate, load_scenario
from memaudit.report import Report, load_report, write_report
from memaudit.runner import run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets import registry
from memaudit.targets.matrix import build_specs
from memaudit.targets.registry import get_target
from tests._third_party import install


@pytest.fixture
def attn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(install(tmp_path)))
    return registry.get_target("attn")


def test_spec_orders_dims_as_declared_and_ids_use_the_targets_letters(attn) -> None:
    spec = CaseSpec.make(get_target("attn"), "bf16", 2, head_dim=8, seq=64, heads=4, dtype="fp32")
    assert spec.shape == (("seq", 64), ("heads", 4), ("head_dim", 8))
    assert spec.id == "attn/bf16/g2/s64-n4-d8/fp32"
    assert (spec.seq, spec.heads, spec.head_dim) == (64, 4, 8)
    assert sum(spec.split_sizes()) == 64 and len(spec.split_sizes()) == 2  # seq is the split dimension
    with pytest.raises(AttributeError, match="tokens"):
        spec.tokens  # noqa: B018 - the attribute read is the test
    with pytest.raises(UsageError, match="seq, heads, head_dim"):
        CaseSpec.make(get_target("attn"), "bf16", 1, tokens=64, heads=4, head_dim=8)
    assert spec.replace(seq=128, recipe="x").id == "attn/x/g2/s128-n4-d8/fp32"


def test_build_specs_takes_the_targets_dims_and_refuses_others(attn) -> None:
    specs = build_specs(
        attn,
        recipe=None,
        groups="1,2",
        dims={"seq": 64, "heads": None, "tokens": None},
        dtype=None,
        device="cpu",
        options={},
    )
    assert [s.id for s in specs] == ["attn/bf16/g1/s64-n2-d8/fp32", "attn/bf16/g2/s64-n2-d8/fp32"]
    with pytest.raises(UsageError) as exc:
        build_specs(attn, recipe=None, groups=None, dims={"ffn": 128}, dtype=None, device="cpu", options={})
    assert exc.value.key == "--ffn" and "seq, heads, head_dim" in str(exc.value)
    with pytest.raises(UsageError) as exc:
        build_specs(attn, recipe=None, groups="3", dims={"seq": 40}, dtype=None, device="cpu", options={})
    assert exc.value.key == "--seq" and "40 seq cannot be split" in str(exc.value)


def test_byte_expressions_use_the_targets_dims() -> None:
    with pytest.raises(UsageError, match="variables are seq, heads, groups, elt"):
        ByteExpr.parse("tokens * elt", dims=("seq", "heads"))
    expr = ByteExpr.parse("3 * seq * heads * head_dim * elt", dims=("seq", "heads", "head_dim"))
    assert not expr.constant


SCENARIO = """
[cases]
target = "attn"
recipes = ["bf16"]
groups = [1]
seq = 64
heads = 2
head_dim = 8
dtype = "fp32"

[[budget]]
name = "the input only"
max_bytes = "seq * heads * head_dim * elt"
"""


def test_a_scenario_speaks_the_targets_dims_end_to_end(attn, tmp_path: Path) -> None:
    path = tmp_path / "attn.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    scenario = load_scenario(path)
    assert [s.id for s in scenario.specs()] == ["attn/bf16/g1/s64-n2-d8/fp32"]
    report = run_matrix(attn, scenario.specs())
    out = tmp_path / "r.json"
    write_report(report, out)
    loaded: Report = load_report(out)
    assert loaded.cases[0].dims == {"seq": 64, "heads": 2, "head_dim": 8}
    verdicts = evaluate(loaded, scenario, source=str(out))
    # the Linear saves its input (64 x 16 fp32 = 4 KiB) and its weight (48 x 16 fp32, a parameter)
    totals = loaded.cases[0].totals
    assert (totals.saved_bytes, totals.parameter_bytes) == (64 * 16 * 4, 48 * 16 * 4)
    assert [v.verdict for v in verdicts] == ["pass"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (SCENARIO.replace("seq = 64", "tokens = 64"), "tokens"),
        (SCENARIO.replace("head_dim = 8\n", ""), "head_dim"),
        (SCENARIO.replace("seq * heads", "seq * hidden"), "hidden"),
        (SCENARIO.replace("seq * heads * head_dim", "seq * heads * head_dim * 2"), None),
    ],
)
def test_a_scenario_refuses_another_targets_dims(attn, tmp_path: Path, text: str, key: str | None) -> None:
    path = tmp_path / "attn.toml"
    path.write_text(text, encoding="utf-8")
    if key is None:  # control: the same file with a valid change loads
        assert load_scenario(path).cases[0].dims == {"seq": 64, "heads": 2, "head_dim": 8}
        return
    with pytest.raises(UsageError) as exc:
        load_scenario(path)
    assert key in str(exc.value)
