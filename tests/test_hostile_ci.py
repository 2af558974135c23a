"""Hostile input aimed at what runs in other people's CI: ``merge`` with a forged world size, a
huge error reason in ``compare --markdown``, a 10,000-digit integer in a scenario, a broken
classifier plugin, a third party's ``SystemExit``, and ``--json -``.

Each case keeps the bad-input promises: a clear ``error:`` line and the documented exit status,
no traceback, bounded time, nothing written where nothing should be.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.ranks import DistRun
from memaudit.runner import run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target


def _invoke(*argv: str) -> tuple[int, str, float]:
    start = time.perf_counter()
    result = CliRunner().invoke(app, list(argv))
    took = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, out, took


# ---- merge with a forged world size ----------------------------------------------------------------------
def _forged_rank_files(tmp: Path, world: int) -> list[str]:
    """Two genuine rank files of a 2-rank data-parallel run of the reference target, their world
    size (the run's and every case's) then forged to ``world``."""
    tgt = get_target("reference")
    spec = CaseSpec.make(tgt, "bf16", 1, dtype="bf16", device="cpu", options=tgt.configure({}), tokens=64, hidden=16, ffn=32)
    names = []
    for r in range(2):
        rep = run_matrix(tgt, [spec], rank=r, world_size=2, backend="gloo", backward=False)
        rep.created = "2026-01-01T00:00:00Z"
        rep.dist = DistRun(2, [spec.id], r, "run-1", True)
        d = json.loads(rep.to_json())
        d["dist"]["world_size"] = world
        for c in d["cases"]:
            c["dist"]["world_size"] = world
            c["dist"]["layout"] = {"dp": world}
        (tmp / f"rank{r}.json").write_text(json.dumps(d), encoding="utf-8")
        names.append(str(tmp / f"rank{r}.json"))
    return names


def test_merge_names_missing_ranks_as_ranges(tmp_path: Path) -> None:
    files = _forged_rank_files(tmp_path, 10**6)
    code, out, took = _invoke("merge", *files, "--json", str(tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "rank(s) 2-999999 of 1000000 wrote no report" in out
    assert len(out) < 2000 and took < 10, (len(out), took)
    assert not (tmp_path / "m.json").exists()


def test_merge_allow_missing_ranks_refuses_a_world_far_beyond_its_files(tmp_path: Path) -> None:
    files = _forged_rank_files(tmp_path, 2**20)
    code, out, took = _invoke("merge", *files, "--allow-missing-ranks", "--json", str(tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "dist.world_size" in out and "1,048,574 ranks are missing" in out, out
    assert took < 10 and not (tmp_path / "m.json").exists()
