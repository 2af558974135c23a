"""The report reader's boundaries, each on both sides: what `memaudit schema` and the reader accept.

Each test kills a survivor of ``bench/mutation/mutate.py`` on ``report/codec.py``
(reports/bench/mutation.md): a bound moved by one, or an ``and`` made ``or``.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from memaudit.cli.root import app
from memaudit.errors import UsageError
from memaudit.report import validate_case, validate_report

REPORT = Path(__file__).resolve().parents[2] / "reports/cpu/reference.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    return jsonschema.Draft202012Validator(json.loads(result.stdout))


def _report(**case: object) -> dict:
    d = json.loads(REPORT.read_text())
    d["cases"][0].update(case)
    return d


@pytest.mark.parametrize(("value", "ok"), [(1, True), (0, False)])
def test_a_shape_dimension_starts_at_one(validator, value: int, ok: bool) -> None:
    d = _report(hidden=value)
    assert (not list(validator.iter_errors(d))) is ok  # the schema's minimum
    if ok:
        assert validate_report(d, source="r.json").cases[0].spec.hidden == 1
    else:
        with pytest.raises(
            UsageError, match=r"cases\[reference/bf16/g1/t1024-h256-f512/bf16\]\.hidden: a shape dimension is from 1"
        ):
            validate_report(d, source="r.json")


@pytest.mark.parametrize(("past_last", "ok"), [(0, True), (1, False)])
def test_a_row_group_must_be_below_the_number_of_groups(past_last: int, ok: bool) -> None:
    d = _report()
    case = d["cases"][0]
    row = next(r for r in case["rows"] if r.get("group") is not None)
    row["group"] = case["groups"] - 1 + past_last
    if ok:
        validate_report(d, source="r.json")  # the last group is a group
    else:
        with pytest.raises(UsageError, match=r"\.group: group 1 in a case of 1 group\(s\)"):
            validate_report(d, source="r.json")


@pytest.mark.parametrize(("cid", "named"), [("a" * 200, True), ("a" * 201, False)])
def test_an_error_names_the_case_by_an_id_of_at_most_200_characters(cid: str, named: bool) -> None:
    case = _report(id=cid, hidden=0)["cases"][0]
    with pytest.raises(UsageError) as err:
        validate_case(case, source="r.json")
    where = f"cases[{cid}]" if named else "cases[?]"
    assert str(err.value).startswith(f"r.json: {where}.hidden: "), str(err.value)
