"""Scenario files (memaudit/judge/scenario.py) and the shipped scenarios judged against TE-shaped reports."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
from _budget_cases import blackwell_report, fp8_case, grouped_structural, h200_report, make_case

from memaudit.errors import UsageError
from memaudit.judge import exitcodes
from memaudit.judge.outcome import OUTCOME_CODES
from memaudit.judge.scenario import (
    Scenario,
    evaluate,
    load_scenario,
    outcome,
    parse_scenario,
    record_verdicts,
)
from memaudit.report import Report, validate_report

ROOT = Path(__file__).resolve().parents[2]
GROUPED = ROOT / "scenarios" / "grouped_mlp.toml"
REFERENCE = ROOT / "scenarios" / "reference.toml"


def scenario(text: str, source: str = "t.toml") -> Scenario:
    return parse_scenario(tomllib.loads(text), source=source)


def by_rule(verdicts, rule: str) -> dict[str, str]:
    return {v.case_id.split("/", 1)[1].rsplit("/t", 1)[0]: v.verdict for v in verdicts if v.rule == rule}


# ---- the shipped TE scenario ----------------------------------------------------------------------
def test_grouped_mlp_scenario_loads() -> None:
    s = grouped_structural()
    assert s.target == "te-grouped-mlp"
    specs = s.specs(device="cuda")
    assert len(specs) == 18
    assert {(x.tokens, x.hidden, x.ffn, x.dtype, x.device) for x in specs} == {(4096, 1024, 2048, "bf16", "cuda")}
    assert [x.recipe for x in specs[::3]] == ["bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"]
    rules = {r.name: r for r in s.rules}
    kf = rules["nvfp4-no-rowwise-input"].known_failure
    assert kf is not None and kf.te == "<2.21"
    assert kf.reason == "TE PR #3545 not in 2.20.2: NVFP4 fused path keeps rowwise input data and scale_inv"
    assert rules["mxfp8-no-rowwise-input"].known_failure is None


def test_every_shipped_budget_says_why() -> None:
    for path in (GROUPED, REFERENCE):
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if line.strip() == "[[budget]]"]
        assert starts
        for i in starts:
            assert lines[i - 1].startswith("# "), f"{path.name}:{i + 1}: a budget without a one-line why"


def test_grouped_mlp_on_the_h200() -> None:
    """bf16/fp8 cells pass, fp8-block is an error cell, MXFP8/NVFP4 are skipped (n/a)."""
    s = grouped_structural()
    report = h200_report()
    verdicts = evaluate(report, s)
    assert not [v for v in verdicts if v.verdict in ("fail", "XPASS", "xfail")], [
        v.message for v in verdicts if v.failed
    ]
    assert by_rule(verdicts, "fp8-one-transpose-per-group") == {
        "bf16/g1": "n/a", "bf16/g4": "n/a", "bf16/g8": "n/a",
        "fp8-delayed/g1": "pass", "fp8-delayed/g4": "pass", "fp8-delayed/g8": "pass",
        "fp8-current/g1": "pass", "fp8-current/g4": "pass", "fp8-current/g8": "pass",
        "fp8-block/g1": "n/a", "fp8-block/g4": "n/a", "fp8-block/g8": "n/a",
        "mxfp8/g1": "n/a", "mxfp8/g4": "n/a", "mxfp8/g8": "n/a",
        "nvfp4/g1": "n/a", "nvfp4/g4": "n/a", "nvfp4/g8": "n/a",
    }  # fmt: skip
    passed = {v.rule for v in verdicts if v.verdict == "pass"}
    assert {
        "unfused-path",
        "bf16-fc1-input-is-a-view",
        "bf16-inputs-share-one-storage",
        "bf16-weights-are-parameters",
        "fp8-one-scale-inv-per-group",
        "fp8-at-most-one-data-per-group",
        "fp8-no-rowwise-input",
    } <= passed
    assert all(v.verdict == "n/a" for v in verdicts if v.case_id.split("/")[1] in ("fp8-block", "mxfp8", "nvfp4"))
    assert (
        OUTCOME_CODES[outcome(report, verdicts, s)] == exitcodes.CASE_ERROR
    )  # on_error = "warn" and fp8-block errored
    strict = Scenario(s.path, s.name, s.cases, s.rules, on_error="fail")
    assert OUTCOME_CODES[outcome(report, verdicts, strict)] == exitcodes.FAIL


@pytest.mark.parametrize(
    ("override", "rules"),
    [
        (fp8_case("fp8-current", 4, keep_rowwise=True), ["fp8-at-most-one-data-per-group", "fp8-no-rowwise-input"]),
        (fp8_case("fp8-delayed", 8, drop_transpose_group=3), ["fp8-one-transpose-per-group"]),
    ],
)
def test_grouped_mlp_catches_fp8_regressions(override, rules: list[str]) -> None:
    s = grouped_structural()
    key = f"{override.recipe}/g{override.groups}"
    report = h200_report(**{key: override})
    verdicts = evaluate(report, s)
    failed = [(v.case_id, v.rule) for v in verdicts if v.failed]
    assert failed == [(override.id, rule) for rule in rules]
    assert OUTCOME_CODES[outcome(report, verdicts, s)] == exitcodes.FAIL


def test_grouped_mlp_on_blackwell_with_te_2_20_2_is_xfail() -> None:
    s = grouped_structural()
    report = blackwell_report(pruned=False, te="2.20.2")
    verdicts = evaluate(report, s)
    assert by_rule(verdicts, "nvfp4-no-rowwise-input") == {
        **{f"{r}/g{g}": "n/a" for r in ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8") for g in (1, 4, 8)},
        "nvfp4/g1": "xfail", "nvfp4/g4": "xfail", "nvfp4/g8": "xfail",
    }  # fmt: skip
    assert {v.verdict for v in verdicts if v.rule == "nvfp4-inputs-vs-bf16" and v.verdict != "n/a"} == {"xfail"}
    assert {v.verdict for v in verdicts if v.rule.startswith("fused-")} == {"pass", "n/a"}
    assert not [v for v in verdicts if v.failed]
    assert OUTCOME_CODES[outcome(report, verdicts, s)] == exitcodes.OK


@pytest.mark.parametrize(
    ("pruned", "te", "nvfp4_verdict", "code"),
    [
        (True, "2.20.2", "XPASS", exitcodes.FAIL),  # the fix landed but known_failure still claims it fails
        (True, "2.21.0", "pass", exitcodes.OK),
        (False, "2.21.0", "fail", exitcodes.FAIL),  # the fix regressed after 2.21
        (False, None, "fail", exitcodes.FAIL),  # no TE version recorded: known_failure does not apply
    ],
)
def test_grouped_mlp_nvfp4_after_the_fix(pruned: bool, te: str | None, nvfp4_verdict: str, code: int) -> None:
    s = grouped_structural()
    report = blackwell_report(pruned=pruned, te=te)
    verdicts = evaluate(report, s)
    assert set(by_rule(verdicts, "nvfp4-no-rowwise-input").values()) == {"n/a", nvfp4_verdict}
    assert OUTCOME_CODES[outcome(report, verdicts, s)] == code


def test_evaluate_fills_budgets_and_round_trips() -> None:
    s = grouped_structural()
    report = blackwell_report(pruned=False)
    verdicts = evaluate(report, s)
    assert not any(c.budgets for c in report.cases)  # judging changes nothing; recording is explicit
    record_verdicts(report, verdicts, s)
    case = next(c for c in report.cases if c.recipe == "nvfp4" and c.groups == 4)
    entry = next(b for b in case.budgets if b["rule"] == "nvfp4-no-rowwise-input")
    assert entry["verdict"] == "xfail" and entry["rows"] and "PR #3545" in entry["message"]
    assert len(case.budgets) == len(s.rules)
    again = validate_report(__import__("json").loads(report.to_json()))
    assert again.cases[case_index(report, case.id)].budgets == case.budgets


def case_index(report: Report, case_id: str) -> int:
    return [c.id for c in report.cases].index(case_id)


def test_evaluate_rejects_a_report_missing_a_case() -> None:
    s = grouped_structural()
    report = h200_report()
    report.cases = [c for c in report.cases if not (c.recipe == "fp8-current" and c.groups == 8)]
    with pytest.raises(UsageError) as exc:
        evaluate(report, s, source="r.json")
    assert str(exc.value).startswith("r.json: cases: the report has no case te-grouped-mlp/fp8-current/g8/")


# ---- the shipped reference scenario on the real reference target -----------------------------------
def test_reference_scenario_holds_for_the_reference_target() -> None:
    from memaudit.runner import run_matrix
    from memaudit.targets.registry import get_target

    s = load_scenario(REFERENCE)
    assert s.target == "reference"
    report = run_matrix(get_target("reference"), s.specs())
    verdicts = evaluate(report, s)
    assert [c.status for c in report.cases] == ["ok"] * 3
    assert {v.verdict for v in verdicts} == {"pass"}, [v.message for v in verdicts if v.verdict != "pass"]
    assert OUTCOME_CODES[outcome(report, verdicts, s)] == exitcodes.OK
    # and it notices a weight that is no longer the Parameter
    rows = report.cases[1].rows
    i = next(r.index for r in rows if r.is_parameter)
    rows[i] = dataclasses.replace(rows[i], is_parameter=False)
    verdicts = evaluate(report, s)
    assert [(v.case_id, v.rule) for v in verdicts if v.failed] == [(report.cases[1].id, "weights-are-parameters")]


# ---- format features ------------------------------------------------------------------------------
BASE = """
[cases]
target = "reference"
recipes = ["bf16"]
groups = [1, 4]
tokens = 256
hidden = 64
ffn = 128
dtype = "fp32"
"""


def test_defaults_and_options() -> None:
    s = scenario(BASE.replace('dtype = "fp32"', 'options = { flavour = "x" }'))
    assert (s.name, s.on_error, s.rules) == ("t", "warn", ())
    specs = s.specs(device="cuda", options={"fused_env": "1", "flavour": "overridden"})
    assert specs[0].dtype == "bf16"
    assert specs[0].options == {"fused_env": "1", "flavour": "x"}
    assert specs[0].id.endswith("/bf16/flavour=x,fused_env=1")
    case = make_case("bf16", 4, [], target="reference", tokens=256, hidden=64, ffn=128)
    case.options = {"flavour": "x", "added_by_target": 1}
    assert s.covers(case)
    case.options = {"flavour": "y"}
    assert not s.covers(case)


def test_several_case_blocks_and_all_recipes() -> None:
    text = """
    [[cases]]
    target = "te-grouped-mlp"
    recipes = "all"
    groups = [4]
    tokens = 4096
    hidden = 1024
    ffn = 2048

    [[cases]]
    target = "te-grouped-mlp"
    recipes = ["bf16"]
    groups = [8]
    tokens = 8192
    hidden = 1024
    ffn = 2048
    """
    s = scenario(text)
    assert [(x.recipe, x.groups, x.tokens) for x in s.specs()][-2:] == [("nvfp4", 4, 4096), ("bf16", 8, 8192)]
    with pytest.raises(UsageError, match=r"cases\[1\]\.target: .*one target per scenario"):
        scenario(
            text.replace(
                'target = "te-grouped-mlp"\n    recipes = ["bf16"]', 'target = "reference"\n    recipes = ["bf16"]'
            )
        )


def test_ratio_against_must_be_run_by_the_scenario() -> None:
    text = (
        BASE
        + """
    [[budget]]
    name = "vs"
    ratio = 0.5
    against = { groups = 4 }
    """
    )
    s = scenario(text)  # g1 vs g4 and g4 vs itself both exist
    assert s.rules[0].kind == "ratio"
    with pytest.raises(UsageError, match=r"budget\[0\]\.against: .*does not run"):
        scenario(text.replace("groups = 4 }", "groups = 2 }"))


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.toml"
    p.write_text(BASE + "\n[[budget]]\nname = 'x'\ncount = == 1\n")
    with pytest.raises(UsageError) as exc:
        load_scenario(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: line 13: TOML syntax error")
    assert re.search(r"'count = == 1'$", msg)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.toml")
    p = tmp_path / "latin1.toml"
    p.write_bytes(b'name = "\xe9"\n')
    with pytest.raises(UsageError, match="cannot read"):
        load_scenario(p)


def test_case_recipes_are_checked_against_the_targets_own_recipes() -> None:
    """A custom target declares bf16 only (its factory is not imported to find out): an FP8
    recipe in its cases table is refused, naming the key; ``all`` means the target's own list."""
    text = (
        '[cases]\ntarget = "tests.custom_factory:make"\nrecipes = {r}\ngroups = [1]\ntokens = 64\nhidden = 8\nffn '
        "= 16\n"
    )
    allow = ("tests.custom_factory:make",)
    with pytest.raises(UsageError) as info:
        parse_scenario(tomllib.loads(text.format(r='["fp8-current"]')), source="s.toml", allow_targets=allow)
    assert info.value.key == "cases.recipes[0]" and "fp8-current" in str(info.value)
    ok = parse_scenario(tomllib.loads(text.format(r='"all"')), source="s.toml", allow_targets=allow)
    assert [s.recipe for s in ok.specs(device="cpu")] == ["bf16"]


@pytest.mark.parametrize("target", ["os:abort", "sys:exit", "tests.custom_factory:make", "builtins:print"])
def test_a_scenario_names_no_factory_the_user_did_not_allow(target: str, tmp_path) -> None:
    """A scenario file is data: naming a callable it may not import is exit 2, before any import."""
    text = f'[cases]\ntarget = "{target}"\nrecipes = ["bf16"]\ngroups = [1]\ntokens = 64\nhidden = 8\nffn = 16\n'
    with pytest.raises(UsageError) as info:
        scenario(text)
    assert info.value.key == "cases.target" and "--allow-target" in str(info.value)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[tool.memaudit]\nallow-targets = ["{target}"]\n', encoding="utf-8")
    from memaudit.judge.scenario import allowed_targets

    assert allowed_targets(("x:y",), pyproject) == ("x:y", target)


# ---- the schema: pydantic models made for the target ------------------------------------------------
def test_every_table_is_strict_and_forbids_unknown_keys() -> None:
    """Each table of a scenario's schema is a pydantic model with strict types and extra="forbid"."""
    from pydantic import BaseModel

    from memaudit.judge.scenario_schema import scenario_model

    model = scenario_model(("tokens", "hidden", "ffn"), ("bf16", "nvfp4"), ("fused",), ("kernels",), "te-grouped-mlp")
    seen, todo = set(), [model]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        assert m.model_config.get("extra") == "forbid" and m.model_config.get("strict") is True, m.__name__
        for f in m.model_fields.values():
            todo += [t for t in _types_in(f.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    assert {m.__name__ for m in seen} >= {
        "ScenarioTable",
        "CasesTable",
        "BudgetTable",
        "SelectTable",
        "KnownFailureTable",
        "AgainstTable",
        "WhenTable",
        "FlagsTable",
    }


def _types_in(t):
    import typing

    yield t
    for a in typing.get_args(t):
        yield from _types_in(a)


@pytest.mark.parametrize(
    ("edit", "key", "message"),
    [
        (
            'recipes = "bf17"',
            "cases.recipes",
            "unknown value 'bf17' (did you mean 'bf16'?)",
        ),  # one value: no [0] in the key
        ('recipes = ["bf16", "bf17"]', "cases.recipes[1]", "unknown value 'bf17'"),
        ("recipes = 5", "cases.recipes", "expected a string or a non-empty array of strings, got 5 (integer)"),
        ("recipes = []", "cases.recipes", "expected a string or a non-empty array of strings, got []"),
        ("tokens = true", "cases.tokens", "expected an integer, got True (boolean)"),
        ("tokens = 2.5", "cases.tokens", "expected an integer, got 2.5 (float)"),
        (
            'dtype = "fp32"\noptions = { a = [1] }',
            "cases.options.a",
            "option values must be strings, numbers or booleans",
        ),
        (
            'dtype = "fp32"\ntokns = 3',
            "cases.tokns",
            "unknown key 'tokns' (did you mean 'tokens'?); allowed keys: target, recipes, "
            "groups, tokens, hidden, ffn, dtype, options",
        ),
    ],
)
def test_schema_errors_name_the_key_as_written_and_the_value(edit: str, key: str, message: str) -> None:
    old = edit.split(" = ")[0].split("\n")[0]
    text = re.sub(rf"^{old} = .*$", edit, BASE, count=1, flags=re.M) if old in BASE else BASE + edit + "\n"
    with pytest.raises(UsageError) as info:
        scenario(text)
    assert info.value.key == key and info.value.source == "t.toml", str(info.value)
    assert message in info.value.message, str(info.value)


def test_a_third_party_targets_dimensions_are_its_cases_keys() -> None:
    """The cases table is made for the target it names: another target's dimensions are its keys."""
    from memaudit.judge.scenario_schema import cases_model

    model = cases_model(("seq", "heads"), ("bf16",))
    assert model.keys() == ["target", "recipes", "groups", "seq", "heads", "dtype", "options", "unread"]
    with pytest.raises(UsageError) as info:
        scenario(
            "[cases]\ntarget = 'reference'\nrecipes = 'bf16'\ngroups = 1\ntokens = 64\nhidden = 8\nffn = 16\nseq = 3\n"
        )
    assert info.value.key == "cases.seq" and "allowed keys: target, recipes, groups, tokens, hidden, ffn" in str(
        info.value
    )
