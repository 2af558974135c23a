"""TE's grouped MLP, emulated on fake CUDA: which saved buffers TE's real backward reads.

The seed's finding with no prior knowledge: on TE 2.20.2's fused NVFP4 path (emulated sm100), the
rowwise data and ``scale_inv`` of FC1's and FC2's inputs are saved and never read, at PR #3545's
shape 127,401,984 + 15,925,248 + 63,700,992 + 7,962,624 B. Nothing is ``unknown``; the other
unread rows are named here and explained in docs/internals/te-unread.md. Each case runs in a child process
(``bench/verify/te_unread.py``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from memaudit.te.emulate import fakecuda

pytestmark = [
    pytest.mark.te,
    pytest.mark.skipif(
        torch.cuda.is_available()
        or fakecuda.unavailable() is not None
        or importlib.util.find_spec("transformer_engine") is None,
        reason="TE's backward on fake CUDA: no GPU, torch's CUDA build and TE",
    ),
]

PR_BYTES = {
    ("fc1.input", "rowwise_data"): 127_401_984,
    ("fc1.input", "scale_inv"): 15_925_248,
    ("fc2.input", "rowwise_data"): 63_700_992,
    ("fc2.input", "scale_inv"): 7_962_624,
}
"""PR #3545's description: what its prune frees per layer (T=82,944, H=3,072, F=1,536)."""


@pytest.fixture(scope="module")
def pr_cases() -> dict[int, dict[str, Any]]:
    from bench.verify.te_unread import run_case
    from memaudit.te.emulate.run import import_te_modules

    import_te_modules()
    return {g: run_case("nvfp4", g, arch="sm100", fused=True, shape="pr") for g in (4, 8)}


def _unread(case: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {(r["operand"], r["slot"]): r["bytes"] for r in case["rows"] if r["verdict"] == "unread"}


@pytest.mark.parametrize("groups", [4, 8])
def test_fused_nvfp4_saves_the_inputs_rowwise_halves_for_nothing(
    pr_cases: dict[int, dict[str, Any]], groups: int
) -> None:
    case = pr_cases[groups]
    assert case["error"] is None and case["fused"], case["error"]
    assert not [r for r in case["rows"] if r["verdict"] == "unknown"], "nothing is unknown"
    unread = _unread(case)
    inputs = {
        k: v for k, v in unread.items() if k[0] in ("fc1.input", "fc2.input") and k[1] in ("rowwise_data", "scale_inv")
    }
    assert inputs == PR_BYTES
    # The rest of what backward never reads, each explained in docs/internals/te-unread.md: the inputs'
    # rowwise amax (PR #3545 keeps it), every weight's rowwise buffers, two offset tensors.
    rest = {k for k in unread if k not in PR_BYTES}
    weights = {k for k in rest if ".weight[" in k[0]}
    assert {k[1] for k in weights} == {"_rowwise_data", "_rowwise_scale_inv", "_amax_rowwise"}
    assert len(weights) == 2 * groups * 3
    offsets = {r["storage"] for r in case["rows"] if r["operand"] in ("fc1.base_split_offsets", "fc2.input_offsets")}
    others = {
        (r["operand"], r["slot"]) for r in case["rows"] if r["verdict"] == "unread" and r["storage"] not in offsets
    }
    assert others - weights - set(PR_BYTES) == {("fc1.input", "amax"), ("fc2.input", "amax")}
    assert all(unread[k] == 8 * (groups + 1) for k in rest - weights - others)  # int64 [G+1] offsets
    # Every columnwise buffer is read, by the kernel TE's layout rules name.
    for r in case["rows"]:
        if r["slot"] in ("columnwise_data", "_columnwise_data"):
            assert r["verdict"] == "read", r


def test_the_estimators_kept_note_is_what_backward_never_reads(pr_cases: dict[int, dict[str, Any]]) -> None:
    """``fused_nvfp4_keep`` marks the rows PR #3545 prunes as kept for nothing: the measured
    verdicts say the same, row for row."""
    from memaudit.te.estimate import estimate
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    t = TEGroupedMLPTarget()
    for g, case in pr_cases.items():
        spec = t.configure({"kernels": "emulated", "arch": "sm100"}).spec("nvfp4", g, device="cuda", **case["dims"])
        noted = {(r.operand, r.slot) for r in estimate(spec).rows if "skips the rowwise prune" in (r.note or "")}
        assert noted == set(PR_BYTES)
        assert noted <= set(_unread(case))


def test_a_read_set_that_claims_both_orientations_hides_the_waste(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdicts follow the read sets: a GEMM read set taking both orientations calls the
    weights' rowwise buffers read (the proof above then fails)."""
    from bench.verify.te_unread import run_case
    from memaudit.te.capture import reads

    honest = run_case("nvfp4", 4, arch="sm100", fused=True)
    assert ("fc1.weight[0]", "_rowwise_data") in _unread(honest)
    monkeypatch.setattr(reads.Buffers, "side", lambda self, which: [*self.row, *self.col])
    both = run_case("nvfp4", 4, arch="sm100", fused=True)
    assert ("fc1.weight[0]", "_rowwise_data") not in _unread(both)


def test_after_pr_3545_the_inputs_rowwise_halves_are_neither_saved_nor_unread(tmp_path: Path) -> None:
    """TE 2.20.2's Python with PR #3545's change (the ``if not use_nvfp4:`` exception removed,
    as tests/te/test_te_history.py applies it), loaded as ``te-history --te-tree`` loads a tree: the
    inputs' rowwise data and scale_inv are not saved, and unread bytes drop by exactly their
    bytes; what stays unread is what PR #3545 leaves (docs/internals/te-unread.md)."""
    from memaudit.te.history import compat

    tree = tmp_path / "te"
    src = compat.installed_te_dir()
    for path in src.rglob("*.py"):
        if "__pycache__" not in path.parts:
            out = tree / "transformer_engine" / path.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(path.read_bytes())
    (tree / "build_tools").mkdir()
    (tree / "build_tools" / "VERSION.txt").write_text("2.20.2\n")
    fused = tree / "transformer_engine" / "pytorch" / "ops" / "fused" / "grouped_mlp.py"
    before = "            if not use_nvfp4:\n                for grouped_fc_x in (saved_fc1_x, saved_grouped_fc2_x):"
    text = fused.read_text()
    assert before in text
    fused.write_text(
        text.replace(
            before, "            if True:\n                for grouped_fc_x in (saved_fc1_x, saved_grouped_fc2_x):"
        )
    )
    root = Path(__file__).resolve().parents[2]
    for name, args in (("fixed", ["--te-tree", str(tree), "--cache", str(tmp_path / "cache")]), ("released", [])):
        subprocess.run(
            [
                sys.executable,
                str(root / "bench" / "verify" / "te_unread.py"),
                "--recipes",
                "nvfp4",
                "--fused-only",
                "--groups",
                "4,8",
                "--shape",
                "pr",
                "--out",
                str(tmp_path / name),
                *args,
            ],
            check=True,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
        )
    from bench.verify.te_unread import unread_bytes

    fixed = json.loads((tmp_path / "fixed" / "emulated-pr.json").read_text())
    released = json.loads((tmp_path / "released" / "emulated-pr.json").read_text())
    for f, r in zip(fixed, released, strict=True):
        assert f["error"] is None and f["fused"] and f["groups"] == r["groups"]
        saved = {(row["operand"], row["slot"]) for row in f["rows"]}
        assert not saved & set(PR_BYTES)
        assert not [row for row in f["rows"] if row["verdict"] == "unknown"]
        assert not [
            row
            for row in f["rows"]
            if row["verdict"] == "unread"
            and row["operand"].endswith(".input")
            and row["slot"] in ("rowwise_data", "scale_inv", "columnwise_data", "columnwise_scale_inv")
        ]
        assert unread_bytes(r) - unread_bytes(f) == sum(PR_BYTES.values())
