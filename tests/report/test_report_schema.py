"""``memaudit schema``: one whole-report JSON Schema with a root, that a JSON Schema validator
(the ``jsonschema`` package, which ``check-jsonschema`` runs) uses on a committed report as is,
and that refuses a report memaudit's reader refuses for the same field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from memaudit.cli.root import app

ROOT = Path(__file__).resolve().parents[2]
REPORTS = [
    ROOT / "reports/cpu/reference.json",
    ROOT / "reports/baseline/cpu-te-emulated.json",
    ROOT / "reports/h200/headline/headline-nvfp4.json",
]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and "cases" in schema["required"] and schema["additionalProperties"] is False
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name)
def test_a_committed_report_is_valid(validator, path: Path) -> None:
    errors = list(validator.iter_errors(json.loads(path.read_text())))
    assert errors == [], errors[0].message


def _mutations(report: dict) -> list[tuple[str, dict]]:
    out = []

    def mutated(name: str, fn) -> None:
        d = copy.deepcopy(report)
        fn(d)
        out.append((name, d))

    mutated("anything else", lambda d: d.clear() or d.update({"x": 1}))
    mutated("no cases", lambda d: d.pop("cases"))
    mutated("unknown top-level key", lambda d: d.update({"extra": 1}))
    mutated("foreign schema", lambda d: d.update({"schema": "other/1"}))
    mutated("bytes as a string", lambda d: d["cases"][0]["rows"][0].update({"bytes": "12"}))
    mutated("negative bytes", lambda d: d["cases"][0]["rows"][0].update({"bytes": -1}))
    mutated("unknown kind", lambda d: d["cases"][0]["rows"][0].update({"kind": "scale-inv"}))
    mutated("unknown row key", lambda d: d["cases"][0]["rows"][0].update({"colour": "red"}))
    mutated("totals with a float", lambda d: d["cases"][0]["totals"].update({"saved_bytes": 1.5}))
    mutated("bad status", lambda d: d["cases"][0].update({"status": "fine"}))
    mutated("shape dimension as a string", lambda d: d["cases"][0].update({"tokens": "64"}))
    mutated("bad device", lambda d: d["cases"][0].update({"device": "tpu"}))
    return out


@pytest.mark.parametrize(
    ("name", "bad"), _mutations(json.loads(REPORTS[0].read_text())), ids=lambda x: x if isinstance(x, str) else ""
)
def test_an_invalid_report_fails(validator, name: str, bad: dict, tmp_path: Path) -> None:
    assert list(validator.iter_errors(bad)), name
    from memaudit.errors import UsageError
    from memaudit.report import validate_report

    with pytest.raises(UsageError):  # memaudit's reader refuses it too
        validate_report(bad, source="x.json")
