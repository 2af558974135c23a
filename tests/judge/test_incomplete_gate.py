"""A case memaudit marks incomplete never passes a gate by default.

Its saved bytes are a partial count: a budget or a compare that passed on it would be vacuous.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _reports import REF_BF16, make_case, make_report
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.judge import exitcodes
from memaudit.judge.baseline import compare_reports
from memaudit.judge.budgets import Context, evaluate_case
from memaudit.judge.scenario import parse_rule
from memaudit.report import write_report
from tests.house.test_plugin import PLUGIN_ARGS

runner = CliRunner()
WARNING = "AddmmBackward0 _saved_mat1: saved without memaudit's hooks"


def incomplete(case_id: str = REF_BF16):
    case = make_case(case_id)
    case.complete = False
    case.warnings = [WARNING]
    return case


def rule():
    return parse_rule({"name": "small", "max_bytes": "1 GiB"}, source="<test>", key="budget[0]")


def test_budget_on_an_incomplete_case_fails_and_names_the_warning() -> None:
    (verdict,) = evaluate_case(incomplete(), [rule()])
    assert verdict.verdict == "fail"
    assert "incomplete" in verdict.message and WARNING in verdict.message
    (allowed,) = evaluate_case(incomplete(), [rule()], Context(allow_incomplete=True))
    assert allowed.verdict == "pass"
    (complete,) = evaluate_case(make_case(REF_BF16), [rule()])
    assert complete.verdict == "pass"


@pytest.mark.parametrize("which", ["baseline", "current"])
def test_compare_fails_when_either_side_is_incomplete(which: str) -> None:
    base = make_report([incomplete() if which == "baseline" else make_case(REF_BF16)])
    cur = make_report([incomplete() if which == "current" else make_case(REF_BF16)])
    cmp = compare_reports(base, cur)
    assert cmp.regressed
    (finding,) = cmp.failures
    assert finding.metric == "complete" and finding.key == which and WARNING in finding.text
    assert not compare_reports(base, cur, allow_incomplete=True).regressed


def test_compare_cli_and_allow_incomplete(tmp_path: Path) -> None:
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    write_report(make_report([make_case(REF_BF16)]), base)
    write_report(make_report([incomplete()]), cur)
    failed = runner.invoke(app, ["compare", str(base), str(cur)])
    assert failed.exit_code == exitcodes.FAIL, failed.output
    assert "incomplete" in failed.output
    passed = runner.invoke(app, ["compare", str(base), str(cur), "--allow-incomplete"])
    assert passed.exit_code == exitcodes.OK, passed.output


def test_incomplete_survives_the_json_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    write_report(make_report([incomplete()]), out)
    case = json.loads(out.read_text())["cases"][0]
    assert case["complete"] is False and case["warnings"] == [WARNING]


def test_plugin_fails_a_budget_on_an_incomplete_capture(pytester: pytest.Pytester) -> None:
    """A saved tensor subclass memaudit cannot read makes the case incomplete: the marker's budget
    must fail, and pass when allowed."""
    pytester.makepyfile(
        test_inner="""
import pytest
import torch


class Opaque(torch.Tensor):
    # A wrapper subclass with a placeholder storage and no __tensor_flatten__.
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, requires_grad=elem.requires_grad)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.elem if isinstance(t, Opaque) else t
        out = func(*torch.utils._pytree.tree_map(unwrap, args), **torch.utils._pytree.tree_map(unwrap, kwargs or {}))
        return torch.utils._pytree.tree_map(lambda t: Opaque(t) if isinstance(t, torch.Tensor) else t, out)


KEEP = []


@pytest.mark.saved_budget(max_bytes="1 GiB")
def test_strict(saved_tensors):
    w = Opaque(torch.randn(4, 4)).requires_grad_()
    KEEP.append((w * w).sum())


@pytest.mark.saved_budget(max_bytes="1 GiB", allow_incomplete=True)
def test_allowed(saved_tensors):
    w = Opaque(torch.randn(4, 4)).requires_grad_()
    KEEP.append((w * w).sum())
"""
    )
    result = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*case incomplete*Opaque*"])
