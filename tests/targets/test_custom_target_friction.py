"""Custom targets as a new user meets them: a module in the current folder that the console
script cannot import gets the ``PYTHONPATH=.`` hint; a factory whose spec is optional is not given
grouped-MLP ids; a factory that builds bf16 runs as a bf16 case without ``--dtype bf16``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.errors import UsageError
from memaudit.targets import custom

GPT = """
import torch

def build(spec=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to(torch.{dtype})
    return model, torch.randn(8, 32, dtype=torch.{dtype}, requires_grad=True)

def build_told(spec):
    return build()
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder with ``gpt_demo.py`` (bf16) as the current folder, not on ``sys.path``."""
    (tmp_path / "gpt_demo.py").write_text(GPT.format(dtype="bfloat16"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "gpt_demo", raising=False)
    custom.takes_spec.cache_clear()
    yield tmp_path
    custom.takes_spec.cache_clear()


def test_a_module_in_the_current_folder_gets_the_pythonpath_hint(project: Path) -> None:
    with pytest.raises(UsageError) as info:
        custom.load_factory("gpt_demo:build")
    assert "gpt_demo.py is in the current folder" in str(info.value) and "PYTHONPATH=." in str(info.value)
    with pytest.raises(UsageError) as info:  # a module that is nowhere: no hint that would mislead
        custom.load_factory("not_here_at_all:build")
    assert "PYTHONPATH" not in str(info.value)


def test_optional_spec_no_grouped_mlp_ids_and_the_built_dtype(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(project))
    assert custom.takes_spec("gpt_demo:build") is False and custom.takes_spec("gpt_demo:build_told") is True
    result = CliRunner().invoke(
        app, ["run", "--target", "gpt_demo:build", "--quiet", "--json", "r.json"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "gpt_demo:build/bf16" in result.stdout and "/g1/" not in result.stdout and "t1024" not in result.stdout
    # --dtype given and not what the factory builds: an error cell that says how to fix it
    result = CliRunner().invoke(
        app, ["run", "--target", "gpt_demo:build", "--dtype", "fp32", "--quiet"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 3 and "run with --dtype bf16" in result.output, result.output
    # a dimension flag for a factory that is not told one: refused, saying why
    result = CliRunner().invoke(app, ["run", "--target", "gpt_demo:build", "--tokens", "64"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "takes no required case spec" in result.stderr, result.output


def test_an_fp32_factory_stays_fp32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpt_fp32.py").write_text(GPT.format(dtype="float32"))
    monkeypatch.syspath_prepend(str(tmp_path))
    custom.takes_spec.cache_clear()
    assert custom.CustomTarget("gpt_fp32:build").defaults["dtype"] == "fp32"
    assert custom.CustomTarget("gpt_fp32:build_told").defaults["dtype"] == "fp32"  # told the spec: fp32 unless --dtype
