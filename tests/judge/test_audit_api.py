"""The run object in the library: ``audit.plan`` -> ``audit.run`` -> ``audit.conclude``, the same
three steps ``memaudit run`` takes, with the exit status and the vacuity decision in the judge."""

from __future__ import annotations

from pathlib import Path

import pytest

from memaudit import audit
from memaudit.errors import UsageError
from memaudit.judge import exitcodes

SMALL = {"tokens": 64, "hidden": 16, "ffn": 32}


def test_plan_run_conclude_on_the_reference_target() -> None:
    p = audit.plan(target="reference", groups=[1, 2], dims=SMALL)
    assert [s.id for s in p.specs] == ["reference/bf16/g1/t64-h16-f32/bf16", "reference/bf16/g2/t64-h16-f32/bf16"]
    seen: list[str] = []
    report = audit.run(p, on_case=lambda c: seen.append(c.id))
    assert seen == [s.id for s in p.specs] and all(c.status == "ok" for c in report.cases)
    outcome = audit.conclude(report)
    assert outcome.code == exitcodes.OK and outcome.verdicts is None and outcome.notes == []


def test_the_plan_holds_a_configured_target_and_leaves_the_registered_one_alone() -> None:
    p = audit.plan(target="reference", groups=[1], dims=SMALL)
    assert p.specs[0].owner is p.target and p.target.flags_given == {}
    with pytest.raises(AttributeError, match="frozen"):
        p.target.options = {}  # type: ignore[misc]


def test_a_bad_value_is_refused_before_anything_runs() -> None:
    with pytest.raises(UsageError) as exc:
        audit.plan(target="reference", groups=[0], dims=SMALL)
    assert exc.value.key == "--groups"


def test_a_scenario_without_budgets_judged_nothing_and_fails_in_the_judge(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        '[cases]\ntarget = "reference"\nrecipes = ["bf16"]\ngroups = [1]\ntokens = 64\nhidden = 16\n'
        'ffn = 32\n\n[[budget]]\nname = "fused only"\nmax_bytes = "1 KiB"\nwhen = { fused = true }\n',
        encoding="utf-8",
    )
    p = audit.plan(scenario=scenario)
    outcome = audit.conclude(audit.run(p), p.scenario)
    assert outcome.code == exitcodes.FAIL
    assert outcome.notes[0].level == "error" and outcome.notes[0].text.startswith("nothing was judged")
    assert audit.conclude(audit.run(p), p.scenario, allow_na=True).code == exitcodes.OK
