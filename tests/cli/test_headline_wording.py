"""The headline ``memaudit run --recipe nvfp4`` as a new user reads it: its note says why the
reference target cannot run the recipe without reading as if bf16 was used, its follow-up command
offers TE PR #3545's shape when the run was at the toy default one, and its markdown does not
tick a run that exits 4 (nothing measured or emulated)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.judge import exitcodes
from memaudit.spec import CaseSpec
from memaudit.te.machine.fallback import at_pr3545_shape, emulate_command, estimate_command
from memaudit.te.targets.reference import ReferenceTarget

PR_DIMS = "--tokens 82944 --hidden 3072 --ffn 1536"


def _spec(recipe: str) -> CaseSpec:
    return CaseSpec("te-grouped-mlp", recipe, 4, (("tokens", 1024), ("hidden", 256), ("ffn", 512)), "bf16", "cpu", {})


def test_the_reference_note_does_not_read_as_if_bf16_was_used() -> None:
    reason = ReferenceTarget().skip_reason(_spec("nvfp4").replace(target="reference"))
    assert reason is not None and not reason.rstrip().endswith("bf16")
    assert "runs bf16 only, not nvfp4" in reason and "compute capability 10.0" in reason


def test_the_follow_up_commands_at_pr3545s_shape() -> None:
    emulate = at_pr3545_shape(emulate_command(_spec("nvfp4")))
    assert emulate.endswith(f"--recipe nvfp4 --groups 4 {PR_DIMS} --cudnn-frontend 1.26.0"), emulate
    assert at_pr3545_shape(estimate_command(_spec("nvfp4"))).endswith(f"{PR_DIMS} --diff pr3545")
    assert at_pr3545_shape(estimate_command(_spec("mxfp8"))).endswith(PR_DIMS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the answers with no GPU")
def test_an_all_estimated_run_offers_the_pr_shape_and_its_markdown_is_no_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU-only torch build: only the estimate answers
    md = tmp_path / "r.md"
    result = CliRunner().invoke(
        app,
        ["run", "-v", "--recipe", "nvfp4", "--groups", "4", "--quiet", "--markdown", str(md)],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == exitcodes.NOTHING_MEASURED, result.output
    assert "use bf16" not in result.stderr
    assert "at TE PR #3545's shape (T=82,944, H=3,072, F=1,536; where NVFP4 keeps about 136 MiB" in result.stderr
    assert f"memaudit estimate --recipe nvfp4 --groups 4 {PR_DIMS} --diff pr3545" in result.stderr
    head = md.read_text(encoding="utf-8").splitlines()[1]
    assert not head.startswith("✅") and head.startswith("❌"), head
    assert "nothing measured or emulated" in head and "1 ok (1 estimated)" in head
    # a shape of the user's own: no offer of another
    result = CliRunner().invoke(
        app,
        ["run", "--recipe", "nvfp4", "--groups", "4", "--tokens", "512", "--hidden", "64", "--ffn", "128", "--quiet"],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 4 and "PR #3545" not in result.stderr
