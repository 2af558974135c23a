"""The pure-data commands start without torch or TE: ``compare``, ``check``, ``merge``, ``schema`` and
``baseline`` read and write reports only, so each runs here as a user runs it (a fresh process, real
inputs) and Python's own import log (``-X importtime``) must name neither package. ``run`` imports
TE only for a case that needs it. How long each takes to start is measured in
``bench/perf/startup.py``, not here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.test_ranks import rank_reports

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "reports/baseline/cpu-reference.json"
TE_REPORT = ROOT / "reports/h200/te-grouped-mlp.json"  # TE's cases, judged by a scenario of TE's target
HEAVY = ("torch", "transformer_engine", "transformer_engine_torch")
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|( *)(\S+)\s*$")


def imported(stderr: str) -> set[str]:
    """The top-level packages Python's import log says the process imported."""
    return {m.group(2).split(".")[0] for line in stderr.splitlines() if (m := _IMPORTED.match(line))}


def run(*args: str | Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memaudit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,  # a hang, not a speed bound
    )
    return proc, imported(proc.stderr)


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    for name, rep in rank_reports("reference", world=2):
        (folder / name).write_text(rep.to_json())
    return folder


def test_the_import_log_is_read_right(tmp_path: Path) -> None:
    """The control: a command that does import torch shows it in the log as read here."""
    proc, mods = run("run", "--target", "reference", "--groups", "1", "--json", tmp_path / "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" in mods and "memaudit" in mods
    assert "transformer_engine" not in mods  # the reference target needs no TE


def test_pure_data_commands_import_neither_torch_nor_te(tmp_path: Path, rank_folder: Path) -> None:
    current = tmp_path / "current.json"
    current.write_text(BASELINE.read_text())
    commands = {
        "compare": (["compare", BASELINE, current, "--markdown", tmp_path / "c.md"], 0),
        "check": (["check", TE_REPORT, "--scenario", "grouped_mlp", "--json", tmp_path / "j.json"], None),
        "merge": (["merge", rank_folder, "--json", tmp_path / "m.json"], 0),
        "schema": (["schema"], 0),
        "baseline": (["baseline", "update", current, "--into", tmp_path / "base.json"], 0),
    }
    for name, (args, code) in commands.items():
        proc, mods = run(*args, cwd=tmp_path)
        if code is not None:
            assert proc.returncode == code, (name, proc.stderr[-2000:])
        else:  # judged: pass, fail or an error case the report holds (3); never bad input (2)
            assert proc.returncode in (0, 1, 3), (name, proc.stderr[-2000:])
        assert "memaudit" in mods, name
        assert not mods & set(HEAVY), f"memaudit {name} imported {sorted(mods & set(HEAVY))}"
    assert json.loads((tmp_path / "m.json").read_text())["dist"]
    assert json.loads((tmp_path / "base.json").read_text())["cases"]
    assert (tmp_path / "c.md").read_text().strip()
    assert json.loads((tmp_path / "j.json").read_text())["cases"]
