"""``--help`` as click writes it: every flag name whole at any width, no ``<bool>`` metavar on a
flag, and ``run``'s exit-code section that matches memaudit.judge.exitcodes and docs/reference/exit-codes.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from memaudit.cli.root import app
from memaudit.judge import exitcodes

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [["run"], ["compare"], ["check"], ["estimate"], ["plot"], ["merge"], ["baseline", "update"], ["doctor"]]


def _command(path: list[str]):
    cmd = get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


@pytest.mark.parametrize("columns", [60, 80, 110, 143])
@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_flag_name_whole_and_no_bool_metavar(path: list[str], columns: int) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "<bool>" not in out and "…" not in out
    words = set(re.findall(r"--[a-z0-9][a-z0-9-]*", out))
    for param in _command(path).params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("--"):
                assert opt in words, (opt, columns)
    assert max(len(line) for line in out.splitlines()) <= max(columns, 80)


def test_run_help_has_the_exit_codes() -> None:
    out = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "100"}).stdout
    section = out[out.index("Exit codes:") :]
    codes = [int(m) for m in re.findall(r"^\s+(\d)\s", section, re.M)]
    assert codes == sorted(v for k, v in vars(exitcodes).items() if k.isupper())
    assert "4  nothing was measured or emulated" in section


def test_readme_exit_table_agrees_that_all_skipped_is_4() -> None:
    readme = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    table = readme[readme.index("# Exit codes") :]
    row0 = next(line for line in table.splitlines() if line.startswith("| 0 |"))
    assert "measured or emulated" in row0 and "every case ran or was skipped" not in row0, row0
    assert "measured or emulated" in next(line for line in table.splitlines() if line.startswith("| 4 |"))
