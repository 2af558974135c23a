"""An extension shipped by a package that is not memaudit (``tests/_third_party.py``: ``memaudit_attn``,
registered by its ``.dist-info`` entry point under ``memaudit.extensions``) enters through the same
door as TE's: its target (shape seq x heads x head_dim) runs end to end through the command line
(``run --target attn``, its options, its ``--help``), a scenario with its keys and byte variables,
``compare`` and the pytest plugin; its command joins ``memaudit``; its section joins ``doctor``.
memaudit's code names it nowhere.

Each command runs in a child process with the package's folder on ``PYTHONPATH`` (about 15 s in all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._third_party import install

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("thirdparty"))


def memaudit(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "memaudit", *args], capture_output=True, text=True, env=env, cwd=cwd or ROOT, timeout=300
    )


def test_memaudit_names_the_package_nowhere() -> None:
    """Control: the target is the package's, not memaudit's."""
    assert not any("memaudit_attn" in p.read_text(encoding="utf-8") for p in (ROOT / "memaudit").rglob("*.py"))
    assert "memaudit_attn" not in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_run_help_shows_the_targets_own_dimensions(site: Path) -> None:
    out = memaudit(site, "run", "--target", "attn", "--help")
    assert out.returncode == 0, out.stderr
    for option in ("--seq", "--heads", "--head-dim"):
        assert option in out.stdout
    for option in ("--tokens", "--hidden", "--ffn", "--activation"):  # the built-ins' are not offered
        assert option not in out.stdout


def test_run_and_compare_end_to_end(site: Path, tmp_path: Path) -> None:
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    out = memaudit(site, "run", "--target", "attn", "--groups", "1,2", "--seq", "64", "--json", str(base))
    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(base.read_text(encoding="utf-8"))
    assert [c["id"] for c in report["cases"]] == ["attn/bf16/g1/s64-n2-d8/fp32", "attn/bf16/g2/s64-n2-d8/fp32"]
    assert report["cases"][0]["totals"]["saved_bytes"] == 64 * 16 * 4  # the Linear's input, fp32
    refused = memaudit(site, "run", "--target", "attn", "--tokens", "64")
    assert refused.returncode == 2 and "--tokens" in refused.stderr
    assert (
        memaudit(site, "run", "--target", "attn", "--groups", "1,2", "--seq", "64", "--json", str(new)).returncode == 0
    )
    compared = memaudit(site, "compare", str(base), str(new))
    assert compared.returncode == 0, compared.stderr + compared.stdout
    assert "over 2 compared cases" in compared.stdout  # the reports were read (their ids checked against the target)


def test_a_scenario_with_the_targets_keys(site: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "attn.toml"
    scenario.write_text(
        '[cases]\ntarget = "attn"\nrecipes = ["bf16"]\ngroups = [1]\nseq = 64\nheads = 2\nhead_dim = 8\n'
        'dtype = "fp32"\n\n[[budget]]\nname = "the input only"\nmax_bytes = "seq * heads * head_dim * elt"\n',
        encoding="utf-8",
    )
    out = memaudit(site, "run", "--scenario", str(scenario))
    assert out.returncode == 0, out.stderr + out.stdout
    assert "the input only" in out.stdout
    tight = tmp_path / "tight.toml"
    tight.write_text(scenario.read_text(encoding="utf-8").replace("* elt", "* elt - 1"), encoding="utf-8")
    assert memaudit(site, "run", "--scenario", str(tight)).returncode == 1  # control: the budget can fail


def test_the_pytest_plugin_audits_the_packages_model(site: Path, tmp_path: Path) -> None:
    test = tmp_path / "test_attn.py"
    test.write_text(
        "import pytest\n"
        "from memaudit.targets.registry import get_target\n\n"
        "@pytest.mark.saved_budget(max_bytes='4 KiB')\n"
        "def test_attn(saved_tensors):\n"
        "    target = get_target('attn')\n"
        "    built = target.build(target.spec('bf16', 1, seq=64, heads=2, head_dim=8))\n"
        "    built.forward(saved_tensors)\n\n"
        "@pytest.mark.saved_budget(max_bytes='4095 B')\n"
        "def test_attn_tight(saved_tensors):\n"
        "    target = get_target('attn')\n"
        "    target.build(target.spec('bf16', 1, seq=64, heads=2, head_dim=8)).forward(saved_tensors)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert "1 failed, 1 passed" in out.stdout, out.stdout + out.stderr
    assert "test_attn_tight" in out.stdout


def test_its_command_joins_memaudit(site: Path) -> None:
    listed = memaudit(site, "--help")
    assert listed.returncode == 0 and "attn-info" in listed.stdout
    out = memaudit(site, "attn-info", "--heads", "4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "attn: Q/K/V projections, 4 heads"
    assert "attn-info" not in memaudit(ROOT, "--help").stdout  # control: without the package, no such command


def test_its_doctor_section_is_shown_beside_tes(site: Path) -> None:
    out = memaudit(site, "doctor")
    assert out.returncode == 0, out.stderr
    assert "attn extension: ready" in out.stdout
    assert "environment" in out.stdout  # TE's section, through the same door
    assert "attn extension" not in memaudit(ROOT, "doctor").stdout


def test_a_broken_extension_is_named_and_exit_2(tmp_path: Path) -> None:
    """An extension whose declared command does not load is bad input, named, never a traceback."""
    site = install(tmp_path)
    (site / "memaudit_attn" / "commands.py").write_text("raise ImportError('no typer here')\n", encoding="utf-8")
    out = memaudit(site, "--help")
    assert out.returncode == 2
    assert "memaudit_attn.commands:register does not load" in out.stderr and "Traceback" not in out.stderr
