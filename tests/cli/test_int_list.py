"""One parser for every list and range flag (:class:`memaudit.cli.common.IntList`, typer's
``parser=``): the command body gets integers, and a bad value is ``error: --flag: what`` (exit 2)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from memaudit.cli.common import INT_LIST, INT_RANGE
from memaudit.cli.root import app


def test_the_parser() -> None:
    assert INT_LIST("1,4,8") == [1, 4, 8] and INT_LIST([2]) == [2]
    assert INT_RANGE("1024:8192:x2") == [1024, 2048, 4096, 8192] and INT_RANGE("1:7:+3") == [1, 4, 7]
    for bad, parser in (("1,1", INT_LIST), ("0", INT_LIST), ("x", INT_LIST), ("1:2", INT_RANGE), ("8:1:x2", INT_RANGE)):
        with pytest.raises(ValueError):
            parser(bad)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--target", "reference", "--groups", "1,1"], "error: --groups: 1 is listed twice in '1,1'"),
        (["run", "--target", "reference", "--groups", "0"], "error: --groups: must be >= 1, got 0"),
        (
            ["estimate", "--recipe", "bf16", "--tokens", "64:8:x2", "--hidden", "64"],
            "error: --tokens: range '64:8:x2' needs 1 <= A <= B",
        ),
        (["estimate", "--recipe", "bf16", "--tokens", "64", "--hidden", "six"], "error: --hidden: expected an integer"),
    ],
)
def test_bad_values_name_the_flag(argv: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "300"})
    assert result.exit_code == 2 and result.stderr.startswith(needle), result.output
    assert "Traceback" not in result.output and result.stdout == ""


def test_help_shows_what_the_value_is() -> None:
    out = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "120"}).stdout
    assert "--tokens N,...|A:B:xK|A:B:+K" in out and "<Any>" not in out
    assert "--groups N,..." in CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "120"}).stdout
